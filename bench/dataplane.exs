# The MessagePack data plane (issue 19): what a recall costs over it compared with the recall
# itself, and a load run of many TCP clients.
#
#   MIX_ENV=test mix run bench/dataplane.exs -- [--recalls 500] [--clients 100] [--requests 100] [--embedder hash|model]
#
# 1. The same recall, interleaved: `SoulMemWeb.Operations.run(id, "recall", ...)` in this VM
#    (the recall and its rendering) and the request over TCP from a client in this VM (frame
#    encoding on both sides, gen_tcp, the connection process, decoding of the reply). The
#    difference is the data plane's own cost.
# 2. `soul_tune dataplane` (the Rust rmp-serde client) against it: every operation, its own
#    recall round trips, and --clients connections × --requests recalls, counting every reply.
{opts, _, _} =
  OptionParser.parse(System.argv() -- ["--"],
    strict: [recalls: :integer, clients: :integer, requests: :integer, embedder: :string]
  )

n = opts[:recalls] || 500
embedder = String.to_existing_atom(opts[:embedder] || "hash")
if embedder == :model, do: {:ok, _} = SoulMem.Embedding.ensure_loaded()

# A benchmark measures throughput, not the limiter.
Application.put_env(:soul_mem_web, :rate_limits, %{ip: {100_000, 1_000_000}, token: {100_000, 1_000_000}})

id = "dp-bench-#{System.unique_integer([:positive])}"
demo = Path.expand("../fixtures/characters/demo.json", __DIR__)
Application.put_env(:soul_mem_web, :characters, %{id => [graph: demo, persist: false, embedder: embedder]})
{:ok, token} = SoulMemWeb.Tokens.create(id)
{:ok, _} = SoulMemWeb.DataPlane.start_link(port: 0, max_connections: 1024)
{:ok, _} = SoulMemWeb.Operations.ensure_character(id)
{:ok, _} = SoulMem.info(id, 120_000)
port = SoulMemWeb.DataPlane.port()
questions = ~w(小白 麻辣烫 辫子 考试 雨天 猫 生日 图书馆 老街 秘密)

{:ok, socket} = :gen_tcp.connect(~c"127.0.0.1", port, [:binary, packet: 4, active: false, nodelay: true])

over_tcp = fn q, ref ->
  frame = SoulMem.MsgPack.encode!(%{op: "recall", ref: ref, character: id, token: token, args: %{text: q}})
  :ok = :gen_tcp.send(socket, frame)
  {:ok, bytes} = :gen_tcp.recv(socket, 0, 30_000)
  {:ok, %{"ok" => true}} = SoulMem.MsgPack.decode(bytes)
  byte_size(bytes)
end

time = fn fun ->
  t0 = System.monotonic_time(:microsecond)
  result = fun.()
  {System.monotonic_time(:microsecond) - t0, result}
end

median = fn list -> list |> Enum.sort() |> Enum.at(div(length(list), 2)) end
p99 = fn list -> list |> Enum.sort() |> Enum.at(min(length(list) - 1, floor(0.99 * length(list)))) end

# warm-up
for q <- questions, do: over_tcp.(q, 0)

{direct, tcp, sizes} =
  Enum.reduce(1..n, {[], [], []}, fn i, {d, t, s} ->
    q = Enum.at(questions, rem(i, length(questions)))
    {dt, {:ok, _}} = time.(fn -> SoulMemWeb.Operations.run(id, "recall", %{"text" => q}) end)
    {tt, size} = time.(fn -> over_tcp.(q, i) end)
    {[dt | d], [tt | t], [size | s]}
  end)

IO.puts("recall (#{embedder} embedder), #{n} interleaved rounds, reply #{median.(sizes)} bytes (median):")
IO.puts("  in the VM (Operations.run)   median #{median.(direct)} µs  p99 #{p99.(direct)} µs")
IO.puts("  over the data plane (TCP)    median #{median.(tcp)} µs  p99 #{p99.(tcp)} µs")
IO.puts("  the data plane's own cost    median #{median.(tcp) - median.(direct)} µs")

native = Path.expand("../native", __DIR__)
args = ~w(run --release --quiet -p soul_tune -- dataplane --addr 127.0.0.1:#{port} --token #{token}
          --character #{id} --clients #{opts[:clients] || 100} --requests #{opts[:requests] || 100})
{out, status} = System.cmd("cargo", args, cd: native, stderr_to_stdout: true)
IO.puts("\nsoul_tune dataplane (exit #{status}):\n" <> out)

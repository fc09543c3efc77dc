# Moving a character between nodes (issue 19, item 3): two SoulMem nodes as
# OTP :peer nodes on loopback (static list), a persisted character of
# `--notes` notes (copies of the demo's, each linked to the one before)
# running on its home node, which is then drained; reports the move's time
# as measured on the drained node (write-back, stop, transfer with SHA-256,
# start on the new node), the store file's size, and the drain's wall time.
#
#   MIX_ENV=test mix run bench/move.exs -- --notes 10000
Code.require_file("../apps/soul_mem/test/support/cluster_support.ex", __DIR__)

{opts, _, _} = OptionParser.parse(System.argv(), strict: [notes: :integer])
count = Keyword.get(opts, :notes, 10_000)

:ok = SoulMem.ClusterSupport.distribution()
root = Path.join(System.tmp_dir!(), "soul_mem_bench_#{System.unique_integer([:positive])}")
[{_, a}, {_, b}] = SoulMem.ClusterSupport.start_static([:move_a, :move_b], root)
nodes = [a, b]

for node <- nodes do
  :ok = :erpc.call(node, Application, :put_env, [:soul_mem, :persist, true])
end

templates =
  Path.expand("../fixtures/characters/demo.json", __DIR__)
  |> File.read!()
  |> SoulMem.JSON.decode!()

[link | _] = Enum.flat_map(templates, & &1["mem_links"])

graph =
  for i <- 1..count do
    note = Enum.at(templates, rem(i, length(templates)))
    links = if i > 1, do: [%{link | "from" => "n#{i}", "to" => "n#{i - 1}"}], else: []
    %{note | "id" => "n#{i}", "mem_links" => links}
  end

path = Path.join(root, "graph.json")
File.mkdir_p!(root)
File.write!(path, SoulMem.JSON.encode!(graph))

id = "mover"
home = :erpc.call(a, SoulMem.Cluster, :home, [id])
{:ok, _} = :erpc.call(home, SoulMem, :ensure_started, [id, [graph: path]], 120_000)
{:ok, info} = :erpc.call(home, SoulMem.Character, :info, [id, 120_000])
:ok = :erpc.call(home, SoulMem.Character, :force, [id, :persist, 120_000])

{us, {:ok, moves}} =
  :timer.tc(fn -> :erpc.call(a, SoulMem.Cluster, :drain, [home], :infinity) end)

{:ok, move} = moves[id]
# The new node loads the graph after the move: the first answer waits for it.
{load_us, {:ok, moved}} =
  :timer.tc(fn -> :erpc.call(a, SoulMem.Character, :info, [id, 120_000]) end)

pid = :erpc.call(a, SoulMem, :whereis, [id])

IO.puts("""
notes: #{info.stats.nodes} (after the move: #{moved.stats.nodes}, on #{node(pid)}, was #{home})
store file: #{Float.round(move.bytes / 1_048_576, 2)} MiB
move (write-back, stop, transfer + SHA-256, start there): #{move.ms} ms
drain (the whole call): #{div(us, 1000)} ms
first answer on the new node (its load) after that: #{div(load_us, 1000)} ms
""")

File.rm_rf(root)

# From the LLM's first token to the page: a scripted LLM client streams each reply in pieces
# (20 ms apart after a 20 ms "prefill") and notes the wall-clock time it hands its first piece
# on; a Node client (the official `phoenix` package, like the page) notes when the first
# `reply_delta` of the turn arrives. The difference is SoulMem's relay: the turn task, the
# socket process, the frame.
#
#   MIX_ENV=test mix run bench/first_token.exs -- [--turns 50]
#
# Needs the e5 model (scripts/setup.sh) and node (the recall part of each turn embeds the
# question; it is not timed here).
defmodule FirstTokenLLM do
  @behaviour SoulMem.LLM.Client

  @impl true
  def chat(_messages, opts) do
    pieces = ~w(记得 呀！ 那天 小白 把汤 打翻 了， 我们 笑了 好久。)
    Process.sleep(20)

    for {piece, i} <- Enum.with_index(pieces) do
      if i == 0, do: :ets.insert(:first_token, {System.unique_integer([:monotonic]), System.os_time(:microsecond)})
      if on_delta = opts[:on_delta], do: on_delta.(piece)
      Process.sleep(20)
    end

    {:ok, %{content: Enum.join(pieces), raw: %{}}}
  end
end

{opts, _, _} = OptionParser.parse(System.argv() -- ["--"], strict: [turns: :integer])
turns = opts[:turns] || 50
:ets.new(:first_token, [:named_table, :public, :ordered_set])
Application.put_env(:soul_mem, :llm_client, FirstTokenLLM)
{:ok, _} = SoulMem.Embedding.ensure_loaded()

id = "first-token-#{System.unique_integer([:positive])}"
demo = Path.expand("../fixtures/characters/demo.json", __DIR__)
Application.put_env(:soul_mem_web, :characters, %{id => [graph: demo, persist: false, embedder: :model, window: 400]})
{:ok, token} = SoulMemWeb.Tokens.create(id)
{:ok, _} = SoulMemWeb.Endpoint.start_link(port: 0)
{:ok, _} = SoulMemWeb.Operations.ensure_character(id)
{:ok, _} = SoulMem.info(id, 120_000)

env = [
  {"SOUL_SOCKET", "ws://127.0.0.1:#{SoulMemWeb.Endpoint.port()}/socket"},
  {"SOUL_TOKEN", token},
  {"SOUL_CHARACTER", id},
  {"SOUL_TURNS", Integer.to_string(turns)}
]

{out, 0} = System.cmd("node", [Path.expand("first_token.js", __DIR__)], env: env)
%{"firsts" => received} = out |> String.split("\n", trim: true) |> List.last() |> SoulMem.JSON.decode!()
sent = :ets.tab2list(:first_token) |> Enum.map(&elem(&1, 1))
delays = Enum.zip_with(received, sent, fn r, s -> (r - s) / 1000 end)

Code.require_file("bench_support.exs", __DIR__)
pct = &BenchSupport.percentile/2

IO.puts("turns: #{length(delays)}")

IO.puts(
  "LLM's first piece → client's first reply_delta: p50 #{Float.round(pct.(delays, 0.5), 2)} ms, " <>
    "p95 #{Float.round(pct.(delays, 0.95), 2)} ms, max #{Float.round(Enum.max(delays), 2)} ms"
)

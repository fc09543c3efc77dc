# One character's recall at the Elixir↔Rust boundary: how often the decay factors are reused
# and the pipeline runs under the graph's read lock, and the in-process recall latency
# (query embedding with the e5 model included: every question is new text).
#
#   mix run bench/recall_boundary.exs -- [--recalls 100]
#
# Needs the e5 model (scripts/setup.sh). The end-to-end number over the WebSocket is
# bench/ws_recall.sh.
{opts, _, _} = OptionParser.parse(System.argv() -- ["--"], strict: [recalls: :integer])
n = opts[:recalls] || 100

{:ok, _} = SoulMem.Embedding.ensure_loaded()
demo = Path.expand("../fixtures/characters/demo.json", __DIR__)
id = "boundary-bench-#{System.unique_integer([:positive])}"
{:ok, _} = SoulMem.ensure_started(id, graph: demo, persist: false, embedder: :model)
{:ok, %{embedding: :model}} = SoulMem.info(id, 120_000)
{:ok, memory} = SoulMem.Character.memory(id)
questions = ~w(小白 麻辣烫 辫子 考试 雨天 猫 生日 图书馆 老街 秘密)

Code.require_file("bench_support.exs", __DIR__)
pct = &BenchSupport.percentile/2

%{hits: h0, misses: m0} = SoulMem.Memory.decay_cache(memory)

runs =
  for i <- 1..n do
    q = "#{Enum.at(questions, rem(i, 10))}#{:rand.uniform(1_000_000_000)}"
    t0 = System.monotonic_time(:microsecond)
    {:ok, result} = SoulMem.Retrieval.recall(memory, %{text: q}, views: true)
    ms = (System.monotonic_time(:microsecond) - t0) / 1000
    :ok = SoulMem.Character.record(id, Enum.map(result.memories, & &1.id), DateTime.utc_now())
    {ms, result.lock}
  end

%{hits: h1, misses: m1} = SoulMem.Memory.decay_cache(memory)
times = Enum.map(runs, &elem(&1, 0))
reads = Enum.count(runs, &(elem(&1, 1) == :read))

IO.puts("recalls: #{n} (each followed by the character's engine_record)")
IO.puts("decay cache: #{h1 - h0} hits, #{m1 - m0} misses (#{Float.round(100 * (h1 - h0) / n, 1)}%)")
IO.puts("read lock: #{reads}/#{n}")

IO.puts(
  "engine_recall incl. query embedding: p50 #{Float.round(pct.(times, 0.5), 2)} ms, " <>
    "p95 #{Float.round(pct.(times, 0.95), 2)} ms"
)

# How a recall's cost grows with the character, outside and inside the pipeline: for each
# size a synthetic character (bench/synth_graph.py: the demo's 53 notes plus generated
# ones) is started in this VM with the hash embedder (no model: the query embedding costs
# microseconds, so what grows is everything else), then recalled with a rotation of ten
# texts after a warm-up:
#   * `SoulMem.recall/3` — the whole in-process recall (the character's snapshot, the NIF
#     recall with forgetting views, forgetting, the record, the context);
#   * `SoulMem.Retrieval.recall/3` — the NIF recall alone on the same snapshot.
#
#   mix run bench/recall_growth.exs -- [--sizes 53,1000,10000] [--recalls 300]
{opts, _, _} =
  OptionParser.parse(System.argv() -- ["--"], strict: [sizes: :string, recalls: :integer])

sizes = (opts[:sizes] || "53,1000,10000") |> String.split(",") |> Enum.map(&String.to_integer/1)
n = opts[:recalls] || 300
dir = Path.join(System.tmp_dir!(), "soul_recall_growth_#{System.unique_integer([:positive])}")
File.mkdir_p!(dir)
texts = ~w(小白 麻辣烫 辫子 考试 雨天 猫 生日 图书馆 老街 秘密)

Code.require_file("bench_support.exs", __DIR__)
pct = &BenchSupport.percentile/2

timed = fn f ->
  t0 = System.monotonic_time(:microsecond)
  {:ok, _} = f.()
  (System.monotonic_time(:microsecond) - t0) / 1000
end

IO.puts("| notes | `SoulMem.recall` p50 / p99 ms | NIF recall alone p50 / p99 ms |")
IO.puts("|---|---|---|")

for size <- sizes do
  graph = Path.join(dir, "graph_#{size}.json")
  script = Path.expand("synth_graph.py", __DIR__)
  {_, 0} = System.cmd("python3", [script, "--nodes", "#{size}", "--out", graph])
  id = "growth-#{size}-#{System.unique_integer([:positive])}"
  {:ok, _} = SoulMem.ensure_started(id, graph: graph, persist: false, embedder: :hash)
  {:ok, %{embedding: :hash}} = SoulMem.info(id, 600_000)
  {:ok, memory} = SoulMem.Character.memory(id)
  whole = fn i -> timed.(fn -> SoulMem.recall(id, %{text: Enum.at(texts, rem(i, 10))}) end) end

  alone = fn i ->
    timed.(fn ->
      SoulMem.Retrieval.recall(memory, %{text: Enum.at(texts, rem(i, 10))}, views: true)
    end)
  end

  Enum.each(1..30, fn i -> whole.(i) && alone.(i) end)
  {w, a} = Enum.map(1..n, fn i -> {whole.(i), alone.(i)} end) |> Enum.unzip()
  r = &Float.round(&1, 2)

  IO.puts(
    "| #{size} | #{r.(pct.(w, 0.5))} / #{r.(pct.(w, 0.99))} | #{r.(pct.(a, 0.5))} / #{r.(pct.(a, 0.99))} |"
  )

  SoulMem.stop(id)
end

File.rm_rf!(dir)

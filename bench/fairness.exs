# Fairness of embedding: how much one character's large import (embedded with the model in
# the background) delays another character's recall, and the model's bulk throughput.
#
#   mix run bench/fairness.exs -- [--notes 5000] [--seconds 90] [--desc-chars 200]
#
# Needs the e5 model (scripts/setup.sh). Uses a fresh embedding cache, so nothing is cached.
{opts, _, _} =
  OptionParser.parse(System.argv() -- ["--"],
    strict: [notes: :integer, seconds: :integer, desc_chars: :integer]
  )

notes = opts[:notes] || 5_000
seconds = opts[:seconds] || 90
desc_chars = opts[:desc_chars] || 200

cache =
  Path.join(System.tmp_dir!(), "soul_mem_fairness_#{System.unique_integer([:positive])}.sqlite3")

{:ok, model} = SoulMem.Embedding.load(cache_path: cache)
demo = Path.expand("../fixtures/characters/demo.json", __DIR__)
questions = ~w(小白 麻辣烫 辫子 考试 雨天 猫 生日 图书馆 老街 秘密)

Code.require_file("bench_support.exs", __DIR__)
pct = &BenchSupport.percentile/2

# Every question is new text (as a chat message is): its query embedding is computed, not
# found in the cache.
time_recall = fn id, q ->
  q = "#{q}#{:rand.uniform(1_000_000_000)}"
  t0 = System.monotonic_time(:microsecond)
  {:ok, result} = SoulMem.recall(id, %{text: q}, timeout: 60_000, forgetting: [enabled: false])
  {(System.monotonic_time(:microsecond) - t0) / 1000, result.embedding}
end

graph = fn n, salt ->
  filler = String.duplicate("她说过的话和做过的事", div(desc_chars, 10) + 1) |> String.slice(0, desc_chars)

  nodes =
    for i <- 1..n do
      %{
        "id" => "sem_#{i}",
        "tags" => [],
        "mem_type" => %{
          "Semantic" => %{
            "content" => "第#{i}个回忆#{salt}",
            "aliases" => [],
            "concept_type" => "Entity",
            "description" => "编号#{i}：#{filler}。#{salt}"
          }
        },
        "mem_links" => []
      }
    end

  path = Path.join(System.tmp_dir!(), "soul_mem_fairness_#{salt}.json")
  File.write!(path, SoulMem.JSON.encode!(nodes))
  path
end

IO.puts(
  "model #{model}; importing character: #{notes} notes, descriptions of #{desc_chars} chars"
)

# Throughput of the bulk path (prefill), on its own.
{:ok, sample} =
  SoulMem.Memory.import_file("fair_sample", graph.(200, "tp#{:rand.uniform(1_000_000)}"))

t0 = System.monotonic_time(:millisecond)
{:ok, computed} = SoulMem.Embedding.prefill(sample, progress: spawn(fn -> :ok end))
tp_s = (System.monotonic_time(:millisecond) - t0) / 1000

IO.puts(
  "bulk embedding: #{computed} texts in #{Float.round(tp_s, 1)} s = #{Float.round(computed / tp_s, 1)} texts/s"
)

{:ok, _} =
  SoulMem.Characters.ensure_started("fair_a", graph: demo, embedder: :model, persist: false)

for q <- questions, do: time_recall.("fair_a", q)
baseline = for _ <- 1..5, q <- questions, do: elem(time_recall.("fair_a", q), 0)

IO.puts(
  "recall of another character, alone: p50 #{Float.round(pct.(baseline, 0.5), 1)} ms, " <>
    "p99 #{Float.round(pct.(baseline, 0.99), 1)} ms (#{length(baseline)} recalls)"
)

path = graph.(notes, "big#{:rand.uniform(1_000_000)}")
t_start = System.monotonic_time(:millisecond)

{:ok, _} =
  SoulMem.Characters.ensure_started("fair_b", graph: path, embedder: :model, persist: false)

started_ms = System.monotonic_time(:millisecond) - t_start
:ok = SoulMem.Character.subscribe("fair_b")
deadline = System.monotonic_time(:millisecond) + seconds * 1000

loop = fn loop, a, b ->
  done? =
    receive do
      {:soul_mem, "fair_b", :embedded, _} -> true
    after
      0 -> false
    end

  if done? or System.monotonic_time(:millisecond) > deadline do
    {a, b, done?}
  else
    # A chat's pace, a little faster: both characters recall every 200 ms.
    Process.sleep(200)
    q = Enum.random(questions)
    {ta, _} = time_recall.("fair_a", q)
    {tb, eb} = time_recall.("fair_b", "第#{:rand.uniform(notes)}个回忆")
    loop.(loop, [ta | a], [{tb, eb} | b])
  end
end

{during, b_recalls, done?} = loop.(loop, [], [])
partial = Enum.count(b_recalls, fn {_, e} -> e == :partial end)
b_times = Enum.map(b_recalls, &elem(&1, 0))

IO.puts("importing character serving after #{started_ms} ms (hash index first)")

IO.puts(
  "recall of another character while it embeds: p50 #{Float.round(pct.(during, 0.5), 1)} ms, " <>
    "p99 #{Float.round(pct.(during, 0.99), 1)} ms (#{length(during)} recalls); " <>
    "p99 delay over alone: #{Float.round(pct.(during, 0.99) - pct.(baseline, 0.99), 1)} ms"
)

IO.puts(
  "recall of the importing character meanwhile: p50 #{Float.round(pct.(b_times, 0.5), 1)} ms, " <>
    "p99 #{Float.round(pct.(b_times, 0.99), 1)} ms, #{partial}/#{length(b_recalls)} said :partial; " <>
    "model embedding #{if done?, do: "finished", else: "still running after the #{seconds} s budget"}"
)

File.rm(path)

defmodule SoulMem.Eval.ConsolidationSuite do
  @moduledoc """
  The consolidate suite: scripted conversations run through window →
  summaries → consolidation, then checked.

  Dialogue files use the seed's daily-dialogue format
  (`{"name", "graph_path", "role", "conversations": [{"user_message"}]}`)
  with optional extensions: `"assistant_message"` per turn, `"sessions"`
  (a list of conversation lists, each followed by one consolidation) and
  `"expect"`: `{"entities": [names], "abstract": true}`. `graph_path`
  (relative to the file) names a Graph JSON file to start from; anything
  else starts from an empty graph.

  Per turn the user message is pushed into a `SoulMem.Window`, recalled
  against the graph (the returned notes become retrieval records), the
  assistant message (if any) pushed, and due summary jobs run with the LLM.
  After each session `SoulMem.Consolidation.run/2` consolidates. Checks:

    * `entities` — every expected entity is a Semantic node (content or
      alias, NFKC-normalised, case and punctuation ignored);
    * `duplicates` — groups of Semantic nodes sharing a name (must be 0);
    * `linked` — created notes linked (either way) to an active note;
    * `abstract` — patterns induced (must be ≥ 1 when `expect.abstract`).
  """

  alias SoulMem.{Consolidation, Embedding, JSON, LLM, Memory, Retrieval, Window}

  @run_opts [
    summary_llm: [],
    extraction_llm: [],
    window: 12,
    embedder: :hash,
    consolidation: [],
    dump: nil
  ]

  @doc "Reads a dialogue file, or every `*.json` file of a directory (sorted)."
  @spec load(Path.t()) :: {:ok, [map()]} | {:error, String.t()}
  def load(path) do
    files =
      if File.dir?(path),
        do: path |> Path.join("*.json") |> Path.wildcard() |> Enum.sort(),
        else: [path]

    Enum.reduce_while(files, {:ok, []}, fn file, {:ok, acc} ->
      with {:ok, bin} <- File.read(file),
           {:ok, %{"conversations" => c} = d} when is_list(c) <- JSON.decode(bin) do
        {:cont, {:ok, [Map.put(d, "file", file) | acc]}}
      else
        {:error, reason} -> {:halt, {:error, "#{file}: #{inspect(reason)}"}}
        _ -> {:halt, {:error, "#{file}: not a dialogue file (no \"conversations\" list)"}}
      end
    end)
    |> case do
      {:ok, acc} -> {:ok, Enum.reverse(acc)}
      error -> error
    end
  end

  @doc """
  Runs `dialogues` and returns `%{dialogues: [result], totals: map}`.

  Options: `:summary_llm`, `:extraction_llm` (options for
  `SoulMem.LLM.chat/2`, default the application env), `:window` (capacity,
  12), `:embedder` (`:hash` default, `:model`), `:consolidation` (options
  for `SoulMem.Consolidation.run/2`), `:dump` (a directory: every applied
  change set is written there as a case `soul_tune consolidate` replays
  without an LLM, see `dump_case/3`).
  """
  @spec run([map()], keyword()) :: %{dialogues: [map()], totals: map()}
  def run(dialogues, opts \\ []) do
    opts = Keyword.validate!(opts, @run_opts)
    results = Enum.map(dialogues, &run_one(&1, opts))

    totals =
      Enum.reduce(results, %{}, fn r, acc ->
        Map.merge(
          acc,
          Map.take(r, [
            :turns,
            :summaries,
            :created,
            :merged,
            :linked,
            :induced,
            :duplicates,
            :failed
          ]),
          fn _k, a, b -> a + b end
        )
      end)

    %{dialogues: results, totals: Map.put(totals, :passed, Enum.count(results, & &1.passed))}
  end

  defp run_one(dialogue, opts) do
    name = dialogue["name"] || Path.basename(dialogue["file"] || "dialogue")
    memory = graph(dialogue, name)
    {:ok, _} = Embedding.embed_graph(memory, embedder: opts[:embedder])
    sessions = dialogue["sessions"] || [dialogue["conversations"]]
    start = ~U[2026-06-01 08:00:00Z]
    last = length(sessions) - 1

    acc = %{
      turns: 0,
      summaries: 0,
      created: [],
      merged: 0,
      linked: 0,
      induced: 0,
      failed: 0,
      errors: [],
      linked_to_active: 0
    }

    acc =
      sessions
      |> Enum.with_index()
      |> Enum.reduce(acc, fn {turns, day}, acc ->
        base = DateTime.add(start, day * 86_400, :second)
        dump = dump_target(opts[:dump], dialogue, name, day, day == last, opts[:embedder])
        session(memory, turns, base, acc, Keyword.put(opts, :dump, dump))
      end)

    {:ok, duplicates} = Consolidation.duplicates(memory)
    entities = Map.get(dialogue["expect"] || %{}, "entities", [])
    missing = missing_entities(memory, entities)
    want_abstract = Map.get(dialogue["expect"] || %{}, "abstract", false)

    checks = %{
      entities: %{
        expected: length(entities),
        found: length(entities) - length(missing),
        missing: missing
      },
      duplicates: length(duplicates),
      linked: %{created: length(acc.created), linked_to_active: acc.linked_to_active},
      abstract: %{induced: acc.induced, expected: want_abstract}
    }

    passed =
      missing == [] and duplicates == [] and acc.failed == 0 and
        (not want_abstract or acc.induced > 0)

    %{
      name: name,
      turns: acc.turns,
      summaries: acc.summaries,
      created: length(acc.created),
      merged: acc.merged,
      linked: acc.linked,
      induced: acc.induced,
      duplicates: length(duplicates),
      failed: acc.failed,
      errors: acc.errors,
      checks: checks,
      passed: passed
    }
  end

  defp graph(%{"graph_path" => p, "file" => file}, name) when is_binary(p) do
    path = Path.expand(p, Path.dirname(file))

    if File.regular?(path) and Path.extname(path) == ".json",
      do: Memory.import_file!(name, path),
      else: Memory.new(name)
  end

  defp graph(_dialogue, name), do: Memory.new(name)

  defp session(memory, turns, base, acc, opts) do
    {window, records, acc} =
      turns
      |> Enum.with_index()
      |> Enum.reduce({Window.new(capacity: opts[:window]), %{}, acc}, fn {turn, i},
                                                                         {w, rec, acc} ->
        at = DateTime.add(base, i * 60, :second)
        {w, rec} = user_turn(memory, w, rec, turn["user_message"], at)

        w =
          case turn["assistant_message"] do
            text when is_binary(text) and text != "" ->
              {:ok, w} =
                Window.push(w, %{role: :assistant, text: text, at: DateTime.add(at, 5, :second)})

              w

            _ ->
              w
          end

        {w, n} = summaries(w, opts[:summary_llm], 0)
        {w, rec, %{acc | turns: acc.turns + 1, summaries: acc.summaries + n}}
      end)

    snapshot = %{memory: memory, window: window, records: records, llm: opts[:extraction_llm]}
    now = DateTime.add(base, 3600 * 12, :second)

    consolidation =
      opts[:consolidation]
      |> Keyword.put(:now, now)
      |> Keyword.merge(dump_hook(opts[:dump], memory))

    case Consolidation.run(snapshot, consolidation) do
      {:ok, :empty} ->
        acc

      {:ok, r} ->
        active = r.report["active"]
        linked = Enum.count(r.created, fn c -> Enum.any?(active, &linked?(memory, c, &1)) end)

        %{
          acc
          | created: acc.created ++ r.created,
            merged: acc.merged + length(r.report["merged"]),
            linked: acc.linked + r.linked,
            induced: acc.induced + length(r.report["induced"]),
            linked_to_active: acc.linked_to_active + linked
        }

      {:error, reason} ->
        %{acc | failed: acc.failed + 1, errors: acc.errors ++ [inspect(reason, limit: 10)]}
    end
  end

  defp dump_target(nil, _dialogue, _name, _index, _last?, _embedder), do: nil

  defp dump_target(dir, dialogue, name, index, last?, embedder) do
    expect = if last?, do: dialogue["expect"] || %{}, else: %{}

    %{
      dir: dir,
      base: Path.basename(dialogue["file"] || name, ".json"),
      dialogue: name,
      index: index,
      expect: expect,
      embedder: Atom.to_string(embedder)
    }
  end

  # The graph is exported before the LLM is asked: nothing else writes it meanwhile, so it is
  # the graph the change set is applied to.
  defp dump_hook(nil, _memory), do: []

  defp dump_hook(target, memory) do
    graph = Memory.export_json!(memory)
    [on_apply: &dump_case(target, Map.put(&1, :graph, graph), memory.character)]
  end

  @doc """
  Writes one applied change set as a replayable case: `<base>.<index>.graph.json`
  (the Graph JSON export the change set was applied to) and `<base>.<index>.case.json`
  with `dialogue`, `index`, `character`, `graph` (file name, relative to the case),
  `embedder` (`"hash"` or `"model"`), `config` and `changes` (the JSON handed to
  the core, decoded), `expect` (the dialogue's, on its last consolidation only)
  and `recorded` (the core's report). Returns the case path.
  """
  @spec dump_case(
          map(),
          %{change: binary(), config: binary(), report: map(), graph: binary()},
          String.t()
        ) ::
          Path.t()
  def dump_case(target, applied, character) do
    stem = "#{target.base}.#{target.index}"
    graph_file = stem <> ".graph.json"
    File.mkdir_p!(target.dir)
    File.write!(Path.join(target.dir, graph_file), applied.graph)

    doc = %{
      "suite" => "consolidate",
      "format" => 1,
      "dialogue" => target.dialogue,
      "index" => target.index,
      "character" => character,
      "graph" => graph_file,
      "embedder" => target.embedder,
      "config" => JSON.decode!(applied.config),
      "changes" => JSON.decode!(applied.change),
      "expect" => target.expect,
      "recorded" => Map.delete(applied.report, "indexed")
    }

    path = Path.join(target.dir, stem <> ".case.json")
    File.write!(path, JSON.encode!(doc))
    path
  end

  defp user_turn(memory, window, records, text, at) when is_binary(text) and text != "" do
    {:ok, window} = Window.push(window, %{role: :user, text: text, at: at})

    short = %{
      messages: Enum.map(Window.visible(window), & &1.text),
      summary: Window.summary(window)
    }

    case Retrieval.run(memory, Retrieval.text_queries(text), short: short) do
      {:ok, found} ->
        ids = Enum.map(found.memories ++ found.actions, & &1.id)
        Retrieval.record(memory, ids, at)

        {window,
         Enum.reduce(ids, records, fn id, acc -> Map.update(acc, id, [at], &(&1 ++ [at])) end)}

      {:error, _} ->
        {window, records}
    end
  end

  defp user_turn(_memory, window, records, _text, _at), do: {window, records}

  defp summaries(window, llm, n) do
    case Window.next_job(window) do
      {:ok, job, window} ->
        case LLM.chat(Window.prompt(job, Window.summary(window)), llm) do
          {:ok, %{content: summary}} ->
            case Window.complete(window, job.id, String.trim(summary)) do
              {:ok, window} -> summaries(window, llm, n + 1)
              {:error, _} -> {Window.fail(window, job.id), n}
            end

          {:error, _} ->
            {Window.fail(window, job.id), n}
        end

      :none ->
        {window, n}
    end
  end

  defp targets(memory, id) do
    case Memory.get_note(memory, id) do
      {:ok, note} -> for l <- note["mem_links"], do: l["to"]
      {:error, _} -> []
    end
  end

  defp linked?(memory, a, b), do: b in targets(memory, a) or a in targets(memory, b)

  defp missing_entities(memory, entities) do
    {:ok, json} = Memory.export_json(memory)

    names =
      for %{"mem_type" => %{"Semantic" => s}} <- JSON.decode!(json),
          name <- [s["content"] | s["aliases"] || []],
          into: MapSet.new(),
          do: norm(name)

    Enum.reject(entities, &MapSet.member?(names, norm(&1)))
  end

  defp norm(s) do
    s
    |> :unicode.characters_to_nfkc_binary()
    |> String.downcase()
    |> String.replace(~r/[^\p{L}\p{N}]/u, "")
  end

  @doc "A short human-readable report of `run/2`'s result."
  @spec format(%{dialogues: [map()], totals: map()}) :: String.t()
  def format(%{dialogues: dialogues, totals: totals}) do
    lines =
      for d <- dialogues do
        c = d.checks

        "#{if d.passed, do: "PASS", else: "FAIL"} #{d.name}: turns #{d.turns}, summaries #{d.summaries}, " <>
          "created #{d.created}, merged #{d.merged}, links #{d.linked}, " <>
          "entities #{c.entities.found}/#{c.entities.expected}, duplicates #{d.duplicates}, " <>
          "linked to active #{c.linked.linked_to_active}/#{c.linked.created}, induced #{d.induced}" <>
          if(d.errors == [], do: "", else: ", errors: " <> Enum.join(d.errors, "; "))
      end

    Enum.join(
      lines ++
        [
          "#{totals[:passed] || 0}/#{length(dialogues)} dialogues passed; totals: #{inspect(Map.delete(totals, :passed))}"
        ],
      "\n"
    )
  end
end

defmodule Mix.Tasks.Soul.Consolidate do
  @shortdoc "Runs the consolidate suite over dialogue files"

  @moduledoc """
  Runs scripted conversations through window → summaries → consolidation
  with the configured LLM (`SOUL_MEM_LLM_BASE_URL`, `SOUL_MEM_LLM_MODEL`)
  and checks the result (`SoulMem.Eval.ConsolidationSuite`):

      mix soul.consolidate ../shared/fixtures/daily_dialogues
      mix soul.consolidate dialogue.json --json report.json --window 6 --embedder model
      mix soul.consolidate dialogue.json --dump-changes fixtures/consolidate

  Options: `--json PATH` writes the full report as JSON; `--window N`
  (default 12); `--embedder hash|model` (default hash); `--base-url URL`
  and `--model NAME` override the LLM settings; `--dump-changes DIR` writes
  every applied change set with its config and the graph it was applied to
  (`<dialogue>.<consolidation>.case.json` + `.graph.json`), which
  `soul_tune consolidate DIR` replays without an LLM. Exits with status 1
  when a dialogue fails its checks.
  """

  use Mix.Task

  alias SoulMem.Eval.ConsolidationSuite

  @impl true
  def run(args) do
    {opts, paths, invalid} =
      OptionParser.parse(args,
        strict: [
          json: :string,
          window: :integer,
          embedder: :string,
          dump_changes: :string,
          base_url: :string,
          model: :string
        ]
      )

    if invalid != [] or length(paths) != 1 do
      Mix.raise(
        "usage: mix soul.consolidate <dialogue.json|dir> [--json out.json] [--window N] [--embedder hash|model] [--dump-changes DIR] [--base-url URL] [--model NAME]"
      )
    end

    Mix.Task.run("app.start")
    embedder = embedder(opts[:embedder] || "hash")

    dialogues =
      case ConsolidationSuite.load(hd(paths)) do
        {:ok, dialogues} -> dialogues
        {:error, message} -> Mix.raise(message)
      end

    llm = Keyword.take(opts, [:base_url, :model])

    report =
      ConsolidationSuite.run(dialogues,
        window: opts[:window] || 12,
        embedder: embedder,
        summary_llm: llm,
        extraction_llm: llm,
        dump: opts[:dump_changes]
      )

    Mix.shell().info(ConsolidationSuite.format(report))

    if path = opts[:json] do
      File.write!(path, SoulMem.JSON.encode!(report))
      Mix.shell().info("report written to #{path}")
    end

    if dir = opts[:dump_changes], do: Mix.shell().info("change sets written to #{dir}")

    if Enum.any?(report.dialogues, &(not &1.passed)), do: exit({:shutdown, 1})
  end

  defp embedder("hash"), do: :hash

  defp embedder("model") do
    case SoulMem.Embedding.ensure_loaded([]) do
      {:ok, _} -> :model
      {:error, e} -> Mix.raise("embedding model unavailable: #{Exception.message(e)}")
    end
  end

  defp embedder(other), do: Mix.raise("--embedder must be hash or model, got #{other}")
end

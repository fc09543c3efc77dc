defmodule SoulMem.Maintenance.ForgetSweep do
  @moduledoc """
  Maintenance task `:forget`: the idle forgetting sweep (`SoulMem.Forgetting.sweep/2`)
  on the character's graph, without any LLM — the LLM is used only lazily, on recall.

  It prunes links whose decayed intensity (`intensity × R(source)`) fell below the
  `prune_threshold`, refreshes every note's forgetting state (degree, band; a cached
  revision is dropped when its band moved on), and finds archive candidates: forgettable
  notes left without links whose missing degree reaches `archive_threshold`. Those stay in
  the graph; the character archives them in the store (never deletes) and takes them out
  of working memory.

  Changes returned (nothing is returned when the snapshot has no graph):

    * `{:graph_changed, :forget}` — only when the graph was modified in place (links
      pruned or forgetting states updated): write it back;
    * `{:archived, [readable_id]}` — only when there are archive candidates;
    * `{:forget_report, report}` — always, the sweep report (see
      `SoulMem.Forgetting.sweep/2`).

  Parameters: the application env `:forgetting` (see `SoulMem.Forgetting`).
  """

  @behaviour SoulMem.Maintenance

  @impl true
  @doc "Handles `:forget` only."
  @spec tasks() :: [SoulMem.Maintenance.task()]
  def tasks, do: [:forget]

  @impl true
  @doc "Sweeps the snapshot's graph now."
  @spec run(SoulMem.Maintenance.task(), SoulMem.Maintenance.snapshot()) ::
          {:ok, [SoulMem.Maintenance.change()]} | {:error, term()}
  def run(:forget, %{memory: nil}), do: {:ok, []}

  def run(:forget, %{memory: %SoulMem.Memory{} = memory}) do
    with {:ok, report} <- SoulMem.Forgetting.sweep(memory) do
      changed? = report["pruned"] != [] or report["states_updated"] > 0

      changes =
        if(changed?, do: [{:graph_changed, :forget}], else: []) ++
          if(report["archive"] != [], do: [{:archived, report["archive"]}], else: []) ++
          [{:forget_report, report}]

      {:ok, changes}
    end
  end
end

defmodule SoulMem.Maintenance.Consolidate do
  @moduledoc """
  Maintenance task `:consolidate`: turns the character's cumulative summary
  (and its window) into memory nodes with `SoulMem.Consolidation.run/2`.

  Returns `{:ok, []}` when the summary is empty (nothing to consolidate),
  `{:ok, [{:consolidated, info}]}` after the graph was changed, and
  `{:error, reason}` when nothing was written (LLM down, invalid output after
  the retries, a change set the graph refused): the summary stays for the
  next Idle period.

  `info` is what the character needs to finish the job:

    * `:summary` — the summary that was consumed; clear the character's
      summary only if it is still this one;
    * `:records_until` — the newest retrieval timestamp consumed (`nil`
      without records); drop records up to and including it;
    * `:created`, `:merged`, `:induced` — readable ids of new notes, of the
      existing notes new ones were merged into, of induced patterns and habits;
    * `:linked` — links added; `:attempts` — LLM attempts used;
    * `:report` — the full report of the Rust side;
    * `:duration_ms` — how long the run took.

  Options come from `config :soul_mem, :consolidation` (see
  `SoulMem.Consolidation`).
  """

  @behaviour SoulMem.Maintenance

  alias SoulMem.{Consolidation, Window}

  @impl true
  @doc "Handles `:consolidate` only."
  @spec tasks() :: [SoulMem.Maintenance.task()]
  def tasks, do: [:consolidate]

  @impl true
  @doc "Consolidates the snapshot's summary into its memory."
  @spec run(SoulMem.Maintenance.task(), SoulMem.Maintenance.snapshot()) ::
          {:ok, [SoulMem.Maintenance.change()]} | {:error, term()}
  def run(:consolidate, %{memory: memory, window: window} = snapshot) do
    if memory == nil or String.trim(Window.summary(window)) == "" do
      {:ok, []}
    else
      started = System.monotonic_time(:millisecond)

      case Consolidation.run(snapshot) do
        {:ok, :empty} ->
          {:ok, []}

        {:ok, result} ->
          info = Map.put(result, :duration_ms, System.monotonic_time(:millisecond) - started)
          {:ok, [{:consolidated, info}]}

        {:error, _} = error ->
          error
      end
    end
  end
end

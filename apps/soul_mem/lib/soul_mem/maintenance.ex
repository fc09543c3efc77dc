defmodule SoulMem.Maintenance do
  @moduledoc """
  The one extension point for a character's background work (the seed's
  定时任务: consolidation, persistence, forgetting, and retrying summaries).

  A character runs maintenance only when it is Idle (or when an operator
  forces a task, `SoulMem.force/2`), in a task under
  `SoulMem.TaskSupervisor`, so it keeps serving requests meanwhile; a request
  arriving during maintenance does not cancel it.

  Implementations are listed in the application env:

      config :soul_mem, maintenance: [SoulMem.Maintenance.SummarizePending, MyConsolidation]

  Each declares the tasks it handles (`c:tasks/0`) and runs one task on a
  snapshot of the character (`c:run/2`), returning the changes for the
  character to apply. Changes the character applies today:

    * `{:summary_done, job_id, summary}` — a summary job of the window
      completed (`SoulMem.Window.complete/3`).

  Other changes are reported to subscribers in the `:maintenance_done`
  event, for later issues to act on.
  """

  @type task :: :consolidate | :persist | :forget | :summarize_pending

  @typedoc """
  What a task sees: the character id, its memory graph, its window (with
  the summary jobs checked out for this run), its retrieval records and
  feedback, and the LLM options of the character.
  """
  @type snapshot :: %{
          character: String.t(),
          memory: SoulMem.Memory.t() | nil,
          window: SoulMem.Window.t(),
          jobs: [SoulMem.Window.Job.t()],
          records: %{String.t() => [DateTime.t()]},
          feedback: %{String.t() => [{integer(), DateTime.t()}]},
          llm: keyword()
        }

  @type change :: {:summary_done, pos_integer(), String.t()} | term()

  @doc "The tasks this implementation handles."
  @callback tasks() :: [task()]

  @doc "Runs `task` on `snapshot`; returns the changes to apply."
  @callback run(task(), snapshot()) :: {:ok, [change()]} | {:error, term()}

  @all_tasks [:summarize_pending, :consolidate, :persist, :forget]

  # Without app env (e.g. a plain `elixir` script) characters still retry
  # summaries, consolidate and forget.
  @default_implementations [
    SoulMem.Maintenance.SummarizePending,
    SoulMem.Maintenance.Consolidate,
    SoulMem.Maintenance.ForgetSweep
  ]

  @doc "Every task name, in the order an Idle character runs them."
  @spec all_tasks() :: [task()]
  def all_tasks, do: @all_tasks

  @doc "The configured implementations (`config :soul_mem, :maintenance`)."
  @spec implementations() :: [module()]
  def implementations,
    do: Application.get_env(:soul_mem, :maintenance, @default_implementations)

  @doc """
  Runs `tasks` in order with the implementations that handle them. Returns
  `{task, result}` pairs (a task without implementation is left out). An
  implementation that raises yields `{:error, {:raised, message}}`.
  """
  @spec run_all([task()], snapshot(), [module()]) :: [
          {task(), {:ok, [change()]} | {:error, term()}}
        ]
  def run_all(tasks, snapshot, implementations \\ implementations()) do
    for task <- tasks, impl <- implementations, task in impl.tasks() do
      {task, safe_run(impl, task, snapshot)}
    end
  end

  @doc "Whether any of `implementations` handles `task`."
  @spec supported?(task(), [module()]) :: boolean()
  def supported?(task, implementations \\ implementations()),
    do: Enum.any?(implementations, &(task in &1.tasks()))

  defp safe_run(impl, task, snapshot) do
    case impl.run(task, snapshot) do
      {:ok, changes} when is_list(changes) -> {:ok, changes}
      {:error, _} = error -> error
      other -> {:error, {:bad_return, other}}
    end
  rescue
    error -> {:error, {:raised, Exception.message(error)}}
  end
end

defmodule SoulMem.Maintenance.SummarizePending do
  @moduledoc """
  Maintenance task `:summarize_pending`: retries the window's summary jobs
  that failed (LLM down, timeouts), oldest first, each on top of the summary
  produced by the one before. Stops at the first failure (an LLM error; a
  blank answer is one, `SoulMem.LLM.chat/2` refuses it); the jobs done so far
  are returned as `{:summary_done, job_id, summary}` changes.
  """

  @behaviour SoulMem.Maintenance

  alias SoulMem.Window

  @impl true
  @doc "Handles `:summarize_pending` only."
  @spec tasks() :: [SoulMem.Maintenance.task()]
  def tasks, do: [:summarize_pending]

  @impl true
  @doc "Runs the checked-out jobs of the snapshot in order."
  @spec run(SoulMem.Maintenance.task(), SoulMem.Maintenance.snapshot()) ::
          {:ok, [SoulMem.Maintenance.change()]} | {:error, term()}
  def run(:summarize_pending, %{jobs: jobs, window: window} = snapshot) do
    llm = Map.get(snapshot, :llm, [])

    jobs
    |> Enum.reduce_while({Window.summary(window), []}, fn job, {previous, done} ->
      case SoulMem.LLM.client().chat(Window.prompt(job, previous), llm) do
        {:ok, %{content: summary}} ->
          summary = String.trim(summary)
          {:cont, {summary, [{:summary_done, job.id, summary} | done]}}

        {:error, reason} ->
          {:halt, {:error, reason, done}}
      end
    end)
    |> case do
      {_summary, done} -> {:ok, Enum.reverse(done)}
      {:error, reason, []} when jobs != [] -> {:error, reason}
      {:error, _reason, done} -> {:ok, Enum.reverse(done)}
    end
  end
end

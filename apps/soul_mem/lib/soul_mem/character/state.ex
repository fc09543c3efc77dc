defmodule SoulMem.Character.State do
  @moduledoc """
  The pure state machine of one character: `apply_event(state, event)`
  returns the new state and the effects the character process carries out.

  It holds what the character knows about itself — the sliding window and
  summary jobs, the Working/Idle status, which window messages are stored
  under which store sequence numbers, retrieval records and feedback, the
  summary retry backoff, which background tasks run and which timers are
  armed — but no process, handle or clock: the graph handle, the store, task
  refs and timer refs live in `SoulMem.Character`, which is the only process
  that applies events (the one writer). Tests drive it without processes.

  ## Persistence

  With a store (`persist: true`), acknowledged writes are durable before the
  reply: pushed messages, feedback, and summaries as they land. The graph
  (retrieval counts, learned links, consolidated notes) is written back at
  Idle, after maintenance that changed it, on `force(id, :persist)` and on a
  graceful stop.

  ## Events

  `SoulMem.subscribe/1` makes the caller receive `{:soul_mem, character_id, event,
  payload}`: `:state_changed` (`:working`, `:idle`, `:stopped`),
  `:summary_updated` (the new summary), `:summary_failed` (`%{job, reason,
  retry_in}`; the job is retried with exponential backoff), `:consolidated`,
  `:embedded` and `:maintenance_done` (`%{tasks, results}`).

  ## Effects

    * `{:notify, event, payload}` — tell subscribers;
    * `{:set_timer, name, ms}` / `{:cancel_timer, name}` — arm (replacing an
      armed one) or disarm the timer `name` (`:idle`, `:stop`, `:retry`,
      `:maintenance`); when it fires the process applies `{:timeout, name}`;
    * `{:run_summary, job_id, prompt}` — ask the LLM for a summary in a task;
      its answer comes back as `{:task_done, {:summary, job_id}, result}`;
    * `{:run_maintenance, tasks, jobs}` — run maintenance on a snapshot; the
      result comes back as `{:task_done, :maintenance, result}`;
    * `{:save_summary, summary, pop_to}` — write the summary and delete
      stored messages up to `pop_to`; the outcome comes back as
      `{:saved, :summary, :ok | {:error, e}}`;
    * `{:checkpoint, %{summary: s, pop_to: p, archive: ids, then: effects}}`
      — write the whole graph with them; comes back as `{:saved,
      {:checkpoint, then}, :ok | {:error, e}}` (`then` are the effects to
      run when it failed);
    * `{:save_records, ids, at}` — store retrievals;
    * `{:log, level, message}` — log (about the character);
    * `:stop` — end the process (normal).
  """

  alias SoulMem.{Backoff, Maintenance, Window}

  # Retrieval timestamps kept per note (newest); the graph keeps the count.
  @max_records_per_note 256
  # Summary jobs one maintenance run catches up on; the retry timer drains
  # the rest one job at a time, each committed as it lands.
  @drain_batch 4

  @enforce_keys [:id, :window, :config]
  defstruct [
    :id,
    :window,
    :config,
    status: :loading,
    persisted?: false,
    # {window seq, store seq} of the stored window messages, oldest first.
    stored: [],
    # Store messages up to this seq are deleted with the next window write.
    pop_to: nil,
    # The graph changed since it was last written.
    dirty: false,
    records: %{},
    feedback: %{},
    retry_attempts: 0,
    # Background work: {:summary, job_id}, :embed_model, or
    # {:maintenance, tasks, job_ids}.
    running: [],
    timers: MapSet.new(),
    embedding: :none
  ]

  @typedoc "Timing and maintenance settings (see `SoulMem.Character.Options`)."
  @type config :: %{
          idle_after: non_neg_integer(),
          stop_after: non_neg_integer() | :infinity,
          maintenance: [module()],
          maintenance_interval: non_neg_integer(),
          summary_retry: non_neg_integer(),
          summary_max_retry: non_neg_integer()
        }

  @type status :: :loading | :working | :idle
  @type timer :: :idle | :stop | :retry | :maintenance
  @type effect ::
          {:notify, atom(), term()}
          | {:set_timer, timer(), non_neg_integer()}
          | {:cancel_timer, timer()}
          | {:run_summary, pos_integer(), [map()]}
          | {:run_maintenance, [Maintenance.task()], [Window.Job.t()]}
          | {:save_summary, String.t(), non_neg_integer() | nil}
          | {:checkpoint, map()}
          | {:save_records, [String.t()], DateTime.t()}
          | {:log, Logger.level(), String.t()}
          | :stop

  @type event ::
          {:loaded, :none | :hash | :model | :partial}
          | :request
          | :tag
          | {:pushed, Window.t(), [{integer(), integer()}]}
          | {:retracted, Window.t(), [integer()]}
          | {:force, Maintenance.task()}
          | {:timeout, timer()}
          | {:force_idle_stop}
          | {:task_done, term(), term()}
          | {:record, [String.t()], DateTime.t()}
          | {:feedback, String.t(), 1 | -1, DateTime.t()}
          | {:note_deleted, String.t()}
          | {:saved, term(), :ok | {:error, term()}}

  @type t :: %__MODULE__{
          id: String.t(),
          window: Window.t(),
          config: config(),
          status: status(),
          persisted?: boolean(),
          stored: [{integer(), integer()}],
          pop_to: integer() | nil,
          dirty: boolean(),
          records: %{String.t() => [DateTime.t()]},
          feedback: %{String.t() => [{1 | -1, DateTime.t()}]},
          retry_attempts: non_neg_integer(),
          running: [term()],
          timers: MapSet.t(timer()),
          embedding: :none | :hash | :model | :partial
        }

  @doc "A character's state before it has loaded."
  @spec new(String.t(), Window.t(), config(), boolean()) :: t()
  def new(id, %Window{} = window, config, persisted?) when is_binary(id) and is_map(config),
    do: %__MODULE__{id: id, window: window, config: config, persisted?: persisted?}

  ## Pure queries (no transition)

  @doc """
  Pushes `messages` into a copy of the window: `{:ok, window, rows}` where
  `rows` are the new `{message, tagged?}` entries to store (in order, with
  their window seqs), or `{:error, reason}`. Apply `{:pushed, window,
  stored}` once they are stored.
  """
  @spec push(t(), [map()] | term(), DateTime.t()) ::
          {:ok, Window.t(), [{integer(), {map(), boolean()}}]} | {:error, atom()}
  def push(%__MODULE__{window: window}, messages, now) when is_list(messages) do
    with {:ok, new_window} <- Window.push_all(window, Enum.map(messages, &normalize(&1, now))) do
      new = Enum.filter(new_window.pending ++ new_window.messages, &(&1.seq > window.seq))
      # A push larger than the window drops messages at once; they are stored
      # too (with their tag), so the summary jobs they queued survive a crash.
      {:ok, new_window, Enum.map(new, &{&1.seq, {&1.message, &1.tagged}})}
    end
  end

  def push(%__MODULE__{}, _messages, _now), do: {:error, :invalid_message}

  @doc """
  Takes back the newest `n` window messages (`SoulMem.Window.retract/2`):
  `{:ok, window, store_seqs}` — the store sequence numbers to delete (empty
  for a character without a store) — or `{:error, :not_retractable}`. Apply
  `{:retracted, window, store_seqs}` once they are deleted.
  """
  @spec retract(t(), non_neg_integer()) ::
          {:ok, Window.t(), [integer()]} | {:error, :not_retractable}
  def retract(%__MODULE__{} = state, n) do
    with {:ok, window, seqs} <- Window.retract(state.window, n) do
      gone = MapSet.new(seqs)
      {:ok, window, for({w, s} <- state.stored, MapSet.member?(gone, w), do: s)}
    end
  end

  @doc """
  The stored window pushed again into the fresh window: messages past the
  capacity slide out and queue their summary jobs as they would have; tags
  are re-derived from the interval. `stored` carries the store's `summary`,
  `window` (messages with `seq`), `records` and `feedback` rows.
  """
  @spec restore(t(), map()) :: {:ok, t()} | {:error, String.t()}
  def restore(%__MODULE__{} = state, stored) do
    window = %{state.window | summary: stored.summary || state.window.summary}
    messages = Enum.map(stored.window, &%{role: role(&1.role), text: &1.text, at: &1.at})

    with {:ok, restored} <- Window.push_all(window, messages) do
      seqs = (window.seq + 1)..(window.seq + length(messages))//1
      stored_seqs = Enum.zip(seqs, Enum.map(stored.window, & &1.seq))

      state = %{
        state
        | window: restored,
          stored: stored_seqs,
          records: group_newest_first(stored.records, fn {id, at} -> {id, at} end),
          feedback: group_newest_first(stored.feedback, fn {id, v, at} -> {id, {v, at}} end)
      }

      {:ok, forget_dropped(state)}
    end
  end

  @doc "Records and feedback with each note's entries oldest first."
  @spec history(t(), :records | :feedback) :: map()
  def history(%__MODULE__{} = state, key) when key in [:records, :feedback],
    do: state |> Map.fetch!(key) |> Map.new(fn {k, v} -> {k, Enum.reverse(v)} end)

  @doc """
  The character at a glance: `%{id, state, window_size, pending, jobs,
  summary_length, maintenance_running, embedding}`.
  """
  @spec info(t()) :: map()
  def info(%__MODULE__{window: window} = state) do
    %{
      id: state.id,
      state: state.status,
      window_size: Window.size(window),
      pending: length(window.pending),
      jobs: length(Window.jobs(window)),
      summary_length: String.length(Window.summary(window)),
      maintenance_running: maintaining?(state),
      embedding: state.embedding
    }
  end

  @doc "Whether a maintenance run is in flight."
  @spec maintaining?(t()) :: boolean()
  def maintaining?(%__MODULE__{running: running}),
    do: Enum.any?(running, &match?({:maintenance, _, _}, &1))

  @doc """
  Whether `task` can be forced now: `:ok`, `{:error, :unsupported}` (no
  configured implementation) or `{:error, :busy}` (maintenance runs).
  """
  @spec can_force(t(), atom()) :: :ok | {:error, :unsupported | :busy}
  def can_force(%__MODULE__{} = state, task) do
    cond do
      task not in Maintenance.all_tasks() or
          not Maintenance.supported?(task, state.config.maintenance) ->
        {:error, :unsupported}

      maintaining?(state) ->
        {:error, :busy}

      true ->
        :ok
    end
  end

  @doc """
  A checkpoint of the whole graph with the summary, the stored messages to
  delete and the notes to archive: the state to keep while it is written
  and the effect that writes it (see `{:checkpoint, _}`).
  """
  @spec checkpoint(t(), [String.t()], [effect()]) :: {t(), effect()}
  def checkpoint(%__MODULE__{} = state, archive \\ [], on_failure \\ []) do
    state = forget_dropped(state)

    {state,
     {:checkpoint,
      %{
        summary: Window.summary(state.window),
        pop_to: state.pop_to,
        archive: archive,
        then: on_failure
      }}}
  end

  ## Transitions

  @doc "Applies `event`: the new state and the effects to carry out, in order."
  @spec apply_event(t(), event()) :: {t(), [effect()]}
  def apply_event(%__MODULE__{} = state, event), do: state |> event(event) |> finish()

  defp finish({state, effects}), do: {state, List.flatten(effects)}

  # Loaded: Idle (without maintenance until the first request), a stop timer
  # and any summary job the restored window queued. `:partial`: the model
  # embeds the graph in a background task (`:embed_model`).
  defp event(state, {:loaded, embedding}) do
    running = if embedding == :partial, do: [:embed_model | state.running], else: state.running
    state = %{state | status: :idle, embedding: embedding, running: running}
    {state, stop} = schedule_stop(state)
    {state, summary} = dispatch_summary(state)
    {state, [stop, summary]}
  end

  defp event(state, :request), do: touch(state)

  # Checked with can_force/2 first.
  defp event(state, {:force, task}), do: start_maintenance(state, [task])

  defp event(state, :tag), do: touch(%{state | window: Window.tag_last(state.window)})

  defp event(state, {:retracted, window, store_seqs}) do
    gone = MapSet.new(store_seqs)
    stored = Enum.reject(state.stored, fn {_w, s} -> MapSet.member?(gone, s) end)
    {%{state | window: window, stored: stored}, []}
  end

  defp event(state, {:pushed, window, stored}) do
    state = forget_dropped(%{state | window: window, stored: state.stored ++ stored})
    {state, touched} = touch(state)
    {state, summary} = dispatch_summary(state)
    {state, [touched, summary]}
  end

  defp event(state, {:timeout, name}) do
    state = %{state | timers: MapSet.delete(state.timers, name)}
    timeout(state, name)
  end

  defp event(%{status: :idle, persisted?: true} = state, {:force_idle_stop}), do: idle_stop(state)
  defp event(state, {:force_idle_stop}), do: {state, []}

  defp event(state, {:task_done, key, result}) do
    case Enum.split_with(state.running, &same_task?(&1, key)) do
      {[task | _], running} -> task_done(%{state | running: running}, task, result)
      {[], _} -> {state, []}
    end
  end

  defp event(state, {:record, ids, at}) do
    records = Enum.reduce(ids, state.records, fn id, acc -> prepend(acc, id, at) end)

    effects = if ids == [], do: [], else: [save_records(state, ids, at)]
    {%{state | records: records, dirty: true}, effects}
  end

  defp event(state, {:feedback, id, value, at}) do
    touch(%{state | feedback: prepend(state.feedback, id, {value, at})})
  end

  # The note is gone (from the store too): so are its records and feedback.
  defp event(state, {:note_deleted, id}) do
    touch(%{
      state
      | records: Map.delete(state.records, id),
        feedback: Map.delete(state.feedback, id)
    })
  end

  defp event(state, {:saved, :summary, :ok}), do: {%{state | pop_to: nil}, []}
  defp event(state, {:saved, :summary, {:error, _}}), do: {%{state | dirty: true}, []}

  defp event(state, {:saved, {:checkpoint, _then}, :ok}),
    do: {%{state | dirty: false, pop_to: nil}, []}

  defp event(state, {:saved, {:checkpoint, then}, {:error, _}}),
    do: {%{state | dirty: true}, then}

  defp timeout(state, :idle), do: go_idle(state)

  # Idle for `stop_after` ms with nothing in flight: the process ends (its
  # terminate writes back) and the next request starts it from its store.
  defp timeout(%{status: :idle} = state, :stop), do: idle_stop(state)
  defp timeout(state, :stop), do: {state, []}

  # Jobs a maintenance run holds are in flight, not failed: they are left to
  # it, so the same job never runs twice at once.
  defp timeout(state, :retry),
    do: dispatch_summary(%{state | window: Window.requeue_failed(state.window)})

  defp timeout(state, :maintenance) do
    if state.status == :idle and not maintaining?(state),
      do: start_maintenance(state, Maintenance.all_tasks()),
      else: {state, []}
  end

  ## States and maintenance

  defp touch(state) do
    timers = state.timers |> MapSet.delete(:maintenance) |> MapSet.delete(:stop)

    effects = [
      {:cancel_timer, :maintenance},
      {:cancel_timer, :stop},
      {:set_timer, :idle, state.config.idle_after}
    ]

    state = %{state | timers: MapSet.put(timers, :idle)}

    if state.status == :working,
      do: {state, effects},
      else: {%{state | status: :working}, [effects, {:notify, :state_changed, :working}]}
  end

  defp go_idle(%{status: :idle} = state), do: {state, []}

  defp go_idle(state) do
    state = %{state | status: :idle, timers: MapSet.delete(state.timers, :idle)}
    {state, stop} = schedule_stop(state)
    {state, write} = write_back(state)

    {state, maintenance} =
      if maintaining?(state),
        do: {state, []},
        else: start_maintenance(state, Maintenance.all_tasks())

    {state, [{:cancel_timer, :idle}, stop, {:notify, :state_changed, :idle}, write, maintenance]}
  end

  defp idle_stop(state) do
    if state.running == [] do
      {state, [{:notify, :state_changed, :stopped}, :stop]}
    else
      schedule_stop(state)
    end
  end

  # Only a character with a store stops when idle: it comes back exactly as
  # it was; one without would lose its memory.
  defp schedule_stop(%{persisted?: false} = state), do: {state, []}
  defp schedule_stop(%{config: %{stop_after: :infinity}} = state), do: {state, []}

  defp schedule_stop(state),
    do: arm(state, :stop, state.config.stop_after)

  defp schedule_maintenance(%{status: :idle} = state) do
    if MapSet.member?(state.timers, :maintenance),
      do: {state, []},
      else: arm(state, :maintenance, state.config.maintenance_interval)
  end

  defp schedule_maintenance(state), do: {state, []}

  defp arm(state, name, ms),
    do: {%{state | timers: MapSet.put(state.timers, name)}, [{:set_timer, name, ms}]}

  defp start_maintenance(state, tasks) do
    tasks = Enum.filter(tasks, &Maintenance.supported?(&1, state.config.maintenance))

    {jobs, window} =
      with true <- :summarize_pending in tasks,
           {:ok, jobs, window} <- Window.checkout_failed(state.window, @drain_batch) do
        {jobs, window}
      else
        _ -> {[], state.window}
      end

    running = [{:maintenance, tasks, Enum.map(jobs, & &1.id)} | state.running]
    {%{state | window: window, running: running}, [{:run_maintenance, tasks, jobs}]}
  end

  ## Summaries

  defp dispatch_summary(state) do
    case Window.next_job(state.window) do
      {:ok, job, window} ->
        prompt = Window.prompt(job, Window.summary(window))

        {%{state | window: window, running: [{:summary, job.id} | state.running]},
         [{:run_summary, job.id, prompt}]}

      :none ->
        {state, []}
    end
  end

  defp same_task?({:maintenance, _, _}, :maintenance), do: true
  defp same_task?(task, key), do: task == key

  defp task_done(state, :embed_model, {:ok, _model}),
    do: {%{state | embedding: :model}, [{:notify, :embedded, :model}]}

  defp task_done(state, :embed_model, {:error, reason}) do
    log =
      {:log, :warning,
       "embedding with the model failed (#{inspect(reason, limit: 8)}); " <>
         "recall keeps the lexical hash index"}

    {%{state | embedding: :hash}, [log, {:notify, :embedded, :hash}]}
  end

  defp task_done(state, {:summary, job_id}, {:ok, %{content: content}}) do
    summary = String.trim(content)

    case Window.complete(state.window, job_id, summary) do
      {:ok, window} ->
        {state, save} = save_summary(%{state | window: window})
        {state, reset} = reset_retry(state)
        {state, next} = dispatch_summary(state)
        {state, [save, reset, {:notify, :summary_updated, summary}, next]}

      # A blank answer must not wipe the summary: the job failed.
      {:error, :empty_summary} ->
        summary_failed(state, job_id, :empty_summary)

      {:error, :unknown_job} ->
        {state, []}
    end
  end

  defp task_done(state, {:summary, job_id}, {:error, reason}),
    do: summary_failed(state, job_id, reason)

  defp task_done(state, {:summary, job_id}, other),
    do: summary_failed(state, job_id, {:invalid_response, other})

  defp task_done(state, {:maintenance, tasks, job_ids}, result) do
    results =
      case result do
        list when is_list(list) -> list
        {:error, reason} -> Enum.map(tasks, &{&1, {:error, reason}})
      end

    changes = for {_task, {:ok, changes}} <- results, change <- changes, do: change

    failed =
      for {task, {:error, reason}} <- results,
          do: {:log, :warning, "maintenance task #{task} failed (#{inspect(reason, limit: 8)})"}

    {window, summary_changed?} =
      Enum.reduce(changes, {state.window, false}, fn
        {:summary_done, job_id, summary}, {window, changed?} ->
          case Window.complete(window, job_id, summary) do
            {:ok, window} -> {window, true}
            {:error, _} -> {window, changed?}
          end

        _other, acc ->
          acc
      end)

    # Checked-out jobs the run did not complete are failed again (only those:
    # a job dispatched meanwhile is not the run's to fail).
    state = %{state | window: Window.fail_jobs(window, job_ids)}
    {state, reset} = if summary_changed?, do: reset_retry(state), else: {state, []}

    {state, retry} =
      if match?([%{status: :failed} | _], Window.jobs(state.window)),
        do: schedule_retry(state) |> then(fn {_delay, state, effects} -> {state, effects} end),
        else: {state, []}

    {state, consolidated} = Enum.reduce(changes, {state, []}, &consolidated/2)
    {state, save} = save_changes(state, changes, summary_changed?)

    updated =
      if summary_changed?,
        do: [{:notify, :summary_updated, Window.summary(state.window)}],
        else: []

    {state, next} = dispatch_summary(state)
    {state, tick} = schedule_maintenance(state)

    {state,
     [
       failed,
       reset,
       retry,
       Enum.reverse(consolidated),
       save,
       updated,
       {:notify, :maintenance_done, %{tasks: tasks, results: results}},
       next,
       tick
     ]}
  end

  defp summary_failed(state, job_id, reason) do
    {delay, state, effects} = schedule_retry(%{state | window: Window.fail(state.window, job_id)})

    log =
      {:log, :warning,
       "summary job #{job_id} failed (#{inspect(reason, limit: 5)}); retry in #{delay} ms"}

    {state,
     [effects, log, {:notify, :summary_failed, %{job: job_id, reason: reason, retry_in: delay}}]}
  end

  # One pending retry at most: a new failure replaces the timer, one step
  # further along the backoff.
  defp schedule_retry(state) do
    config = state.config
    delay = Backoff.delay(state.retry_attempts, config.summary_retry, config.summary_max_retry)
    {state, effects} = arm(%{state | retry_attempts: state.retry_attempts + 1}, :retry, delay)
    {delay, state, effects}
  end

  defp reset_retry(state) do
    {%{state | retry_attempts: 0, timers: MapSet.delete(state.timers, :retry)},
     [{:cancel_timer, :retry}]}
  end

  # A consolidation turned the summary into memory: clear it unless a newer
  # one landed meanwhile, drop the records it folded in, tell subscribers.
  defp consolidated({:consolidated, info}, {state, effects}) when is_map(info) do
    window =
      if Map.get(info, :summary) == Window.summary(state.window),
        do: Window.clear_summary(state.window),
        else: state.window

    records =
      case Map.get(info, :records_until) do
        %DateTime{} = until ->
          state.records
          |> Map.new(fn {id, ats} ->
            {id, Enum.filter(ats, &(DateTime.compare(&1, until) == :gt))}
          end)
          |> Map.reject(fn {_id, ats} -> ats == [] end)

        _ ->
          state.records
      end

    notify = {:notify, :consolidated, Map.delete(info, :report)}
    {%{state | window: window, records: records}, [notify | effects]}
  end

  defp consolidated(_change, acc), do: acc

  ## Persistence

  # Stored messages the window no longer needs (slid out, summarised or
  # dropped) are deleted with the next window write.
  defp forget_dropped(%{persisted?: false} = state), do: state

  defp forget_dropped(state) do
    oldest =
      Enum.min(Enum.map(state.window.pending ++ state.window.messages, & &1.seq), fn ->
        state.window.seq + 1
      end)

    {gone, kept} = Enum.split_while(state.stored, fn {wseq, _} -> wseq < oldest end)

    case List.last(gone) do
      nil -> state
      {_, sseq} -> %{state | stored: kept, pop_to: max(sseq, state.pop_to || 0)}
    end
  end

  defp save_summary(%{persisted?: false} = state), do: {state, []}

  defp save_summary(state) do
    state = forget_dropped(state)
    {state, [{:save_summary, Window.summary(state.window), state.pop_to}]}
  end

  defp save_records(%{persisted?: false}, _ids, _at), do: []
  defp save_records(_state, ids, at), do: {:save_records, ids, at}

  defp write_back(%{persisted?: false} = state), do: {state, []}
  defp write_back(%{dirty: false, pop_to: nil} = state), do: {state, []}
  defp write_back(state), do: checkpoint(state)

  # Maintenance changes that touch the graph are written back at once, in one
  # checkpoint that carries the summary too; a summary alone is written by
  # itself (also when that checkpoint fails).
  defp save_changes(state, changes, summary_changed?) do
    archive = for {:archived, ids} <- changes, id <- ids, do: id

    graph_changed? =
      archive != [] or
        Enum.any?(changes, &(match?({:graph_changed, _}, &1) or match?({:consolidated, _}, &1)))

    cond do
      graph_changed? and state.persisted? ->
        {_summary_state, save} = if summary_changed?, do: save_summary(state), else: {state, []}
        checkpoint(%{state | dirty: true}, archive, save)

      summary_changed? ->
        save_summary(state)

      true ->
        {state, []}
    end
  end

  ## Helpers

  defp prepend(map, id, entry),
    do: Map.update(map, id, [entry], &Enum.take([entry | &1], @max_records_per_note))

  defp group_newest_first(rows, split) do
    Enum.reduce(rows, %{}, fn row, acc ->
      {id, value} = split.(row)
      prepend(acc, id, value)
    end)
  end

  defp normalize(%{} = message, now) do
    %{
      role: role(Map.get(message, :role)),
      text: Map.get(message, :text),
      at: Map.get(message, :at) || now
    }
  end

  defp normalize(other, _now), do: other

  defp role("user"), do: :user
  defp role("assistant"), do: :assistant
  defp role(other), do: other
end

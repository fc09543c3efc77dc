defmodule SoulMem.Character.Effects do
  @moduledoc """
  Carries out, in the character's process, the effects of its
  `SoulMem.Character.State` transitions: timers, tasks, store writes, events.

  The server map it works on is the `SoulMem.Character` process state:
  `state` (the pure `State`), `settings` (`SoulMem.Character.Options`),
  `store`, `memory` (the graph handle), `timers` (name → `{ref, timer}`),
  `tasks` (task ref → the task's key in the state) and `subscribers`.
  A `:stop` effect marks the map with `stop: true`.
  """

  require Logger

  alias SoulMem.{Maintenance, Store}
  alias SoulMem.Character.State

  @typedoc "The character process's state."
  @type server :: %{
          required(:state) => State.t(),
          required(:settings) => map(),
          required(:store) => Store.t() | nil,
          required(:memory) => SoulMem.Memory.t() | nil,
          required(:timers) => %{State.timer() => {reference(), reference()}},
          required(:tasks) => %{reference() => term()},
          required(:subscribers) => %{pid() => reference()},
          optional(:replica) => SoulMem.Cluster.Replication.link(),
          optional(:stop) => true
        }

  # Pushed messages are appended in one transaction before the push is
  # acknowledged; the state maps window seqs to store seqs.
  @doc """
  Pushes `messages` (stored before the state changes): `{:ok, server}` or
  the window's or store's error, with the server unchanged.
  """
  @spec push(server(), term()) :: {:ok, server()} | {:error, term()}
  def push(server, messages) do
    now = DateTime.utc_now()

    with {:ok, window, rows} <- State.push(server.state, messages, now),
         {:ok, stored} <- store_messages(server.store, rows) do
      {:ok, apply_event(server, {:pushed, window, stored})}
    end
  end

  defp store_messages(nil, _rows), do: {:ok, []}

  defp store_messages(store, rows) do
    with {:ok, seqs} <- Store.append_messages(store, Enum.map(rows, &elem(&1, 1))),
         do: {:ok, Enum.zip(Enum.map(rows, &elem(&1, 0)), seqs)}
  end

  @doc """
  Stores `+1`/`-1` feedback on note `id` (durable first): `{:ok, server}`,
  `{:error, :not_found}` or the store's error, with the server unchanged.
  """
  @spec feedback(server(), String.t(), 1 | -1) :: {:ok, server()} | {:error, term()}
  def feedback(server, id, value) do
    at = DateTime.utc_now() |> DateTime.truncate(:millisecond)

    with {:ok, _note} <- SoulMem.Memory.get_note(server.memory, id),
         :ok <- store_feedback(server, id, value, at) do
      {:ok, apply_event(server, {:feedback, id, value, at})}
    else
      {:error, %SoulMem.Error{reason: :not_found}} -> {:error, :not_found}
      {:error, _} = error -> error
    end
  end

  defp store_feedback(%{store: nil}, _id, _value, _at), do: :ok

  defp store_feedback(server, id, value, at),
    do: Store.append_feedback(server.store, server.memory, id, value, at)

  @doc """
  What a recall needs after its messages are pushed: the graph (`memory`),
  the visible `window`, the `summary`, the character's `llm` (forgetting
  revises recalled memories in its voice) and what recall compares with
  (`embedding`).
  """
  @spec recall_snapshot(server()) :: map()
  def recall_snapshot(%{state: state} = server) do
    %{
      memory: server.memory,
      window: SoulMem.Window.visible(state.window),
      summary: SoulMem.Window.summary(state.window),
      llm: server.settings.llm,
      embedding: state.embedding
    }
  end

  @doc "Takes a loaded character in (`SoulMem.Character.Loader.load/4`) and applies `:loaded`."
  @spec loaded(server(), SoulMem.Character.Loader.loaded()) :: server()
  def loaded(server, loaded) do
    tasks = if loaded.task, do: %{loaded.task.ref => :embed_model}, else: %{}
    settings = %{server.settings | source: nil}

    server = %{
      server
      | memory: loaded.memory,
        state: loaded.state,
        settings: settings,
        tasks: tasks
    }

    apply_event(server, {:loaded, loaded.embedding})
  end

  @doc """
  Takes back the newest `n` messages (deleted from the store first), then
  pushes `messages`: a turn a client edited or regenerated. Either error
  leaves the server unchanged.
  """
  @spec replace_tail(server(), non_neg_integer(), term()) :: {:ok, server()} | {:error, term()}
  def replace_tail(server, 0, messages), do: push(server, messages)

  def replace_tail(server, n, messages) do
    with {:ok, window, seqs} <- State.retract(server.state, n),
         # Checked before anything is deleted: the push must fit as well.
         {:ok, _window, _rows} <-
           State.push(%{server.state | window: window}, messages, DateTime.utc_now()),
         :ok <- retract_stored(server.store, seqs) do
      push(apply_event(server, {:retracted, window, seqs}), messages)
    end
  end

  defp retract_stored(nil, _seqs), do: :ok
  defp retract_stored(_store, []), do: :ok
  defp retract_stored(store, seqs), do: Store.retract_messages(store, Enum.min(seqs))

  @doc "Applies `event` to the state and carries out its effects."
  @spec apply_event(server(), State.event()) :: server()
  def apply_event(server, event) do
    {state, effects} = State.apply_event(server.state, event)
    Enum.reduce(effects, %{server | state: state}, &effect/2)
  end

  defp effect({:notify, event, payload}, server) do
    for {pid, _mref} <- server.subscribers,
        do: send(pid, {:soul_mem, server.state.id, event, payload})

    # A character whose home changed while it ran moves at its next Idle.
    if {event, payload} == {:state_changed, :idle},
      do: SoulMem.Cluster.Moves.idle(server.state.id)

    server
  end

  defp effect({:log, level, message}, server) do
    Logger.log(level, "character #{server.state.id}: #{message}")
    server
  end

  defp effect({:set_timer, name, ms}, server) do
    server = effect({:cancel_timer, name}, server)
    # The message carries a fresh ref: one already in the mailbox is stale.
    ref = make_ref()
    timer = Process.send_after(self(), {:timeout, name, ref}, ms)
    %{server | timers: Map.put(server.timers, name, {ref, timer})}
  end

  defp effect({:cancel_timer, name}, server) do
    {entry, timers} = Map.pop(server.timers, name)
    with {_ref, timer} <- entry, do: Process.cancel_timer(timer)
    %{server | timers: timers}
  end

  defp effect({:run_summary, job_id, prompt}, server) do
    llm = server.settings.llm
    run_task(server, {:summary, job_id}, fn -> SoulMem.LLM.client().chat(prompt, llm) end)
  end

  defp effect({:run_maintenance, tasks, jobs}, %{state: state} = server) do
    snapshot = %{
      character: state.id,
      memory: server.memory,
      window: state.window,
      jobs: jobs,
      records: State.history(state, :records),
      feedback: State.history(state, :feedback),
      llm: server.settings.llm
    }

    impls = state.config.maintenance
    run_task(server, :maintenance, fn -> Maintenance.run_all(tasks, snapshot, impls) end)
  end

  defp effect({:save_summary, summary, pop_to}, server) do
    result = Store.update_window(server.store, summary, pop_to)
    log_failure(server, result, "saving the summary failed")
    apply_event(server, {:saved, :summary, result})
  end

  defp effect({:checkpoint, %{then: then} = checkpoint}, server) do
    result = store_checkpoint(server, checkpoint)
    log_failure(server, result, "saving the graph failed")
    apply_event(server, {:saved, {:checkpoint, then}, result})
  end

  defp effect({:save_records, ids, at}, server) do
    with {:error, error} <- Store.append_records(server.store, server.memory, ids, at),
         do:
           Logger.warning(
             "character #{server.state.id}: saving records failed: #{inspect(error)}"
           )

    server
  end

  defp effect(:stop, server), do: Map.put(server, :stop, true)

  defp run_task(server, key, fun) do
    task = Task.Supervisor.async_nolink(SoulMem.TaskSupervisor, fun)
    %{server | tasks: Map.put(server.tasks, task.ref, key)}
  end

  @doc "Writes the whole graph, the summary and the popped messages in one transaction."
  @spec checkpoint(server()) :: {:ok, server()} | {:error, SoulMem.Error.t()}
  def checkpoint(%{store: nil} = server), do: {:ok, server}

  def checkpoint(server) do
    {state, {:checkpoint, checkpoint}} = State.checkpoint(server.state)
    result = store_checkpoint(server, checkpoint)
    {state, []} = State.apply_event(state, {:saved, {:checkpoint, []}, result})

    case result do
      :ok -> {:ok, %{server | state: state}}
      {:error, _} = error -> error
    end
  end

  defp store_checkpoint(server, checkpoint) do
    Store.checkpoint(server.store, server.memory,
      summary: checkpoint.summary,
      pop_to: checkpoint.pop_to,
      archive: checkpoint.archive
    )
  end

  defp log_failure(_server, :ok, _what), do: :ok

  defp log_failure(server, {:error, error}, what),
    do: Logger.error("character #{server.state.id}: #{what}: #{inspect(error)}")

  @doc "Counts a recall of `ids` at `at` in the graph (`retrieval.record/3`); failures are logged."
  @spec record_in_graph(server(), module(), [String.t()], DateTime.t()) :: :ok
  def record_in_graph(server, retrieval, ids, at) do
    with {:error, error} <- retrieval.record(server.memory, ids, at),
         do:
           Logger.warning(
             "character #{server.state.id}: recording retrievals failed: #{inspect(error)}"
           )

    :ok
  rescue
    error ->
      Logger.warning(
        "character #{server.state.id}: recording retrievals raised: #{inspect(error)}"
      )
  end
end

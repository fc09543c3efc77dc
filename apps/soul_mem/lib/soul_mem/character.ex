defmodule SoulMem.Character do
  @moduledoc """
  The process of one running character, the only writer of its graph,
  window, records and feedback; internal (the API is `SoulMem`).

  Started through `SoulMem.Characters.ensure_started/2` (under a
  `DynamicSupervisor`, `restart: :temporary`, options in
  `SoulMem.Character.Options`) and registered in `SoulMem.Registry`. The
  graph is loaded in `handle_continue` (`SoulMem.Character.Loader`), so
  starting returns at once and requests wait until it has loaded (up to the
  load timeout, 60 s, then `{:error, :loading}`).

  What happens on each request, timer or task result is decided by the pure
  `SoulMem.Character.State`; this module carries out its effects (timers,
  tasks, store writes, events) and answers calls. Every function takes the
  character as its id or pid and returns `{:error, :not_running}` when no
  such character runs and `{:error, :timeout}` when it does not answer in
  time.

  ## States

  A request moves the character to `:working`; after `:idle_after` ms
  without one it becomes `:idle` and runs maintenance (`SoulMem.Maintenance`)
  in a task, repeated every `:maintenance_interval` ms while idle. A
  persisted character idle for `:stop_after` ms stops after its write-back
  and the next request starts it from its store. The atoms `:idle_timeout`
  and `:idle_stop` sent to the process make it idle / stop it at once.

  Persistence and events: see `SoulMem.Character.State`.
  """

  # shutdown: a graceful stop writes the graph back (terminate/2); large
  # graphs take seconds.
  use GenServer, restart: :temporary, shutdown: 30_000

  require Logger

  alias SoulMem.{Characters, Maintenance, Memory, Store, Window}
  alias SoulMem.Cluster.Replication
  alias SoulMem.Character.{Effects, Loader, Options, State}

  import Characters, only: [call: 3]
  import Effects, only: [apply_event: 2, checkpoint: 1, record_in_graph: 4]

  @timeout 5_000

  @type character :: String.t() | pid()
  @type call_error :: {:error, :not_running | :timeout | :loading}

  ## Client API

  @doc "Starts a character (see `SoulMem.Character.Options`); use `SoulMem.ensure_started/2`."
  @spec start_link(keyword()) :: GenServer.on_start()
  def start_link(opts) do
    opts = Options.validate!(opts)
    id = Keyword.fetch!(opts, :id)

    unless is_binary(id) and id != "",
      do: raise(ArgumentError, "expected :id to be a non-empty binary, got: #{inspect(id)}")

    GenServer.start_link(__MODULE__, opts, name: via(id))
  end

  @doc "The `:via` name of character `id` in `SoulMem.Registry`."
  @spec via(String.t()) :: {:via, Registry, {SoulMem.Registry, String.t()}}
  def via(id), do: {:via, Registry, {SoulMem.Registry, id}}

  @doc """
  Pushes messages (`%{role: :user | :assistant, text: binary}`, optional
  `:at`) into the window, all or nothing.
  """
  @spec push(character(), map() | [map()], timeout()) ::
          :ok | {:error, Window.error_reason()} | call_error()
  def push(character, messages, timeout \\ @timeout),
    do: call(character, {:push, List.wrap(messages)}, timeout)

  @doc """
  First half of a recall: takes back the newest `retract` messages (an
  edited or regenerated turn), pushes `messages` and returns what retrieval
  needs (`memory`, the visible `window`, `summary`, `llm`, `embedding`).
  """
  @spec prepare_recall(character(), [map()], timeout(), non_neg_integer()) ::
          {:ok, map()} | {:error, Window.error_reason()} | call_error()
  def prepare_recall(character, messages, timeout \\ @timeout, retract \\ 0),
    do: call(character, {:prepare_recall, messages, retract}, timeout)

  @doc """
  Records that a recall returned the notes `ids` at `at`: the character's
  records, and `retrieval.record/3` in the graph. Asynchronous.
  """
  @spec record(character(), [String.t()], DateTime.t(), module() | nil) ::
          :ok | {:error, :not_running}
  def record(character, ids, %DateTime{} = at, retrieval \\ nil) when is_list(ids) do
    retrieval = retrieval || SoulMem.Retrieval.backend()

    case Characters.resolve(character) do
      nil -> {:error, :not_running}
      pid -> GenServer.cast(pid, {:record, ids, at, retrieval})
    end
  end

  @doc "The retrieval records: `%{note_id => [DateTime]}`, oldest first (256 per note)."
  @spec records(character(), timeout()) :: {:ok, %{String.t() => [DateTime.t()]}} | call_error()
  def records(character, timeout \\ @timeout),
    do: call(character, :records, timeout)

  @doc "Stores `+1`/`-1` feedback on a note of the graph (256 kept per note)."
  @spec feedback(character(), String.t(), 1 | -1, timeout()) ::
          :ok | {:error, :invalid_feedback | :invalid_note_id | :not_found} | call_error()
  def feedback(character, note_id, value, timeout \\ @timeout) do
    cond do
      not is_binary(note_id) or note_id == "" -> {:error, :invalid_note_id}
      value not in [1, -1] -> {:error, :invalid_feedback}
      true -> call(character, {:feedback, note_id, value}, timeout)
    end
  end

  @doc "The feedback: `%{note_id => [{+1 | -1, DateTime}]}`, oldest first."
  @spec feedbacks(character(), timeout()) ::
          {:ok, %{String.t() => [{1 | -1, DateTime.t()}]}} | call_error()
  def feedbacks(character, timeout \\ @timeout),
    do: call(character, :feedbacks, timeout)

  @doc "Subscribes the caller to the character's events until it exits."
  @spec subscribe(character(), timeout()) :: :ok | call_error()
  def subscribe(character, timeout \\ @timeout),
    do: call(character, {:subscribe, self()}, timeout)

  @doc "Ends the caller's subscription."
  @spec unsubscribe(character(), timeout()) :: :ok | call_error()
  def unsubscribe(character, timeout \\ @timeout),
    do: call(character, {:unsubscribe, self()}, timeout)

  @doc "Forces a summary tag on the newest message (conversation ended, topic switch)."
  @spec tag(character(), timeout()) :: :ok | call_error()
  def tag(character, timeout \\ @timeout), do: call(character, :tag, timeout)

  @doc "The window struct (with pending messages, jobs and summary)."
  @spec window(character(), timeout()) :: {:ok, Window.t()} | call_error()
  def window(character, timeout \\ @timeout),
    do: call(character, :window, timeout)

  @doc "The cumulative summary."
  @spec summary(character(), timeout()) :: {:ok, String.t()} | call_error()
  def summary(character, timeout \\ @timeout),
    do: call(character, :summary, timeout)

  @doc "The memory graph."
  @spec memory(character(), timeout()) :: {:ok, Memory.t()} | call_error()
  def memory(character, timeout \\ @timeout),
    do: call(character, :memory, timeout)

  @doc """
  `%{id, state, window_size, pending, jobs, summary_length,
  maintenance_running, embedding, stats}`.
  """
  @spec info(character(), timeout()) :: {:ok, map()} | call_error()
  def info(character, timeout \\ @timeout), do: call(character, :info, timeout)

  @doc "Inserts or replaces one note (`SoulMem.Memory.put_note/3`), durable before it returns."
  @spec put_note(character(), map() | binary(), timeout()) ::
          {:ok, map()} | {:error, SoulMem.Error.t()} | call_error()
  def put_note(character, note, timeout \\ @timeout),
    do: call(character, {:put_note, note}, timeout)

  @doc """
  Deletes one note for good (`SoulMem.Memory.delete_note/3`): from the graph
  and, durably before it returns, the store; its records and feedback go
  too. `{:ok, %{id, links_removed}}`.
  """
  @spec delete_note(character(), String.t(), timeout()) ::
          {:ok, %{id: String.t(), links_removed: non_neg_integer()}}
          | {:error, SoulMem.Error.t()}
          | call_error()
  def delete_note(character, id, timeout \\ @timeout) when is_binary(id),
    do: call(character, {:delete_note, id}, timeout)

  @doc """
  Lists and searches the character's notes (`SoulMem.Memory.list_notes/2`
  options and result); in activation mode the store's, since the graph
  holds only the working set.
  """
  @spec list_notes(character(), SoulMem.Memory.list_opts(), timeout()) ::
          {:ok, SoulMem.Memory.listing()} | {:error, SoulMem.Error.t()} | call_error()
  def list_notes(character, opts \\ %{}, timeout \\ @timeout),
    do: call(character, {:list_notes, opts}, timeout)

  @doc "The whole character as one JSON document, after writing the live state back."
  @spec export(character(), timeout()) ::
          {:ok, binary()} | {:error, :not_persisted | SoulMem.Error.t()} | call_error()
  def export(character, timeout \\ 30_000), do: call(character, :export, timeout)

  @doc """
  Runs a maintenance task now (its result comes as `:maintenance_done`), or
  `:persist` synchronously; `{:error, :unsupported | :busy}` otherwise.
  """
  @spec force(character(), Maintenance.task(), timeout()) ::
          :ok | {:error, :unsupported | :busy} | call_error()
  def force(character, task, timeout \\ @timeout),
    do: call(character, {:force, task}, timeout)

  ## Server

  @impl true
  def init(opts) do
    # A character moving off this node (or moved) never starts here again:
    # its file is on its way, or gone.
    case SoulMem.Cluster.Moves.where(Keyword.fetch!(opts, :id)) do
      :here -> init_here(opts)
      _moving_or_moved -> {:stop, :moving}
    end
  end

  defp init_here(opts) do
    {state, settings} = Options.read!(opts)
    # Writes the graph back on shutdown (terminate/2 runs on exit signals).
    if settings.persist, do: Process.flag(:trap_exit, true)

    with {:ok, store} <- Loader.open_store(state, settings) do
      case settings.source do
        {:graph, path} when store == nil ->
          if File.regular?(path),
            do: start(state, settings, store),
            else: {:stop, {:graph_not_found, path}}

        _ ->
          start(state, settings, store)
      end
    end
  end

  defp start(state, settings, store) do
    # No replica link yet: the first sync sends a snapshot (and turns capture on).
    server = %{state: state, settings: settings, store: store, memory: nil, replica: nil}
    {:ok, Map.merge(server, %{timers: %{}, tasks: %{}, subscribers: %{}}), {:continue, :load}}
  end

  @impl true
  def handle_continue(:load, server) do
    save = &load_checkpoint(server, &1, &2)

    case Loader.load(server.state, server.settings, server.store, save) do
      {:ok, loaded} ->
        Registry.update_value(SoulMem.Registry, loaded.state.id, fn _ -> :ready end)
        replicated(noreply(Effects.loaded(server, loaded)))

      {:error, error} ->
        Logger.error("character #{server.state.id}: cannot load: #{Exception.message(error)}")
        {:stop, {:shutdown, {:load_failed, error}}, server}
    end
  end

  defp load_checkpoint(server, state, memory) do
    with {:ok, server} <- checkpoint(%{server | state: state, memory: memory}),
         do: {:ok, server.state}
  end

  # Every callback ends by shipping what it wrote to the replica (when
  # replication is on), before its reply leaves: see SoulMem.Cluster.Replication.
  @impl true
  def handle_call(message, from, server), do: replicated(on_call(message, from, server))

  @impl true
  def handle_cast(message, server), do: replicated(on_cast(message, server))

  @impl true
  def handle_info(message, server), do: replicated(on_info(message, server))

  defp replicated({:reply, reply, server}), do: {:reply, reply, replicate(server)}
  defp replicated({:noreply, server}), do: {:noreply, replicate(server)}
  # A stop: terminate/2 writes back, then replicates.
  defp replicated(stop), do: stop

  defp replicate(%{store: store} = server),
    do: %{server | replica: Replication.sync(server.state.id, store, server.replica)}

  defp on_call({:before, deadline, message}, from, server) do
    if deadline != :infinity and System.monotonic_time(:millisecond) > deadline,
      do: {:reply, {:error, :timeout}, server},
      else: on_call(message, from, server)
  end

  defp on_call({:push, messages}, _from, server) do
    case Effects.push(server, messages) do
      {:ok, server} -> {:reply, :ok, server}
      {:error, _} = error -> {:reply, error, apply_event(server, :request)}
    end
  end

  defp on_call({:prepare_recall, messages, retract}, _from, server) do
    case Effects.replace_tail(server, retract, messages) do
      {:ok, server} -> {:reply, {:ok, Effects.recall_snapshot(server)}, server}
      {:error, _} = error -> {:reply, error, apply_event(server, :request)}
    end
  end

  defp on_call(:records, _from, server),
    do: {:reply, {:ok, State.history(server.state, :records)}, server}

  defp on_call(:feedbacks, _from, server),
    do: {:reply, {:ok, State.history(server.state, :feedback)}, server}

  defp on_call({:feedback, id, value}, _from, server) do
    case Effects.feedback(server, id, value) do
      {:ok, server} -> {:reply, :ok, server}
      {:error, _} = error -> {:reply, error, apply_event(server, :request)}
    end
  end

  defp on_call({:subscribe, pid}, _from, server) do
    subscribers = Map.put_new_lazy(server.subscribers, pid, fn -> Process.monitor(pid) end)
    {:reply, :ok, %{server | subscribers: subscribers}}
  end

  defp on_call({:unsubscribe, pid}, _from, server) do
    {mref, subscribers} = Map.pop(server.subscribers, pid)
    if mref, do: Process.demonitor(mref, [:flush])
    {:reply, :ok, %{server | subscribers: subscribers}}
  end

  defp on_call(:tag, _from, server), do: {:reply, :ok, apply_event(server, :tag)}
  defp on_call(:window, _from, server), do: {:reply, {:ok, server.state.window}, server}

  defp on_call(:summary, _from, server),
    do: {:reply, {:ok, Window.summary(server.state.window)}, server}

  defp on_call(:memory, _from, server), do: {:reply, {:ok, server.memory}, server}

  defp on_call(:info, _from, server),
    do:
      {:reply, {:ok, Map.put(State.info(server.state), :stats, Memory.stats(server.memory))},
       server}

  defp on_call({:force, :persist}, _from, %{store: nil} = server),
    do: {:reply, {:error, :unsupported}, server}

  defp on_call({:force, :persist}, _from, server) do
    case checkpoint(server) do
      {:ok, server} -> {:reply, :ok, server}
      {:error, _} = error -> {:reply, error, server}
    end
  end

  defp on_call({:put_note, note}, _from, server),
    do:
      {:reply, Memory.put_note(server.memory, note, server.store), apply_event(server, :request)}

  defp on_call({:delete_note, id}, _from, server) do
    case Memory.delete_note(server.memory, id, server.store) do
      {:ok, deleted} -> {:reply, {:ok, deleted}, apply_event(server, {:note_deleted, deleted.id})}
      {:error, _} = error -> {:reply, error, apply_event(server, :request)}
    end
  end

  defp on_call({:list_notes, opts}, _from, server) do
    # In activation mode the graph is only the working set: the store has every note.
    listing =
      case server do
        %{store: %Store{} = store, memory: %Memory{working: working}} when working != nil ->
          Store.list_notes(store, opts)

        _ ->
          Memory.list_notes(server.memory, opts)
      end

    {:reply, listing, apply_event(server, :request)}
  end

  defp on_call(:export, _from, %{store: nil} = server),
    do: {:reply, {:error, :not_persisted}, server}

  defp on_call(:export, _from, server) do
    # The export reads the file: write the live state first.
    case checkpoint(server) do
      {:ok, server} -> {:reply, Store.export_json(server.store), server}
      {:error, _} = error -> {:reply, error, server}
    end
  end

  defp on_call({:force, task}, _from, server) do
    case State.can_force(server.state, task) do
      :ok -> {:reply, :ok, apply_event(server, {:force, task})}
      {:error, _} = error -> {:reply, error, server}
    end
  end

  defp on_cast({:record, ids, at, retrieval}, server) do
    # The store keeps milliseconds: so does the live state.
    at = DateTime.truncate(at, :millisecond)
    if ids != [], do: record_in_graph(server, retrieval, ids, at)
    {:noreply, apply_event(server, {:record, ids, at})}
  end

  @impl true
  def terminate(_reason, %{store: %Store{} = store, memory: %Memory{}} = server) do
    with {:error, error} <- checkpoint(server),
         do:
           Logger.error(
             "character #{server.state.id}: write-back on stop failed: #{inspect(error)}"
           )

    _ = replicate(server)
    Store.close(store)
  end

  def terminate(_reason, %{store: %Store{} = store}), do: Store.close(store)
  def terminate(_reason, _server), do: :ok

  defp on_info({:timeout, name, ref}, server) do
    case server.timers do
      %{^name => {^ref, _timer}} ->
        noreply(
          apply_event(%{server | timers: Map.delete(server.timers, name)}, {:timeout, name})
        )

      _stale ->
        {:noreply, server}
    end
  end

  # Replication.nudge/0: nothing to do here; replicated/1 syncs after it.
  defp on_info(:replicate, server), do: {:noreply, server}

  defp on_info(:idle_timeout, server), do: noreply(apply_event(server, {:timeout, :idle}))
  defp on_info(:idle_stop, server), do: noreply(apply_event(server, {:force_idle_stop}))

  defp on_info({ref, result}, server)
       when is_reference(ref) and is_map_key(server.tasks, ref) do
    Process.demonitor(ref, [:flush])
    {key, tasks} = Map.pop(server.tasks, ref)
    noreply(apply_event(%{server | tasks: tasks}, {:task_done, key, result}))
  end

  defp on_info({:DOWN, ref, :process, _pid, reason}, server)
       when is_map_key(server.tasks, ref) do
    {key, tasks} = Map.pop(server.tasks, ref)

    noreply(
      apply_event(%{server | tasks: tasks}, {:task_done, key, {:error, {:crashed, reason}}})
    )
  end

  defp on_info({:DOWN, mref, :process, pid, _reason}, server) do
    case server.subscribers do
      %{^pid => ^mref} -> {:noreply, %{server | subscribers: Map.delete(server.subscribers, pid)}}
      _ -> {:noreply, server}
    end
  end

  defp on_info({:soul_mem_embed_progress, _done, _total}, server), do: {:noreply, server}

  # trap_exit (persisting characters): the parent's exit stops us through
  # terminate/2; other linked exits are not ours to act on.
  defp on_info({:EXIT, _pid, _reason}, server), do: {:noreply, server}

  defp on_info(message, server) do
    Logger.debug("character #{server.state.id}: unexpected message #{inspect(message, limit: 5)}")
    {:noreply, server}
  end

  defp noreply(%{stop: true} = server), do: {:stop, :normal, Map.delete(server, :stop)}
  defp noreply(server), do: {:noreply, server}
end

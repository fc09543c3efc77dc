defmodule SoulMem.Character do
  @moduledoc """
  One running character: its memory graph, sliding window with cumulative
  summary, retrieval records and feedback, and the Working/Idle state
  machine (the seed's WorkingMemory).

  Started through `SoulMem.Characters.ensure_started/2` (under a
  `DynamicSupervisor`, `restart: :temporary`) and registered in
  `SoulMem.Registry` under its id. The graph is imported in `handle_continue`,
  so starting returns at once; requests wait until it is loaded.

  Every function takes the character as its id or pid and returns
  `{:error, :not_running}` when no such character runs (also when it stops
  between lookup and call) and `{:error, :timeout}` when it does not answer
  in time.

  ## States

  A request (push, recall, feedback, tag) moves the character to `:working`.
  After `:idle_after` ms without one it becomes `:idle` and runs maintenance
  (`SoulMem.Maintenance`) in a task: the character keeps serving, and a
  request during maintenance does not cancel it. While idle, maintenance
  repeats every `:maintenance_interval` ms. Sending the atom `:idle_timeout`
  to the process makes it idle at once (tests, operators). A persisted
  character idle for `:stop_after` ms (default 30 min) stops, after its
  write-back, and the next request starts it from its store; the atom
  `:idle_stop` stops an idle one at once.

  ## Persistence

  With `persist: true` the character owns its `SoulMem.Store` (opened in
  `init/1`: a corrupt, foreign or in-use store makes the start fail with
  `{:error, {:store_failed, %SoulMem.Error{}}}` and leaves other characters
  alone). When the store already holds a graph it is loaded and `:graph` /
  `:memory` are ignored; otherwise the source is imported and saved at once.
  The window, summary, records and feedback come back as they were.

  Acknowledged writes are durable before the reply: pushed messages,
  feedback, and summaries as they land. The graph (retrieval counts, learned
  and pruned links, consolidated notes) is written back at Idle, after
  maintenance that changed it, on `force(id, :persist)`, and on a graceful
  stop (`SoulMem.Characters.stop/1`, application shutdown, SIGTERM to a
  release).

  ## Events

  `subscribe/1` makes the caller receive `{:soul_mem, character_id, event,
  payload}`:

    * `:state_changed` — `:working` or `:idle`;
    * `:summary_updated` — the new cumulative summary;
    * `:summary_failed` — `%{job: id, reason: reason, retry_in: ms}`: an
      LLM error, a blank answer among them (`{:invalid_response,
      :empty_content}`; the summary is kept).
      The job's messages stay visible; the character retries it after
      `retry_in` ms, Working or Idle, with exponential backoff
      (`:summary_retry` doubling up to `:summary_max_retry`, with jitter;
      reset by a summary that lands). While Idle, the `:summarize_pending`
      maintenance task retries it too; never two summary jobs run at once;
    * `:maintenance_done` — `%{tasks: [task], results: [{task, result}]}`.
  """

  # shutdown: a graceful stop writes the graph back (terminate/2); large
  # graphs take seconds.
  use GenServer, restart: :temporary, shutdown: 30_000

  require Logger

  alias SoulMem.{Maintenance, Memory, ProgressLog, Store, Window}

  @default_timeout 5_000
  # Retrieval timestamps kept per note (newest); the NIF keeps the count.
  @max_records_per_note 256
  # Summary jobs one maintenance run catches up on; the retry timer drains
  # the rest one job at a time, each committed as it lands.
  @drain_batch 4
  # Graphs up to this many notes are embedded with the model before the
  # character serves (seconds); larger ones in the background.
  @embed_at_once 200

  @type character :: String.t() | pid()
  @type state_name :: :loading | :working | :idle
  @type call_error :: {:error, :not_running | :timeout | :loading}

  @start_opts [
    :id,
    :graph,
    :memory,
    :window,
    :max_pending,
    :interval,
    :max_bytes,
    :idle_after,
    :stop_after,
    :maintenance,
    :maintenance_interval,
    :embedder,
    :embedding_module,
    :persist,
    :data_dir,
    :store_quota,
    :working_memory,
    :summary_retry,
    :summary_max_retry,
    llm: [],
    summary: ""
  ]

  ## Client API

  @doc """
  Starts a character. Use `SoulMem.Characters.ensure_started/2` instead.

  Options:

    * `:id` (required) — the character id (binary);
    * `:graph` — a Graph JSON file to import, or `:memory` — an already
      loaded `%SoulMem.Memory{}`; neither gives an empty graph;
    * `:window` — window capacity (default: app env `:window`, 12);
    * `:interval` — summary tag interval, at most the capacity (default:
      app env `:summary_interval` capped at the capacity, else the capacity);
    * `:max_bytes` — largest message text (default 16000);
    * `:max_pending` — most messages waiting for their summary before
      pushes are refused with `{:error, :backlog_full}` (default: app env
      `:max_pending_messages`, 1000; see `SoulMem.Window.new/1`);
    * `:summary` — an initial cumulative summary;
    * `:idle_after` — ms without requests before Idle (default: app env
      `:idle_after_ms`, 5 min);
    * `:stop_after` — ms Idle before a persisted character stops (after its
      write-back; the next request starts it again from its store), or
      `:infinity` (default: app env `:idle_stop_ms`, 30 min);
    * `:maintenance` — implementation modules (default: app env
      `:maintenance`);
    * `:maintenance_interval` — ms between maintenance runs while Idle
      (default: app env `:maintenance_interval_ms`, 10 min);
    * `:summary_retry` / `:summary_max_retry` — first and largest delay in
      ms before a failed summary job is retried (default: app env
      `:summary_retry_ms`, 5 s, and `:summary_max_retry_ms`, 5 min);
    * `:embedder` — how the graph is embedded for retrieval after loading
      (`SoulMem.Embedding`): `:auto` (default: app env `:embedder`, else
      the model, falling back to `:hash` when it is missing), `:model`,
      `:hash` or `:none`;
    * `:llm` — options for `SoulMem.LLM.chat/2` (summaries), on top of the
      application env; kept as a `SoulMem.LLM.Config` (the key is redacted
      from inspect output);
    * `:persist` — keep the character in its store under `:data_dir`
      (default: app env `:persist`, `true`): see "Persistence" in the
      moduledoc;
    * `:data_dir` — where stores live (default `SoulMem.Store.data_dir/0`);
    * `:store_quota` — largest store file in 4 KiB pages (default: app env
      `:store_quota_pages`, none); writes past it fail with `:disk_full`;
    * `:working_memory` — `:full` (the whole stored graph is loaded),
      activation options (`SoulMem.Store.open_working/3`: `cap`, `k_hops` …;
      recall then activates notes from the store), or `:auto` (default: app
      env `:working_memory`): activation with defaults when the stored graph
      has more than app env `:working_memory_threshold` (50_000) notes.
  """
  @spec start_link(keyword()) :: GenServer.on_start()
  def start_link(opts) do
    opts = Keyword.validate!(opts, @start_opts)
    id = Keyword.fetch!(opts, :id)

    unless is_binary(id) and id != "",
      do: raise(ArgumentError, "expected :id to be a non-empty binary, got: #{inspect(id)}")

    GenServer.start_link(__MODULE__, opts, name: via(id))
  end

  @doc "The `:via` name of character `id` in `SoulMem.Registry`."
  @spec via(String.t()) :: {:via, Registry, {SoulMem.Registry, String.t()}}
  def via(id), do: {:via, Registry, {SoulMem.Registry, id}}

  @doc """
  Pushes one message or a list of messages (`%{role: :user | :assistant,
  text: binary}`, optional `:at`, default now; roles may also be the strings
  `"user"`/`"assistant"`) into the window. A list is all or nothing: on an
  invalid message the window is unchanged and its error returned.
  """
  @spec push(character(), map() | [map()], timeout()) ::
          :ok | {:error, Window.error_reason()} | call_error()
  def push(character, messages, timeout \\ @default_timeout),
    do: call(character, {:push, List.wrap(messages)}, timeout)

  @doc """
  First half of a recall (`SoulMem.recall/3`): pushes `messages`, marks the
  character working and returns what retrieval needs — the memory graph, the
  visible window and the summary.
  """
  @spec prepare_recall(character(), [map()], timeout()) ::
          {:ok,
           %{memory: Memory.t(), window: [Window.message()], summary: String.t(), llm: keyword()}}
          | {:error, Window.error_reason()}
          | call_error()
  def prepare_recall(character, messages, timeout \\ @default_timeout),
    do: call(character, {:prepare_recall, messages}, timeout)

  @doc """
  Records that the notes `ids` (readable ids) were returned by a recall at
  `at`: appended to the character's records and passed to
  `retrieval.record/3` (default `SoulMem.Retrieval`: retrieval count and last
  access time in the graph; skipped while that module is not available).
  Asynchronous.
  """
  @spec record(character(), [String.t()], DateTime.t(), module() | nil) ::
          :ok | {:error, :not_running}
  def record(character, ids, %DateTime{} = at, retrieval \\ nil) when is_list(ids) do
    retrieval = retrieval || Application.get_env(:soul_mem, :retrieval, SoulMem.Retrieval)

    case resolve(character) do
      nil -> {:error, :not_running}
      pid -> GenServer.cast(pid, {:record, ids, at, retrieval})
    end
  end

  @doc """
  The retrieval records: `%{note_id => [DateTime]}`, oldest first (the last
  256 per note).
  """
  @spec records(character(), timeout()) :: {:ok, %{String.t() => [DateTime.t()]}} | call_error()
  def records(character, timeout \\ @default_timeout), do: call(character, :records, timeout)

  @doc """
  Stores user feedback on a note: `+1` or `-1`. Other values fail with
  `{:error, :invalid_feedback}`, a non-binary or empty id with
  `{:error, :invalid_note_id}`, a note not in the graph with
  `{:error, :not_found}`. The last 256 per note are kept.
  """
  @spec feedback(character(), String.t(), 1 | -1, timeout()) ::
          :ok | {:error, :invalid_feedback | :invalid_note_id | :not_found} | call_error()
  def feedback(character, note_id, value, timeout \\ @default_timeout) do
    cond do
      not is_binary(note_id) or note_id == "" -> {:error, :invalid_note_id}
      value not in [1, -1] -> {:error, :invalid_feedback}
      true -> call(character, {:feedback, note_id, value}, timeout)
    end
  end

  @doc "The feedback: `%{note_id => [{+1 | -1, DateTime}]}`, oldest first."
  @spec feedbacks(character(), timeout()) ::
          {:ok, %{String.t() => [{1 | -1, DateTime.t()}]}} | call_error()
  def feedbacks(character, timeout \\ @default_timeout), do: call(character, :feedbacks, timeout)

  @doc """
  Subscribes the caller to the character's events (see the moduledoc). The
  subscription ends when the caller exits.
  """
  @spec subscribe(character(), timeout()) :: :ok | call_error()
  def subscribe(character, timeout \\ @default_timeout),
    do: call(character, {:subscribe, self()}, timeout)

  @doc "Ends the caller's subscription."
  @spec unsubscribe(character(), timeout()) :: :ok | call_error()
  def unsubscribe(character, timeout \\ @default_timeout),
    do: call(character, {:unsubscribe, self()}, timeout)

  @doc "Forces a summary tag on the newest message (conversation ended, topic switch)."
  @spec tag(character(), timeout()) :: :ok | call_error()
  def tag(character, timeout \\ @default_timeout), do: call(character, :tag, timeout)

  @doc "The window struct (with pending messages, jobs and summary)."
  @spec window(character(), timeout()) :: {:ok, Window.t()} | call_error()
  def window(character, timeout \\ @default_timeout), do: call(character, :window, timeout)

  @doc "The cumulative summary."
  @spec summary(character(), timeout()) :: {:ok, String.t()} | call_error()
  def summary(character, timeout \\ @default_timeout), do: call(character, :summary, timeout)

  @doc "The memory graph."
  @spec memory(character(), timeout()) :: {:ok, Memory.t()} | call_error()
  def memory(character, timeout \\ @default_timeout), do: call(character, :memory, timeout)

  @doc """
  A summary of the character for operators: `%{id, state, window_size,
  pending, jobs, summary_length, maintenance_running, stats}`.
  """
  @spec info(character(), timeout()) :: {:ok, map()} | call_error()
  def info(character, timeout \\ @default_timeout), do: call(character, :info, timeout)

  @doc """
  Inserts or replaces one note of the character's graph
  (`SoulMem.Memory.put_note/3`); with a store it is durable before this
  returns. Returns the note as stored.
  """
  @spec put_note(character(), map() | binary(), timeout()) ::
          {:ok, map()} | {:error, SoulMem.Error.t()} | call_error()
  def put_note(character, note, timeout \\ @default_timeout),
    do: call(character, {:put_note, note}, timeout)

  @doc """
  The whole character (graph with archived notes, window, summary, records,
  feedback, forgetting state) as one JSON document, after writing the live
  state back. `{:error, :not_persisted}` for a character without a store.
  """
  @spec export(character(), timeout()) ::
          {:ok, binary()} | {:error, :not_persisted | SoulMem.Error.t()} | call_error()
  def export(character, timeout \\ 30_000), do: call(character, :export, timeout)

  @doc """
  Runs one maintenance task now, whatever the state (operators). Returns
  `:ok` once started (the result comes as a `:maintenance_done` event),
  `{:error, :unsupported}` when no configured implementation handles it,
  `{:error, :busy}` while maintenance runs. `:persist` runs synchronously:
  `:ok` once the graph, window and summary are written (`{:error,
  :unsupported}` without a store).
  """
  @spec force(character(), Maintenance.task(), timeout()) ::
          :ok | {:error, :unsupported | :busy} | call_error()
  def force(character, task, timeout \\ @default_timeout),
    do: call(character, {:force, task}, timeout)

  # A request carries its deadline: one that waited past it in the mailbox
  # (its caller gave up) is answered without being applied, so a message a
  # client saw fail is never stored later. While the character loads, a
  # request waits for it up to the load timeout (default 60 s) and fails
  # with `:loading` past it.
  defp call(character, message, timeout) do
    case resolve(character) do
      nil ->
        {:error, :not_running}

      pid ->
        loading? = loading?(pid)
        timeout = if loading?, do: max_timeout(timeout, load_timeout()), else: timeout

        try do
          GenServer.call(pid, {:before, deadline(timeout), message}, timeout)
        catch
          :exit, {:timeout, _} -> {:error, if(loading?(pid), do: :loading, else: :timeout)}
          :exit, _ -> {:error, :not_running}
        end
    end
  end

  defp deadline(:infinity), do: :infinity
  defp deadline(ms), do: System.monotonic_time(:millisecond) + ms

  defp max_timeout(:infinity, _), do: :infinity
  defp max_timeout(a, b), do: max(a, b)

  defp load_timeout, do: Application.get_env(:soul_mem, :load_timeout_ms, 60_000)

  # The Registry value of a character is :ready once it has loaded.
  defp loading?(pid) do
    case Registry.keys(SoulMem.Registry, pid) do
      [id | _] -> Registry.values(SoulMem.Registry, id, pid) != [:ready]
      [] -> false
    end
  end

  defp resolve(pid) when is_pid(pid), do: pid

  defp resolve(id) when is_binary(id), do: SoulMem.Characters.whereis(id)

  defp resolve(_), do: nil

  ## Server

  @impl true
  def init(opts) do
    id = Keyword.fetch!(opts, :id)
    capacity = opts[:window] || Application.get_env(:soul_mem, :window, 12)

    window =
      Window.new(
        capacity: capacity,
        interval:
          opts[:interval] ||
            min(Application.get_env(:soul_mem, :summary_interval, capacity), capacity),
        max_bytes: opts[:max_bytes],
        max_pending: opts[:max_pending] || Application.get_env(:soul_mem, :max_pending_messages),
        summary: opts[:summary]
      )

    persist = Keyword.get(opts, :persist, Application.get_env(:soul_mem, :persist, true))
    data_dir = opts[:data_dir] || Store.data_dir()
    # Writes the graph back on shutdown (terminate/2 runs on exit signals).
    if persist, do: Process.flag(:trap_exit, true)

    state = %{
      id: id,
      source: source(opts),
      persist: persist,
      data_dir: data_dir,
      store_quota: opts[:store_quota] || Application.get_env(:soul_mem, :store_quota_pages),
      working_memory:
        working_memory!(
          opts[:working_memory] || Application.get_env(:soul_mem, :working_memory, :auto)
        ),
      activation: nil,
      store: nil,
      stored: [],
      pop_to: nil,
      dirty: false,
      memory: nil,
      window: window,
      status: :loading,
      idle_after: opts[:idle_after] || Application.get_env(:soul_mem, :idle_after_ms, 300_000),
      idle_ref: nil,
      idle_timer: nil,
      stop_after:
        stop_after!(opts[:stop_after] || Application.get_env(:soul_mem, :idle_stop_ms, 1_800_000)),
      stop_ref: nil,
      maintenance: opts[:maintenance] || Maintenance.implementations(),
      maintenance_interval:
        opts[:maintenance_interval] ||
          Application.get_env(:soul_mem, :maintenance_interval_ms, 600_000),
      maintenance_ref: nil,
      maintenance_timer: nil,
      summary_retry:
        non_neg!(
          :summary_retry,
          opts[:summary_retry] || Application.get_env(:soul_mem, :summary_retry_ms, 5_000)
        ),
      summary_max_retry:
        non_neg!(
          :summary_max_retry,
          opts[:summary_max_retry] ||
            Application.get_env(:soul_mem, :summary_max_retry_ms, 300_000)
        ),
      # Failed summary retries in a row (the backoff exponent) and the pending
      # retry timer; like the idle timer, its message carries a fresh ref.
      retry_attempts: 0,
      retry_ref: nil,
      retry_timer: nil,
      llm: llm_opts(opts[:llm]),
      embedder: embedder!(opts[:embedder] || Application.get_env(:soul_mem, :embedder, :auto)),
      # What recall embeds with now: :model, :hash, :partial (the model is still
      # embedding the graph in the background; recall uses the lexical hash
      # index meanwhile) or :none.
      embedding: :none,
      embedding_module:
        opts[:embedding_module] ||
          Application.get_env(:soul_mem, :embedding_module, SoulMem.Embedding),
      subscribers: %{},
      records: %{},
      feedback: %{},
      tasks: %{}
    }

    with {:ok, state} <- open_store(state) do
      case state.source do
        {:graph, path} ->
          if File.regular?(path) or state.store != nil,
            do: {:ok, state, {:continue, :load}},
            else: {:stop, {:graph_not_found, path}}

        _ ->
          {:ok, state, {:continue, :load}}
      end
    end
  end

  # Opening is quick (no graph read), so it happens in init: a store that
  # cannot be used fails the start with its reason.
  defp open_store(state, attempts \\ 10)
  defp open_store(%{persist: false} = state, _attempts), do: {:ok, state}

  defp open_store(state, attempts) do
    case Store.open(state.data_dir, state.id, max_pages: state.store_quota) do
      {:ok, store} ->
        {:ok, %{state | store: store}}

      # The handle of a predecessor that just crashed in this VM is released
      # when the VM frees its heap, moments after it died: wait for that.
      {:error, %SoulMem.Error{reason: :in_use}} when attempts > 1 ->
        Process.sleep(50)
        open_store(state, attempts - 1)

      {:error, error} ->
        Logger.error("character #{state.id}: cannot open its store: #{Exception.message(error)}")
        {:stop, {:store_failed, error}}
    end
  end

  # The LLM settings are kept as a SoulMem.LLM.Config, whose Inspect hides
  # the API key (state dumps, crash reports).
  defp llm_opts(llm) do
    {config_opts, rest} = Keyword.split(llm, SoulMem.LLM.Config.keys())
    config = SoulMem.LLM.Config.merge(SoulMem.LLM.Config.from_env(), config_opts)
    Keyword.put(rest, :config, config)
  end

  defp working_memory!(w) when w in [:auto, :full], do: w
  defp working_memory!(w) when is_list(w), do: w

  defp working_memory!(other),
    do:
      raise(
        ArgumentError,
        "expected :working_memory :auto | :full | keyword, got: #{inspect(other)}"
      )

  defp non_neg!(_key, ms) when is_integer(ms) and ms >= 0, do: ms

  defp non_neg!(key, other),
    do:
      raise(
        ArgumentError,
        "expected #{inspect(key)} to be a non-negative integer (ms), got: #{inspect(other)}"
      )

  defp stop_after!(ms) when (is_integer(ms) and ms >= 0) or ms == :infinity, do: ms

  defp stop_after!(other),
    do:
      raise(
        ArgumentError,
        "expected :stop_after to be a non-negative integer or :infinity, got: #{inspect(other)}"
      )

  defp embedder!(e) when e in [:auto, :model, :hash, :none], do: e

  defp embedder!(other),
    do:
      raise(
        ArgumentError,
        "expected :embedder :auto | :model | :hash | :none, got: #{inspect(other)}"
      )

  defp source(opts) do
    cond do
      match?(%Memory{}, opts[:memory]) -> {:memory, opts[:memory]}
      opts[:memory] != nil -> raise ArgumentError, "expected :memory to be a %SoulMem.Memory{}"
      is_binary(opts[:graph]) -> {:graph, opts[:graph]}
      opts[:graph] != nil -> raise ArgumentError, "expected :graph to be a path"
      true -> :empty
    end
  end

  @impl true
  def handle_continue(:load, state) do
    case with(
           {:ok, state} <- load(state),
           {:ok, state} <- embed(state),
           {:ok, state} <- open_working(state),
           do: {:ok, state}
         ) do
      {:ok, state} ->
        Registry.update_value(SoulMem.Registry, state.id, fn _ -> :ready end)
        {:noreply, %{state | status: :idle, source: nil} |> schedule_stop() |> dispatch_summary()}

      {:error, error} ->
        Logger.error("character #{state.id}: cannot load its graph: #{Exception.message(error)}")
        {:stop, {:shutdown, {:load_failed, error}}, state}
    end
  end

  defp load(%{store: nil} = state) do
    with {:ok, memory} <- load_source(state), do: {:ok, %{state | memory: memory}}
  end

  defp load(%{store: store} = state) do
    state = %{state | activation: activation(state)}

    with {:ok, stored} <- Store.load(store, graph: state.activation == nil),
         {:ok, memory, fresh?} <- stored_or_source(state, stored),
         state = %{state | memory: memory},
         {:ok, state} <- restore(state, stored) do
      # An imported source becomes durable before the character serves.
      if fresh?, do: checkpoint(state), else: {:ok, state}
    end
  end

  # Activation mode needs a stored graph: a new character imports its source
  # whole first (and activates from the next start on).
  defp activation(%{working_memory: :full}), do: nil

  defp activation(state) do
    threshold = Application.get_env(:soul_mem, :working_memory_threshold, 50_000)

    case {state.working_memory, Store.info(state.store)} do
      {_, {:ok, %{"graph_saved" => false}}} -> nil
      {opts, {:ok, _}} when is_list(opts) -> opts
      {:auto, {:ok, %{"notes" => notes}}} when notes > threshold -> []
      _ -> nil
    end
  end

  defp open_working(%{activation: nil} = state), do: {:ok, state}

  defp open_working(state) do
    case Store.open_working(state.store, state.memory, state.activation) do
      {:ok, memory, report} ->
        Logger.info(
          "character #{state.id}: working memory over #{report["notes"]} stored notes " <>
            "(#{report["embedded"]} embedded now)"
        )

        {:ok, %{state | memory: memory}}

      {:error, _} = error ->
        error
    end
  end

  defp stored_or_source(_state, %{memory: %Memory{} = memory}), do: {:ok, memory, false}

  defp stored_or_source(state, %{memory: nil}) do
    with {:ok, memory} <- load_source(state), do: {:ok, memory, true}
  end

  defp load_source(state) do
    case state.source do
      {:memory, memory} -> {:ok, memory}
      {:graph, path} -> Memory.import_file(state.id, path)
      :empty -> {:ok, Memory.new(state.id)}
    end
  end

  # The stored window is pushed again into a fresh window: messages past the
  # capacity slide out and queue their summary jobs as they would have.
  # Tags are re-derived from the interval (a forced tag is not kept).
  defp restore(state, stored) do
    window = %{state.window | summary: stored.summary || state.window.summary}

    messages =
      Enum.map(stored.window, fn m ->
        %{role: stored_role(m.role), text: m.text, at: m.at}
      end)

    case Window.push_all(window, messages) do
      {:ok, restored} ->
        stored_seqs =
          Enum.zip(
            (window.seq + 1)..(window.seq + length(messages))//1,
            Enum.map(stored.window, & &1.seq)
          )

        {:ok,
         %{
           state
           | window: restored,
             stored: stored_seqs,
             records: group_newest_first(stored.records, fn {id, at} -> {id, at} end),
             feedback: group_newest_first(stored.feedback, fn {id, v, at} -> {id, {v, at}} end)
         }
         |> forget_dropped()}

      {:error, reason} ->
        {:error, SoulMem.Error.new(:corrupt, "stored window message is invalid: #{reason}")}
    end
  end

  defp stored_role("user"), do: :user
  defp stored_role("assistant"), do: :assistant
  defp stored_role(other), do: other

  defp group_newest_first(rows, split) do
    Enum.reduce(rows, %{}, fn row, acc ->
      {id, value} = split.(row)
      Map.update(acc, id, [value], &Enum.take([value | &1], @max_records_per_note))
    end)
  end

  # Retrieval needs the graph embedded (SoulMem.Embedding, called by name
  # so that this module compiles without it). `:auto` uses the model and
  # falls back to the lexical hash embedder when the model is missing. A
  # graph too large to embed with the model in a moment is embedded with the
  # hash embedder first, so the character serves at once, and with the model
  # in the background (`embed_in_background/2`).
  defp embed(%{embedder: :none} = state), do: {:ok, state}

  defp embed(state) do
    embedding = state.embedding_module

    if Code.ensure_loaded?(embedding) and function_exported?(embedding, :embed_graph, 2),
      do: do_embed(embedding, state),
      else: {:ok, state}
  end

  defp do_embed(embedding, %{embedder: :auto} = state) do
    case embedding.ensure_loaded([]) do
      {:ok, _model} ->
        do_embed(embedding, %{state | embedder: :model})

      {:error, error} ->
        Logger.warning(
          "character #{state.id}: embedding model unavailable (#{Exception.message(error)}); " <>
            "using the lexical hash embedder"
        )

        do_embed(embedding, %{state | embedder: :hash})
    end
  end

  defp do_embed(embedding, %{embedder: :model, activation: nil} = state) do
    with {:ok, _} <- embedding.ensure_loaded([]) do
      if Memory.stats(state.memory).nodes > @embed_at_once,
        do: embed_in_background(embedding, state),
        else: embed_now(embedding, state, :model)
    end
  end

  defp do_embed(embedding, state), do: embed_now(embedding, state, state.embedder)

  defp embed_now(embedding, state, embedder) do
    log = ProgressLog.start("character #{state.id}: embedding its graph (#{embedder})")

    try do
      with {:ok, _} <- embedding.embed_graph(state.memory, embedder: embedder, progress: log),
           do: {:ok, %{state | embedding: embedder}}
    after
      ProgressLog.stop(log)
    end
  end

  # The hash index first (fast), then a task embeds the texts the model's
  # cache lacks on the bulk pool (one low-priority core, holding no lock) and
  # rebuilds the index with the model from the cache. Recalls meanwhile say
  # `embedding: :partial`.
  defp embed_in_background(embedding, state) do
    with {:ok, state} <- embed_now(embedding, state, :hash) do
      memory = state.memory
      log = ProgressLog.start("character #{state.id}: embedding its graph (model, background)")

      task =
        Task.Supervisor.async_nolink(SoulMem.TaskSupervisor, fn ->
          try do
            with {:ok, _} <- embedding.prefill(memory, progress: log),
                 do: embedding.embed_graph(memory, embedder: :model, progress: log)
          after
            ProgressLog.stop(log)
          end
        end)

      {:ok, %{state | embedding: :partial, tasks: Map.put(state.tasks, task.ref, :embed_model)}}
    end
  end

  @impl true
  def handle_call({:before, deadline, message}, from, state) do
    if deadline != :infinity and System.monotonic_time(:millisecond) > deadline,
      do: {:reply, {:error, :timeout}, state},
      else: handle_call(message, from, state)
  end

  def handle_call({:push, messages}, _from, state) do
    case push_messages(state, messages) do
      {:ok, state} -> {:reply, :ok, state |> touch() |> dispatch_summary()}
      {:error, _} = error -> {:reply, error, touch(state)}
    end
  end

  def handle_call({:prepare_recall, messages}, _from, state) do
    case push_messages(state, messages) do
      {:ok, state} ->
        state = state |> touch() |> dispatch_summary()

        reply = %{
          memory: state.memory,
          window: Window.visible(state.window),
          summary: Window.summary(state.window),
          # Forgetting revises recalled memories in the character's voice with its LLM.
          llm: state.llm,
          embedding: state.embedding
        }

        {:reply, {:ok, reply}, state}

      {:error, _} = error ->
        {:reply, error, touch(state)}
    end
  end

  def handle_call(:records, _from, state),
    do: {:reply, {:ok, reverse_values(state.records)}, state}

  def handle_call(:feedbacks, _from, state),
    do: {:reply, {:ok, reverse_values(state.feedback)}, state}

  def handle_call({:feedback, id, value}, _from, state) do
    case Memory.get_note(state.memory, id) do
      {:ok, _note} ->
        at = DateTime.utc_now() |> DateTime.truncate(:millisecond)

        case persist_feedback(state, id, value, at) do
          :ok ->
            entry = {value, at}

            feedback =
              Map.update(
                state.feedback,
                id,
                [entry],
                &Enum.take([entry | &1], @max_records_per_note)
              )

            {:reply, :ok, touch(%{state | feedback: feedback})}

          {:error, _} = error ->
            {:reply, error, touch(state)}
        end

      {:error, %SoulMem.Error{reason: :not_found}} ->
        {:reply, {:error, :not_found}, touch(state)}

      {:error, _} = error ->
        {:reply, error, touch(state)}
    end
  end

  def handle_call({:subscribe, pid}, _from, state) do
    subscribers = Map.put_new_lazy(state.subscribers, pid, fn -> Process.monitor(pid) end)

    {:reply, :ok, %{state | subscribers: subscribers}}
  end

  def handle_call({:unsubscribe, pid}, _from, state) do
    {mref, subscribers} = Map.pop(state.subscribers, pid)
    if mref, do: Process.demonitor(mref, [:flush])
    {:reply, :ok, %{state | subscribers: subscribers}}
  end

  def handle_call(:tag, _from, state),
    do: {:reply, :ok, touch(%{state | window: Window.tag_last(state.window)})}

  def handle_call(:window, _from, state), do: {:reply, {:ok, state.window}, state}

  def handle_call(:summary, _from, state),
    do: {:reply, {:ok, Window.summary(state.window)}, state}

  def handle_call(:memory, _from, state), do: {:reply, {:ok, state.memory}, state}

  def handle_call(:info, _from, state) do
    info = %{
      id: state.id,
      state: state.status,
      window_size: Window.size(state.window),
      pending: length(state.window.pending),
      jobs: length(Window.jobs(state.window)),
      summary_length: String.length(Window.summary(state.window)),
      maintenance_running: state.maintenance_ref != nil,
      stats: Memory.stats(state.memory)
    }

    {:reply, {:ok, info}, state}
  end

  def handle_call({:force, :persist}, _from, %{store: nil} = state),
    do: {:reply, {:error, :unsupported}, state}

  def handle_call({:force, :persist}, _from, state) do
    case checkpoint(state) do
      {:ok, state} -> {:reply, :ok, state}
      {:error, _} = error -> {:reply, error, state}
    end
  end

  def handle_call({:put_note, note}, _from, state) do
    reply = Memory.put_note(state.memory, note, state.store)
    {:reply, reply, touch(state)}
  end

  def handle_call(:export, _from, %{store: nil} = state),
    do: {:reply, {:error, :not_persisted}, state}

  def handle_call(:export, _from, state) do
    # The export reads the file: write the live state first.
    case checkpoint(state) do
      {:ok, state} -> {:reply, Store.export_json(state.store), state}
      {:error, _} = error -> {:reply, error, state}
    end
  end

  def handle_call({:force, task}, _from, state) do
    cond do
      task not in Maintenance.all_tasks() or not Maintenance.supported?(task, state.maintenance) ->
        {:reply, {:error, :unsupported}, state}

      state.maintenance_ref != nil ->
        {:reply, {:error, :busy}, state}

      true ->
        {:reply, :ok, start_maintenance(state, [task])}
    end
  end

  @impl true
  def handle_cast({:record, ids, at, retrieval}, state) do
    # The store keeps milliseconds: so does the live state.
    at = DateTime.truncate(at, :millisecond)

    records =
      Enum.reduce(ids, state.records, fn id, acc ->
        Map.update(acc, id, [at], &Enum.take([at | &1], @max_records_per_note))
      end)

    record_in_graph(state, retrieval, ids, at)
    persist_records(state, ids, at)
    {:noreply, %{state | records: records, dirty: true}}
  end

  @impl true
  def terminate(_reason, %{store: %Store{} = store, memory: %Memory{}} = state) do
    case checkpoint(state) do
      {:ok, _} ->
        :ok

      {:error, error} ->
        Logger.error("character #{state.id}: write-back on stop failed: #{inspect(error)}")
    end

    Store.close(store)
  end

  def terminate(_reason, %{store: %Store{} = store}), do: Store.close(store)
  def terminate(_reason, _state), do: :ok

  @impl true
  def handle_info({:idle_timeout, ref}, %{idle_ref: ref} = state), do: {:noreply, go_idle(state)}
  def handle_info({:idle_timeout, _stale}, state), do: {:noreply, state}
  def handle_info(:idle_timeout, state), do: {:noreply, go_idle(state)}

  # Idle for `stop_after` ms with nothing in flight: the process ends
  # (terminate/2 writes back) and the next request starts it from its store.
  def handle_info({:idle_stop, ref}, %{stop_ref: ref, status: :idle} = state),
    do: idle_stop(state)

  def handle_info({:idle_stop, _stale}, state), do: {:noreply, state}
  # The atom stops an idle persisted character at once (tests, operators).
  def handle_info(:idle_stop, %{status: :idle, store: %Store{}} = state), do: idle_stop(state)
  def handle_info(:idle_stop, state), do: {:noreply, state}

  def handle_info({:summary_retry, ref}, %{retry_ref: ref} = state) do
    # Jobs a maintenance run holds are in flight, not failed: they are left
    # to it, so the same job never runs twice at once.
    state = %{state | retry_ref: nil, retry_timer: nil}
    {:noreply, dispatch_summary(%{state | window: Window.requeue_failed(state.window)})}
  end

  def handle_info({:summary_retry, _stale}, state), do: {:noreply, state}

  def handle_info(:maintenance_tick, state) do
    state = %{state | maintenance_timer: nil}

    if state.status == :idle and state.maintenance_ref == nil,
      do: {:noreply, start_maintenance(state, Maintenance.all_tasks())},
      else: {:noreply, state}
  end

  def handle_info({ref, result}, state) when is_reference(ref) and is_map_key(state.tasks, ref) do
    Process.demonitor(ref, [:flush])
    {kind, tasks} = Map.pop(state.tasks, ref)
    {:noreply, task_done(%{state | tasks: tasks}, kind, result)}
  end

  def handle_info({:DOWN, ref, :process, _pid, reason}, state)
      when is_map_key(state.tasks, ref) do
    {kind, tasks} = Map.pop(state.tasks, ref)
    {:noreply, task_done(%{state | tasks: tasks}, kind, {:error, {:crashed, reason}})}
  end

  def handle_info({:DOWN, mref, :process, pid, _reason}, state) do
    case state.subscribers do
      %{^pid => ^mref} -> {:noreply, %{state | subscribers: Map.delete(state.subscribers, pid)}}
      _ -> {:noreply, state}
    end
  end

  def handle_info({:soul_mem_embed_progress, _done, _total}, state), do: {:noreply, state}

  # trap_exit (persisting characters): the parent's exit stops us through
  # terminate/2; other linked exits are not ours to act on.
  def handle_info({:EXIT, _pid, _reason}, state), do: {:noreply, state}

  def handle_info(message, state) do
    Logger.debug("character #{state.id}: unexpected message #{inspect(message, limit: 5)}")
    {:noreply, state}
  end

  ## Window and summaries

  defp push_messages(state, messages) when is_list(messages) do
    now = DateTime.utc_now()

    with {:ok, window} <- Window.push_all(state.window, Enum.map(messages, &normalize(&1, now))),
         {:ok, stored} <- persist_messages(state, window) do
      {:ok, forget_dropped(%{state | window: window, stored: state.stored ++ stored})}
    end
  end

  defp push_messages(_state, _messages), do: {:error, :invalid_message}

  defp normalize(%{} = message, now) do
    role =
      case Map.get(message, :role) do
        "user" -> :user
        "assistant" -> :assistant
        role -> role
      end

    %{role: role, text: Map.get(message, :text), at: Map.get(message, :at) || now}
  end

  defp normalize(other, _now), do: other

  defp dispatch_summary(state) do
    case Window.next_job(state.window) do
      {:ok, job, window} ->
        prompt = Window.prompt(job, Window.summary(window))
        llm = state.llm

        task =
          Task.Supervisor.async_nolink(SoulMem.TaskSupervisor, fn ->
            SoulMem.LLM.chat(prompt, llm)
          end)

        %{state | window: window, tasks: Map.put(state.tasks, task.ref, {:summary, job.id})}

      :none ->
        state
    end
  end

  defp task_done(state, :embed_model, {:ok, _model}) do
    notify(state, :embedded, :model)
    %{state | embedding: :model}
  end

  defp task_done(state, :embed_model, {:error, reason}) do
    Logger.warning(
      "character #{state.id}: embedding with the model failed (#{inspect(reason, limit: 8)}); " <>
        "recall keeps the lexical hash index"
    )

    notify(state, :embedded, :hash)
    %{state | embedding: :hash}
  end

  defp task_done(state, {:summary, job_id}, {:ok, %{content: content}}) do
    summary = String.trim(content)

    case Window.complete(state.window, job_id, summary) do
      {:ok, window} ->
        state = %{state | window: window} |> persist_summary() |> reset_retry()
        notify(state, :summary_updated, summary)
        dispatch_summary(state)

      # A blank answer must not wipe the summary: the job failed.
      {:error, :empty_summary} ->
        summary_failed(state, job_id, :empty_summary)

      {:error, :unknown_job} ->
        state
    end
  end

  defp task_done(state, {:summary, job_id}, {:error, reason}),
    do: summary_failed(state, job_id, reason)

  defp task_done(state, {:maintenance, tasks, job_ids}, result) do
    results =
      case result do
        list when is_list(list) -> list
        {:error, reason} -> Enum.map(tasks, &{&1, {:error, reason}})
      end

    changes = for {_task, {:ok, changes}} <- results, change <- changes, do: change

    for {task, {:error, reason}} <- results do
      Logger.warning(
        "character #{state.id}: maintenance task #{task} failed (#{inspect(reason, limit: 8)})"
      )
    end

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

    # Checked-out jobs the run did not complete are failed again (only
    # those: a job dispatched meanwhile is not the run's to fail).
    window = Window.fail_jobs(window, job_ids)
    state = %{state | window: window, maintenance_ref: nil}
    state = if summary_changed?, do: reset_retry(state), else: state

    state =
      if head_failed?(state.window),
        do: state |> schedule_retry() |> elem(1),
        else: state

    state = persist_changes(state, changes, summary_changed?)

    if summary_changed?, do: notify(state, :summary_updated, Window.summary(state.window))
    notify(state, :maintenance_done, %{tasks: tasks, results: results})

    state |> dispatch_summary() |> schedule_maintenance()
  end

  defp summary_failed(state, job_id, reason) do
    {delay, state} = schedule_retry(%{state | window: Window.fail(state.window, job_id)})

    Logger.warning(
      "character #{state.id}: summary job #{job_id} failed (#{inspect(reason, limit: 5)}); " <>
        "retry in #{delay} ms"
    )

    notify(state, :summary_failed, %{job: job_id, reason: reason, retry_in: delay})
    state
  end

  defp head_failed?(window), do: match?([%{status: :failed} | _], Window.jobs(window))

  # One pending retry at most: a new failure replaces the timer, one step
  # further along the backoff.
  defp schedule_retry(state) do
    if state.retry_timer, do: Process.cancel_timer(state.retry_timer)

    delay =
      SoulMem.Backoff.delay(state.retry_attempts, state.summary_retry, state.summary_max_retry)

    ref = make_ref()
    timer = Process.send_after(self(), {:summary_retry, ref}, delay)

    {delay,
     %{state | retry_attempts: state.retry_attempts + 1, retry_ref: ref, retry_timer: timer}}
  end

  defp reset_retry(state) do
    if state.retry_timer, do: Process.cancel_timer(state.retry_timer)
    %{state | retry_attempts: 0, retry_ref: nil, retry_timer: nil}
  end

  ## States and maintenance

  defp touch(state) do
    if state.idle_timer, do: Process.cancel_timer(state.idle_timer)
    if state.maintenance_timer, do: Process.cancel_timer(state.maintenance_timer)
    # The timer message carries a fresh ref: one already in the mailbox is stale.
    ref = make_ref()
    timer = Process.send_after(self(), {:idle_timeout, ref}, state.idle_after)
    # A stop timer already sent is stale once the ref changes.
    state = %{state | idle_ref: ref, idle_timer: timer, maintenance_timer: nil, stop_ref: nil}

    if state.status == :working do
      state
    else
      notify(state, :state_changed, :working)
      %{state | status: :working}
    end
  end

  defp go_idle(%{status: :idle} = state), do: state

  defp go_idle(state) do
    state = schedule_stop(%{state | status: :idle, idle_ref: nil, idle_timer: nil})
    notify(state, :state_changed, :idle)
    state = write_back(state)

    if state.maintenance_ref == nil,
      do: start_maintenance(state, Maintenance.all_tasks()),
      else: state
  end

  defp start_maintenance(state, tasks) do
    tasks = Enum.filter(tasks, &Maintenance.supported?(&1, state.maintenance))

    {jobs, window} =
      if :summarize_pending in tasks do
        case Window.checkout_failed(state.window, @drain_batch) do
          {:ok, jobs, window} -> {jobs, window}
          :none -> {[], state.window}
        end
      else
        {[], state.window}
      end

    snapshot = %{
      character: state.id,
      memory: state.memory,
      window: window,
      jobs: jobs,
      records: reverse_values(state.records),
      feedback: reverse_values(state.feedback),
      llm: state.llm
    }

    impls = state.maintenance

    task =
      Task.Supervisor.async_nolink(SoulMem.TaskSupervisor, fn ->
        Maintenance.run_all(tasks, snapshot, impls)
      end)

    job_ids = Enum.map(jobs, & &1.id)

    %{
      state
      | window: window,
        maintenance_ref: task.ref,
        tasks: Map.put(state.tasks, task.ref, {:maintenance, tasks, job_ids})
    }
  end

  defp idle_stop(state) do
    if state.maintenance_ref == nil and state.tasks == %{} do
      notify(state, :state_changed, :stopped)
      {:stop, :normal, state}
    else
      {:noreply, schedule_stop(state)}
    end
  end

  # Only a character with a store stops when idle: it comes back exactly as
  # it was; one without would lose its memory.
  defp schedule_stop(%{store: nil} = state), do: state
  defp schedule_stop(%{stop_after: :infinity} = state), do: state

  defp schedule_stop(state) do
    ref = make_ref()
    Process.send_after(self(), {:idle_stop, ref}, state.stop_after)
    %{state | stop_ref: ref}
  end

  defp schedule_maintenance(%{status: :idle, maintenance_timer: nil} = state) do
    timer = Process.send_after(self(), :maintenance_tick, state.maintenance_interval)
    %{state | maintenance_timer: timer}
  end

  defp schedule_maintenance(state), do: state

  ## Persistence

  # Pushed messages are appended in one transaction before the push is
  # acknowledged; `stored` maps window sequence numbers to store ones.
  defp persist_messages(%{store: nil}, _window), do: {:ok, []}

  defp persist_messages(state, window) do
    new = Enum.filter(window.pending ++ window.messages, &(&1.seq > state.window.seq))
    # A push larger than the window drops messages at once; they are stored
    # too (with their tag), so the summary jobs they queued survive a crash.
    rows = Enum.map(new, &{&1.message, &1.tagged})

    case Store.append_messages(state.store, rows) do
      {:ok, seqs} -> {:ok, Enum.zip(Enum.map(new, & &1.seq), seqs)}
      {:error, error} -> {:error, error}
    end
  end

  # Stored messages the window no longer needs (slid out, summarised or
  # dropped) are deleted with the next window write.
  defp forget_dropped(%{store: nil} = state), do: state

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

  defp persist_summary(%{store: nil} = state), do: state

  defp persist_summary(state) do
    state = forget_dropped(state)

    case Store.update_window(state.store, Window.summary(state.window), state.pop_to) do
      :ok ->
        %{state | pop_to: nil}

      {:error, error} ->
        # Kept in memory; the next checkpoint writes it.
        Logger.error("character #{state.id}: saving the summary failed: #{inspect(error)}")
        %{state | dirty: true}
    end
  end

  defp persist_feedback(%{store: nil}, _id, _value, _at), do: :ok

  defp persist_feedback(state, id, value, at),
    do: Store.append_feedback(state.store, state.memory, id, value, at)

  defp persist_records(%{store: nil}, _ids, _at), do: :ok

  defp persist_records(state, ids, at) do
    case Store.append_records(state.store, state.memory, ids, at) do
      {:ok, _} ->
        :ok

      {:error, error} ->
        Logger.warning("character #{state.id}: saving records failed: #{inspect(error)}")
    end
  end

  # The whole graph, the summary and the popped messages in one transaction.
  defp checkpoint(state, archive \\ [])
  defp checkpoint(%{store: nil} = state, _archive), do: {:ok, state}

  defp checkpoint(state, archive) do
    state = forget_dropped(state)

    case Store.checkpoint(state.store, state.memory,
           summary: Window.summary(state.window),
           pop_to: state.pop_to,
           archive: archive
         ) do
      :ok -> {:ok, %{state | dirty: false, pop_to: nil}}
      {:error, _} = error -> error
    end
  end

  defp write_back(%{store: nil} = state), do: state
  defp write_back(%{dirty: false, pop_to: nil} = state), do: state

  defp write_back(state) do
    case checkpoint(state) do
      {:ok, state} ->
        state

      {:error, error} ->
        Logger.error("character #{state.id}: write-back failed: #{inspect(error)}")
        state
    end
  end

  # Maintenance changes that touch the graph are written back at once, in one
  # checkpoint that carries the summary too; a summary alone is written by
  # itself.
  defp persist_changes(state, changes, summary_changed?) do
    archive = for {:archived, ids} <- changes, id <- ids, do: id
    state = Enum.reduce(changes, state, &consolidated/2)

    graph_changed? =
      archive != [] or
        Enum.any?(changes, &(match?({:graph_changed, _}, &1) or match?({:consolidated, _}, &1)))

    case graph_changed? and state.store != nil and checkpoint(%{state | dirty: true}, archive) do
      {:ok, state} ->
        state

      {:error, error} ->
        Logger.error(
          "character #{state.id}: saving maintenance changes failed: #{inspect(error)}"
        )

        state = %{state | dirty: true}
        if summary_changed?, do: persist_summary(state), else: state

      false ->
        if summary_changed?, do: persist_summary(state), else: state
    end
  end

  # A consolidation turned the summary into memory: clear it unless a newer
  # one landed meanwhile, drop the records it folded in, tell subscribers.
  defp consolidated({:consolidated, info}, state) when is_map(info) do
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

    notify(state, :consolidated, Map.delete(info, :report))
    %{state | window: window, records: records}
  end

  defp consolidated(_change, state), do: state

  ## Helpers

  defp record_in_graph(state, retrieval, ids, at) do
    if ids != [] and Code.ensure_loaded?(retrieval) and function_exported?(retrieval, :record, 3) do
      case retrieval.record(state.memory, ids, at) do
        {:error, error} ->
          Logger.warning("character #{state.id}: recording retrievals failed: #{inspect(error)}")

        _ok ->
          :ok
      end
    end
  rescue
    error ->
      Logger.warning("character #{state.id}: recording retrievals raised: #{inspect(error)}")
  end

  defp notify(state, event, payload) do
    for {pid, _mref} <- state.subscribers, do: send(pid, {:soul_mem, state.id, event, payload})
    :ok
  end

  defp reverse_values(map), do: Map.new(map, fn {k, v} -> {k, Enum.reverse(v)} end)
end

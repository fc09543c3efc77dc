defmodule SoulMem.Character.Loader do
  @moduledoc """
  Brings a starting character's memory in: opens its store, loads the stored
  graph, window, records and feedback (or imports its source and saves it at
  once), embeds the graph for retrieval and opens working memory over a
  large store.

  Runs in the character's process (`init/1` opens the store,
  `handle_continue/2` does the rest), before it serves.
  """

  require Logger

  alias SoulMem.{Character.State, Memory, ProgressLog, Store}

  # Graphs up to this many notes are embedded with the model before the
  # character serves (seconds); larger ones in the background.
  @embed_at_once 200

  @typedoc "The loaded character: its graph, store, state and how recall embeds."
  @type loaded :: %{
          memory: Memory.t(),
          state: State.t(),
          embedding: :none | :hash | :model | :partial,
          # The background task embedding the graph with the model, if any.
          task: Task.t() | nil
        }

  @doc """
  Opens the character's store: quick (no graph is read), so a store that
  cannot be used fails the start with `{:store_failed, error}`.
  """
  @spec open_store(State.t(), map()) ::
          {:ok, Store.t() | nil} | {:stop, {:store_failed, SoulMem.Error.t()}}
  def open_store(_state, %{persist: false}), do: {:ok, nil}

  def open_store(state, settings) do
    # A predecessor that just crashed in this VM still holds the store until
    # its handle is collected: wait for that (up to ~0.5 s).
    case Store.open(settings.data_dir, state.id,
           max_pages: settings.store_quota,
           in_use_retries: 9
         ) do
      {:ok, store} ->
        {:ok, store}

      {:error, error} ->
        Logger.error("character #{state.id}: cannot open its store: #{Exception.message(error)}")
        {:stop, {:store_failed, error}}
    end
  end

  @doc """
  Loads the graph (from the store, else the source, saved at once through
  `checkpoint`, a function that writes a state's checkpoint), restores the
  window and history, and embeds the graph.
  """
  @spec load(
          State.t(),
          map(),
          Store.t() | nil,
          (State.t(), Memory.t() ->
             {:ok, State.t()} | {:error, term()})
        ) ::
          {:ok, loaded()} | {:error, SoulMem.Error.t()}
  def load(state, settings, store, checkpoint) do
    activation = activation(settings, store)

    with {:ok, memory, state} <- load_graph(state, settings, store, activation, checkpoint),
         :ok <- configure(memory),
         {:ok, embedding, task} <- embed(state.id, memory, settings, activation),
         {:ok, memory} <- open_working(state.id, store, memory, activation) do
      {:ok, %{memory: memory, state: state, embedding: embedding, task: task}}
    end
  end

  # Configuration is set once here, not per recall: the recall defaults (app
  # env `:recall_config`, pipeline options) and the forgetting parameters
  # (app env `:forgetting`).
  defp configure(memory) do
    SoulMem.Retrieval.configure(memory,
      recall: Application.get_env(:soul_mem, :recall_config),
      forgetting: SoulMem.Forgetting.config()
    )
  end

  defp load_graph(state, settings, nil, _activation, _checkpoint) do
    with {:ok, memory} <- load_source(state.id, settings.source), do: {:ok, memory, state}
  end

  defp load_graph(state, settings, store, activation, checkpoint) do
    with {:ok, stored} <- Store.load(store, graph: activation == nil),
         {:ok, memory, fresh?} <- stored_or_source(state.id, settings, stored),
         {:ok, state} <- restore(state, stored),
         # An imported source becomes durable before the character serves.
         {:ok, state} <- if(fresh?, do: checkpoint.(state, memory), else: {:ok, state}) do
      {:ok, memory, state}
    end
  end

  defp restore(state, stored) do
    case State.restore(state, stored) do
      {:ok, state} ->
        {:ok, state}

      {:error, reason} ->
        {:error, SoulMem.Error.new(:corrupt, "stored window message is invalid: #{reason}")}
    end
  end

  # Activation mode needs a stored graph: a new character imports its source
  # whole first (and activates from the next start on).
  defp activation(_settings, nil), do: nil
  defp activation(%{working_memory: :full}, _store), do: nil

  defp activation(settings, store) do
    threshold = Application.get_env(:soul_mem, :working_memory_threshold, 50_000)

    case {settings.working_memory, Store.info(store)} do
      {_, {:ok, %{"graph_saved" => false}}} -> nil
      {opts, {:ok, _}} when is_list(opts) -> opts
      {:auto, {:ok, %{"notes" => notes}}} when notes > threshold -> []
      _ -> nil
    end
  end

  defp open_working(_id, _store, memory, nil), do: {:ok, memory}

  defp open_working(id, store, memory, activation) do
    with {:ok, memory, report} <- Store.open_working(store, memory, activation) do
      Logger.info(
        "character #{id}: working memory over #{report["notes"]} stored notes " <>
          "(#{report["embedded"]} embedded now)"
      )

      {:ok, memory}
    end
  end

  defp stored_or_source(_id, _settings, %{memory: %Memory{} = memory}), do: {:ok, memory, false}

  defp stored_or_source(id, settings, %{memory: nil}) do
    with {:ok, memory} <- load_source(id, settings.source), do: {:ok, memory, true}
  end

  defp load_source(_id, {:memory, memory}), do: {:ok, memory}
  # A graph file is the operator's (a seed or the :graph option): its size limit is
  # :graph_max_bytes (SOUL_MEM_GRAPH_MAX_BYTES) when set, else the import default.
  defp load_source(id, {:graph, path}) do
    limit = Application.get_env(:soul_mem, :graph_max_bytes)
    Memory.import_file(id, path, if(limit, do: [max_bytes: limit], else: []))
  end

  defp load_source(id, :empty), do: {:ok, Memory.new(id)}

  # Retrieval needs the graph embedded. `:auto` uses the model and falls back
  # to the lexical hash embedder when the model is missing. A graph too large
  # to embed with the model in a moment is embedded with the hash embedder
  # first, so the character serves at once, and with the model in the
  # background.
  defp embed(_id, _memory, %{embedder: :none}, _activation), do: {:ok, :none, nil}

  defp embed(id, memory, %{embedder: :auto} = settings, activation) do
    case settings.embedding_module.ensure_loaded([]) do
      {:ok, _model} ->
        embed(id, memory, %{settings | embedder: :model}, activation)

      {:error, error} ->
        Logger.warning(
          "character #{id}: embedding model unavailable (#{Exception.message(error)}); " <>
            "using the lexical hash embedder"
        )

        embed(id, memory, %{settings | embedder: :hash}, activation)
    end
  end

  defp embed(id, memory, %{embedder: :model, embedding_module: backend}, nil) do
    with {:ok, _} <- backend.ensure_loaded([]) do
      if Memory.stats(memory).nodes > @embed_at_once,
        do: embed_in_background(id, memory, backend),
        else: embed_now(id, memory, backend, :model)
    end
  end

  defp embed(id, memory, settings, _activation),
    do: embed_now(id, memory, settings.embedding_module, settings.embedder)

  defp embed_now(id, memory, backend, embedder) do
    log = ProgressLog.start("character #{id}: embedding its graph (#{embedder})")

    try do
      with {:ok, _} <- backend.embed_graph(memory, embedder: embedder, progress: log),
           do: {:ok, embedder, nil}
    after
      ProgressLog.stop(log)
    end
  end

  # The hash index first (fast), then a task embeds the texts the model's
  # cache lacks on the bulk pool (one low-priority core, holding no lock) and
  # rebuilds the index with the model from the cache. Recalls meanwhile say
  # `embedding: :partial`.
  defp embed_in_background(id, memory, backend) do
    with {:ok, :hash, nil} <- embed_now(id, memory, backend, :hash) do
      log = ProgressLog.start("character #{id}: embedding its graph (model, background)")

      task =
        Task.Supervisor.async_nolink(SoulMem.TaskSupervisor, fn ->
          try do
            with {:ok, _} <- backend.prefill(memory, progress: log),
                 do: backend.embed_graph(memory, embedder: :model, progress: log)
          after
            ProgressLog.stop(log)
          end
        end)

      {:ok, :partial, task}
    end
  end
end

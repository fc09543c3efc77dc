defmodule SoulMem.Character.Options do
  @moduledoc """
  Reads a character's start options, filling each missing one from the
  application env, and refuses malformed ones with an `ArgumentError`.

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
    * `:embedding_module` — the `SoulMem.Embedding.Backend` that embeds the
      graph (default: app env `:embedding_module`, `SoulMem.Embedding`);
    * `:llm` — options for `SoulMem.LLM.chat/2` (summaries), on top of the
      application env; kept as a `SoulMem.LLM.Config` (the key is redacted
      from inspect output);
    * `:persist` — keep the character in its store under `:data_dir`
      (default: app env `:persist`, `true`);
    * `:data_dir` — where stores live (default `SoulMem.Store.data_dir/0`);
    * `:store_quota` — largest store file in 4 KiB pages (default: app env
      `:store_quota_pages`, none); writes past it fail with `:disk_full`;
    * `:working_memory` — `:full` (the whole stored graph is loaded),
      activation options (`SoulMem.Store.open_working/3`: `cap`, `k_hops` …;
      recall then activates notes from the store), or `:auto` (default: app
      env `:working_memory`): activation with defaults when the stored graph
      has more than app env `:working_memory_threshold` (50_000) notes.
      Activation options are checked when the character is started
      (`SoulMem.Store.check_working/1`): bad ones raise `ArgumentError`, so
      starting it fails with the reason.
  """

  alias SoulMem.{Character.State, Maintenance, Memory, Store, Window}

  @keys [
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

  @typedoc "What the character process keeps besides its `SoulMem.Character.State`."
  @type t :: %{
          source: {:memory, Memory.t()} | {:graph, Path.t()} | :empty,
          persist: boolean(),
          data_dir: Path.t(),
          store_quota: pos_integer() | nil,
          working_memory: :auto | :full | keyword(),
          embedder: :auto | :model | :hash | :none,
          embedding_module: module(),
          llm: keyword()
        }

  @doc "Checks the option names (unknown ones raise) and fills the defaults of the list ones."
  @spec validate!(keyword()) :: keyword()
  def validate!(opts), do: Keyword.validate!(opts, @keys)

  @doc """
  The character's initial `SoulMem.Character.State` and its other settings
  from `opts` (see the moduledoc). Raises `ArgumentError` on a malformed one.
  """
  @spec read!(keyword()) :: {State.t(), t()}
  def read!(opts) do
    id = Keyword.fetch!(opts, :id)
    capacity = opts[:window] || env(:window, 12)

    window =
      Window.new(
        capacity: capacity,
        interval: opts[:interval] || min(env(:summary_interval, capacity), capacity),
        max_bytes: opts[:max_bytes],
        max_pending: opts[:max_pending] || env(:max_pending_messages, nil),
        summary: opts[:summary]
      )

    persist = Keyword.get(opts, :persist, env(:persist, true))

    config = %{
      idle_after: opts[:idle_after] || env(:idle_after_ms, 300_000),
      stop_after: stop_after!(opts[:stop_after] || env(:idle_stop_ms, 1_800_000)),
      maintenance: opts[:maintenance] || Maintenance.implementations(),
      maintenance_interval: opts[:maintenance_interval] || env(:maintenance_interval_ms, 600_000),
      summary_retry:
        non_neg!(:summary_retry, opts[:summary_retry] || env(:summary_retry_ms, 5_000)),
      summary_max_retry:
        non_neg!(
          :summary_max_retry,
          opts[:summary_max_retry] || env(:summary_max_retry_ms, 300_000)
        )
    }

    settings = %{
      source: source(opts),
      persist: persist,
      data_dir: opts[:data_dir] || Store.data_dir(),
      store_quota: opts[:store_quota] || env(:store_quota_pages, nil),
      working_memory: working_memory!(opts[:working_memory] || env(:working_memory, :auto)),
      embedder: embedder!(opts[:embedder] || env(:embedder, :auto)),
      embedding_module: opts[:embedding_module] || env(:embedding_module, SoulMem.Embedding),
      llm: llm_opts(opts[:llm])
    }

    {State.new(id, window, config, persist), settings}
  end

  defp env(key, default), do: Application.get_env(:soul_mem, key, default)

  # The LLM settings are kept as a SoulMem.LLM.Config, whose Inspect hides
  # the API key (state dumps, crash reports).
  defp llm_opts(llm) do
    {config_opts, rest} = Keyword.split(llm, SoulMem.LLM.Config.keys())
    config = SoulMem.LLM.Config.merge(SoulMem.LLM.Config.from_env(), config_opts)
    Keyword.put(rest, :config, config)
  end

  defp working_memory!(w) when w in [:auto, :full], do: w

  # Checked by the engine's own rules now, not when the character loads (a
  # failed load leaves the caller only `:not_running`).
  defp working_memory!(w) when is_list(w) do
    case Store.check_working(w) do
      :ok ->
        w

      {:error, error} ->
        invalid!("valid :working_memory options (#{Exception.message(error)})", w)
    end
  end

  defp working_memory!(other),
    do: invalid!("expected :working_memory :auto | :full | keyword", other)

  defp non_neg!(_key, ms) when is_integer(ms) and ms >= 0, do: ms

  defp non_neg!(key, other),
    do: invalid!("expected #{inspect(key)} to be a non-negative integer (ms)", other)

  defp stop_after!(ms) when (is_integer(ms) and ms >= 0) or ms == :infinity, do: ms

  defp stop_after!(other),
    do: invalid!("expected :stop_after to be a non-negative integer or :infinity", other)

  defp embedder!(e) when e in [:auto, :model, :hash, :none], do: e
  defp embedder!(other), do: invalid!("expected :embedder :auto | :model | :hash | :none", other)

  defp source(opts) do
    cond do
      match?(%Memory{}, opts[:memory]) -> {:memory, opts[:memory]}
      opts[:memory] != nil -> raise ArgumentError, "expected :memory to be a %SoulMem.Memory{}"
      is_binary(opts[:graph]) -> {:graph, opts[:graph]}
      opts[:graph] != nil -> raise ArgumentError, "expected :graph to be a path"
      true -> :empty
    end
  end

  defp invalid!(expected, got), do: raise(ArgumentError, "#{expected}, got: #{inspect(got)}")
end

defmodule SoulMem do
  @moduledoc """
  SoulMem: long-term memory for role-play characters.

  The runtime app. Its public API:

    * `SoulMem.Memory` — a character's memory graph (import, stats, notes,
      export), held by the Rust core;
    * `SoulMem.JSON` — JSON encoding and decoding;
    * `SoulMem.Error` — the error of every failing operation;
    * this module — the API of the endpoint, the mix tasks and operators:
      start and stop characters, push, `recall/3`, feedback, notes,
      maintenance, events, export and import;
    * `SoulMem.Admin` — operator views (list, window, summary, backups);
    * `SoulMem.Characters` / `SoulMem.Character` — the processes behind it
      (internal).

  `SoulMem.Native` holds the NIF stubs and is private to this app.
  """

  require Logger

  # How long a caller waits for an operation on another node that has no
  # timeout of its own (the operation's own timeouts still apply there).
  @routed_timeout 60_000

  @doc """
  The version of the `:soul_mem` application.
  """
  @spec version() :: String.t()
  def version do
    case Application.spec(:soul_mem, :vsn) do
      nil -> "0.0.0"
      vsn -> List.to_string(vsn)
    end
  end

  @recall_opts [
    :retrieval,
    timeout: 5_000,
    config: %{},
    templates: %{},
    forgetting: [],
    retract: 0
  ]

  @typedoc """
  A recall request; every key is optional:

    * `:messages` — messages pushed into the window first (see
      `SoulMem.Character.push/3`);
    * `:queries` — seed Query JSON sub_query maps (string keys `"priority"`,
      `"tag"`, `"variant"`);
    * `:text` — plain text, turned into queries without an LLM by
      `SoulMem.Retrieval.text_queries/1`.

  Without queries and text, the text of the last pushed message is used.
  """
  @type request :: %{
          optional(:messages) => [map()],
          optional(:queries) => [map()],
          optional(:text) => String.t()
        }

  @type recall_result :: %{
          memories: [map()],
          actions: [map()],
          core: [map()],
          window: [SoulMem.Window.message()],
          summary: String.t(),
          context: String.t(),
          embedding: :model | :hash | :partial | :none
        }

  @doc """
  Recalls memories for `character` (id or pid of a running character).

  Pushes `request.messages`, runs retrieval on the character's graph with
  the queries, records the returned notes (`SoulMem.Character.records/2`)
  and renders the context block (`SoulMem.Context`). Core memories (every
  note flagged core, e.g. the self node `sem_self`) are always included:
  from retrieval, or from the graph when retrieval does not run (no queries,
  no retrieval module). The window includes messages whose summary is still
  being written.

  Options: `:timeout` (ms, default 5000) for the character call, `:config`
  (retrieval config map), `:templates` (see `SoulMem.Context`),
  `:retrieval` (the retrieval module, default app env `:retrieval` or
  `SoulMem.Retrieval`; when it is not available, recall returns the core
  memories only), `:forgetting` — lazy forgetting (`SoulMem.Forgetting`):
  `enabled:` (default `true`), `config:` (parameter overrides), `llm:`
  (options for the revision calls; default the character's LLM options,
  else the application env), `budget:` (ms a recall waits for revisions,
  default 1000), `llm_timeout:`, `max_concurrency:`, `now:` (parameter
  overrides are set on the character from this recall on); `:retract` — take
  back the newest N window messages before pushing (a client that edits or
  regenerates its last turn; `{:error, :not_retractable}` when they slid
  out of the window).

  The result's `:embedding` says what recall compared with: `:model`,
  `:hash`, `:partial` (a large graph is still being embedded with the model
  in the background; until it is, recall uses the lexical hash index) or
  `:none`.

  Each recalled memory's `:content` is what the character sees after
  forgetting (the original, its masked text, or an LLM revision cached per
  band) and it carries `forgetting: %{missing_degree, action, band}`; the
  original of a forgotten memory never reaches the context.

  In a cluster the whole recall runs on the character's home node
  (`SoulMem.Cluster.Router`); `{:error, :home_node_down}` when it is down.
  """
  @spec recall(String.t() | pid(), request(), keyword()) ::
          {:ok, recall_result()} | {:error, term()}
  def recall(character, request, opts \\ []) do
    opts = Keyword.validate!(opts, @recall_opts)

    routed(character, :recall, [character, request, opts], @routed_timeout, fn ->
      local_recall(character, request, opts)
    end)
  end

  defp local_recall(character, request, opts) do
    retrieval = opts[:retrieval] || Application.get_env(:soul_mem, :retrieval, SoulMem.Retrieval)

    forgetting = forgetting_opts(opts[:forgetting])

    with {:ok, request} <- validate_request(request),
         {:ok, snap} <-
           SoulMem.Character.prepare_recall(
             character,
             request.messages,
             opts[:timeout],
             opts[:retract]
           ),
         {:ok, found} <- retrieve(retrieval, snap, request, opts[:config], forgetting),
         # Forgetting sees the notes as they were before this recall counts as a review.
         {:ok, memories} <- forget(snap, found.memories, forgetting) do
      found = %{found | memories: memories}
      ids = Enum.map(found.memories ++ found.actions, & &1.id)
      if ids != [], do: SoulMem.Character.record(character, ids, DateTime.utc_now(), retrieval)

      core = found.core || fallback_core(snap.memory)

      context =
        SoulMem.Context.render(
          %{
            core: core,
            memories: found.memories,
            actions: found.actions,
            window: snap.window,
            summary: snap.summary
          },
          templates: opts[:templates]
        )

      {:ok,
       %{
         memories: found.memories,
         actions: found.actions,
         core: core,
         window: snap.window,
         summary: snap.summary,
         context: context,
         embedding: Map.get(snap, :embedding, :none)
       }}
    end
  end

  @doc """
  Returns the running character `id`, starting it when needed (from its
  store, else its seed; see `SoulMem.Characters.ensure_started/2` for the
  options).
  """
  @spec ensure_started(String.t(), keyword()) :: {:ok, pid()} | {:error, term()}
  def ensure_started(id, opts \\ []), do: SoulMem.Characters.ensure_started(id, opts)

  @doc "The pid of the running character `id`, or `nil`."
  @spec whereis(String.t()) :: pid() | nil
  def whereis(id), do: SoulMem.Characters.whereis(id)

  @doc """
  The characters of this node, running and stored, with name, state, note
  and link counts and last activity (`SoulMem.Catalog.list/1`).
  """
  @spec characters(keyword()) :: [SoulMem.Catalog.entry()]
  def characters(opts \\ []), do: SoulMem.Catalog.list(opts)

  @doc """
  The characters of every live node of the cluster (`characters/1` on each,
  with `:node` added), sorted by id; this node's alone when not clustered.
  A node that does not answer within 10 s is left out.
  """
  @spec cluster_characters() :: [map()]
  def cluster_characters do
    SoulMem.Cluster.Router.gather(SoulMem.Catalog, :list, [[]])
    |> Enum.flat_map(fn {node, entries} -> Enum.map(entries, &Map.put(&1, :node, node)) end)
    |> Enum.sort_by(& &1.id)
  end

  @doc """
  Creates character `id` — empty with a name and self-description, from
  Graph JSON, from an export or from a SillyTavern card — stores it and
  starts it (`SoulMem.Catalog.create/3`).
  """
  @spec create(String.t(), SoulMem.Catalog.source(), keyword()) ::
          {:ok, map()} | {:error, SoulMem.Error.t()}
  def create(id, source, opts \\ []) do
    routed(id, :create, [id, source, opts], @routed_timeout, fn ->
      SoulMem.Catalog.create(id, source, opts)
    end)
  end

  @doc """
  Deletes character `id` after writing an export backup; returns the
  backup's path (`SoulMem.Catalog.delete/2`).
  """
  @spec delete(String.t(), keyword()) :: {:ok, map()} | {:error, SoulMem.Error.t()}
  def delete(id, opts \\ []) do
    routed(id, :delete, [id, opts], @routed_timeout, fn -> SoulMem.Catalog.delete(id, opts) end)
  end

  @doc """
  Group chats: pushes `line` (`%{text, speaker, role}`) into the window of
  each running character in `present` — and of no other — as a line of its
  speaker (`SoulMem.Scene.witness/2`).
  """
  @spec witness([String.t()], SoulMem.Scene.line()) :: {:ok, map()} | {:error, term()}
  def witness(present, line), do: SoulMem.Scene.witness(present, line)

  @doc """
  Answers an OpenAI chat-completions request (decoded `body`) for
  `character` with its memory: the new user turn is stored, memories are
  recalled and injected, the configured LLM answers with the request's
  sampling parameters, and the answer is kept (`SoulMem.Completion`).
  Options: `:on_delta` (stream the answer), `:position` (where the memory
  goes), `:timeout`, `:llm`.
  """
  @spec complete(String.t() | pid(), map(), keyword()) :: {:ok, map()} | {:error, term()}
  def complete(character, body, opts \\ []), do: SoulMem.Completion.run(character, body, opts)

  @doc """
  Checks an OpenAI chat-completions request without running it (`:ok` or
  `{:error, {:bad_request, message}}`).
  """
  @spec check_completion(map()) :: :ok | {:error, {:bad_request, String.t()}}
  def check_completion(body), do: SoulMem.Completion.check(body)

  @doc """
  Starts one chat turn (`turn/3` with `stream: true`) in a task of the
  runtime and returns its reference at once; every step arrives at
  `notify` (default the caller) as `{:soul_mem_turn, ref, event}`
  (`SoulMem.Chat`'s events: `{:recalled, recall}`, `{:reply_delta, text}`,
  `{:reply, text}`, `{:reply_stored, result}`, `{:reply_failed, reason}`),
  then `{:soul_mem_turn, ref, {:done, {:ok, turn} | {:error, reason}}}`.
  The turn runs to its end (the reply is kept) even when `notify` is gone.
  Options as `turn/3`, plus `:notify`.
  """
  @spec start_turn(String.t() | pid(), String.t(), keyword()) :: {:ok, reference()}
  def start_turn(character, text, opts \\ []) when is_binary(text) do
    {notify, opts} = Keyword.pop(opts, :notify, self())
    ref = make_ref()
    on_event = &send(notify, {:soul_mem_turn, ref, &1})

    {:ok, _pid} =
      Task.Supervisor.start_child(SoulMem.TaskSupervisor, fn ->
        result = SoulMem.Chat.turn(character, text, [stream: true, on_event: on_event] ++ opts)
        send(notify, {:soul_mem_turn, ref, {:done, result}})
      end)

    {:ok, ref}
  end

  @doc """
  The conversation as the character sees it now: `%{messages: [%{role, text,
  at}], summary}` — the visible window (pending messages included) and the
  cumulative summary. What a page shows after a reload.
  """
  @spec history(String.t() | pid()) :: {:ok, map()} | {:error, term()}
  def history(character) do
    with {:ok, window} <- SoulMem.Character.window(character) do
      {:ok, %{messages: SoulMem.Window.visible(window), summary: SoulMem.Window.summary(window)}}
    end
  end

  @doc """
  The notes within `hops` links (default 1) of the notes `ids`, at most
  `max_notes` (default 60), and the links among them (`SoulMem.Memory.neighbourhood/4`).
  """
  @spec neighbourhood(String.t() | pid(), [String.t()], keyword()) ::
          {:ok, map()} | {:error, term()}
  def neighbourhood(character, ids, opts \\ []) when is_list(ids) do
    opts = Keyword.validate!(opts, hops: 1, max_notes: 60)

    routed(character, :neighbourhood, [character, ids, opts], @routed_timeout, fn ->
      with {:ok, memory} <- SoulMem.Character.memory(character),
           do: SoulMem.Memory.neighbourhood(memory, ids, opts[:hops], opts[:max_notes])
    end)
  end

  @doc """
  Whether character `id` has a store under `data_dir` (default: the
  configured data directory), running or not.
  """
  @spec stored?(String.t(), Path.t() | nil) :: boolean()
  def stored?(id, data_dir \\ nil) when is_binary(id) do
    routed(id, :stored?, [id, data_dir], @routed_timeout, fn ->
      SoulMem.Store.exists?(data_dir || SoulMem.Store.data_dir(), id)
    end) == true
  end

  @doc """
  The seed-shaped sub-queries recall derives from plain `text` (jieba
  keywords, no LLM), for traces and tools.
  """
  @spec text_queries(String.t()) :: [map()]
  def text_queries(text) when is_binary(text), do: SoulMem.Retrieval.text_queries(text)

  @doc """
  The character at a glance: `%{id, state, window_size, pending, jobs,
  summary_length, maintenance_running, embedding, stats}`. A character still loading
  is waited for (up to `timeout`, or the load timeout).
  """
  @spec info(String.t() | pid(), timeout()) :: {:ok, map()} | {:error, term()}
  def info(character, timeout \\ 5_000), do: SoulMem.Character.info(character, timeout)

  @doc """
  One chat turn: pushes the user's `text`, recalls for it and asks the LLM
  for the character's reply, which is pushed too (`SoulMem.Chat.turn/3`:
  options `:partner`, `:llm` — `false` for no reply, `:timeout`).
  """
  @spec turn(String.t() | pid(), String.t(), keyword()) ::
          {:ok, SoulMem.Chat.turn()} | {:error, term()}
  def turn(character, text, opts \\ []), do: SoulMem.Chat.turn(character, text, opts)

  @doc "Stops a running character gracefully (after its write-back)."
  @spec stop(String.t() | pid()) :: :ok | {:error, :not_running}
  def stop(character), do: SoulMem.Characters.stop(character)

  @doc """
  Pushes one message or a list (`%{role: :user | :assistant | "user" |
  "assistant", text: binary}`, optional `:at`) into the character's window,
  all or nothing; durable once it returns for a persisted character.
  `{:error, :backlog_full}` while too many messages wait for their summary.
  """
  @spec push(String.t() | pid(), map() | [map()]) :: :ok | {:error, term()}
  def push(character, messages), do: SoulMem.Character.push(character, messages)

  @doc """
  Tags the newest message for a summary (a conversation ended, the topic
  changed).
  """
  @spec tag(String.t() | pid()) :: :ok | {:error, term()}
  def tag(character), do: SoulMem.Character.tag(character)

  @doc "Records a user's +1/-1 on a recalled note (Bayesian feedback on actions)."
  @spec feedback(String.t() | pid(), String.t(), 1 | -1) :: :ok | {:error, term()}
  def feedback(character, note_id, value),
    do: SoulMem.Character.feedback(character, note_id, value)

  @doc """
  Runs a maintenance task now (`:summarize_pending | :consolidate | :forget |
  :persist`), whatever the character's state; `{:error, :unsupported}` when
  no configured implementation handles it, `{:error, :busy}` while another
  run is in flight.
  """
  @spec force(String.t() | pid(), SoulMem.Maintenance.task()) :: :ok | {:error, term()}
  def force(character, task), do: SoulMem.Character.force(character, task)

  @doc """
  Subscribes the caller to the character's events: `{:soul_mem, id, event,
  payload}` (see `SoulMem.Character`); ends with the caller or
  `unsubscribe/1`.
  """
  @spec subscribe(String.t() | pid()) :: :ok | {:error, term()}
  def subscribe(character), do: SoulMem.Character.subscribe(character)

  @doc "Ends the caller's subscription to the character's events."
  @spec unsubscribe(String.t() | pid()) :: :ok | {:error, term()}
  def unsubscribe(character), do: SoulMem.Character.unsubscribe(character)

  @doc """
  Inserts or replaces one note of a running character (Graph JSON node shape,
  see `SoulMem.Memory.put_note/3`). Durable once it returns for a persisted
  character.
  """
  @spec put_note(String.t() | pid(), map() | binary()) :: {:ok, map()} | {:error, term()}
  def put_note(character, note), do: SoulMem.Character.put_note(character, note)

  @doc """
  Deletes one note of a running character for good, by readable id or UUID:
  the note, every link from or to it, its records, feedback, embeddings and
  forgetting state. Durable once it returns for a persisted character.
  Returns `%{id: readable_id, links_removed: n}`; an unknown id fails with a
  `:not_found` `SoulMem.Error`, the self node `"sem_self"` with
  `:invalid_argument`.
  """
  @spec delete_note(String.t() | pid(), String.t()) ::
          {:ok, %{id: String.t(), links_removed: non_neg_integer()}} | {:error, term()}
  def delete_note(character, note_id) when is_binary(note_id),
    do: SoulMem.Character.delete_note(character, note_id)

  @doc """
  Lists and searches the notes of a running character (all of its long-term
  memory, also in activation mode). `opts` (atom or string keys, all
  optional): `query`, `kind` (`"semantic"`, `"specific_situation"`,
  `"abstract_situation"`, `"procedure"`), `page` (from 1), `per_page`
  (1..200, default 50). Returns `%{"total", "page", "per_page", "items"}`
  (see `t:SoulMem.Memory.listing/0`); bad options fail with an
  `:invalid_argument` `SoulMem.Error` naming the field.
  """
  @spec notes(String.t() | pid(), SoulMem.Memory.list_opts()) ::
          {:ok, SoulMem.Memory.listing()} | {:error, term()}
  def notes(character, opts \\ %{}) when is_map(opts),
    do: SoulMem.Character.list_notes(character, opts)

  @doc """
  One note of a running character, by readable id or UUID.
  """
  @spec get_note(String.t() | pid(), String.t()) :: {:ok, map()} | {:error, term()}
  def get_note(character, note_id) when is_binary(note_id) do
    routed(character, :get_note, [character, note_id], @routed_timeout, fn ->
      with {:ok, memory} <- SoulMem.Character.memory(character),
           do: SoulMem.Memory.get_note(memory, note_id)
    end)
  end

  @doc """
  Exports a running, persisted character as a map (the JSON document of
  `SoulMem.Character.export/2`: graph with archived notes, window, summary,
  records, feedback, forgetting state). `import/3` restores it.

  With `format` `:world_info` or `:card`, what the character knows (its
  semantic memories) for SillyTavern instead: a World Info file, or a V2
  character card with them as its `character_book` (`SoulMem.Card`).
  """
  @spec export(String.t() | pid(), :soulmem | :world_info | :card) ::
          {:ok, map()} | {:error, term()}
  def export(character, format \\ :soulmem)

  def export(character, :soulmem) do
    with {:ok, json} <- SoulMem.Character.export(character), do: SoulMem.JSON.decode(json)
  end

  def export(character, format) when format in [:world_info, :card] do
    routed(character, :export, [character, format], @routed_timeout, fn ->
      with {:ok, memory} <- SoulMem.Character.memory(character) do
        if format == :card,
          do: SoulMem.Memory.export_card(memory),
          else: SoulMem.Memory.export_world_info(memory)
      end
    end)
  end

  @doc """
  Imports an export document (map or JSON binary) as character `id` and
  starts it. The character must not be running. Fails with
  `{:error, :exists}` when a store with a graph already exists for `id`,
  unless `replace: true`. A document of another character, or an invalid one,
  fails with `{:error, %SoulMem.Error{}}` and changes nothing.

  Options: `:replace` (default `false`), `:data_dir` (default
  `SoulMem.Store.data_dir/0`), `:start` — options for
  `SoulMem.Characters.ensure_started/2`.
  """
  @spec import(String.t(), map() | binary(), keyword()) :: {:ok, pid()} | {:error, term()}
  def import(id, document, opts \\ []) when is_binary(id) do
    opts = Keyword.validate!(opts, replace: false, data_dir: nil, start: [])

    routed(id, :import, [id, document, opts], @routed_timeout, fn ->
      data_dir = opts[:data_dir] || SoulMem.Store.data_dir()

      if SoulMem.Characters.whereis(id),
        do: {:error, :running},
        else: do_import(id, document, data_dir, opts)
    end)
  end

  defp do_import(id, document, data_dir, opts) do
    with {:ok, json} <- encode_document(document),
         {:ok, store} <- SoulMem.Store.open(data_dir, id) do
      result =
        with {:ok, info} <- SoulMem.Store.info(store),
             :ok <- check_replace(info, opts[:replace]),
             do: SoulMem.Store.import_json(store, json)

      SoulMem.Store.close(store)

      with :ok <- result do
        start = Keyword.merge(opts[:start], data_dir: data_dir, persist: true)
        SoulMem.Characters.ensure_started(id, start)
      end
    end
  end

  # An operation that needs the character's node (its graph, a NIF resource,
  # or its store file) runs whole there in a cluster; here otherwise.
  defp routed(character, fun, args, timeout, local),
    do: SoulMem.Cluster.Router.route(character, __MODULE__, fun, args, timeout, local)

  defp encode_document(document) when is_binary(document), do: {:ok, document}
  defp encode_document(document) when is_map(document), do: SoulMem.JSON.encode(document)
  defp encode_document(_), do: {:error, :invalid_document}

  defp check_replace(%{"graph_saved" => true}, false), do: {:error, :exists}
  defp check_replace(_info, _replace), do: :ok

  # Lazy forgetting on recall (SoulMem.Forgetting): options `:enabled` (default true),
  # `:config` (parameter overrides), `:llm` (default: the character's, from the recall
  # snapshot when it carries them, else the application env), `:budget`, `:llm_timeout`,
  # `:max_concurrency`, `:now`.
  defp forgetting_opts(opts) do
    Keyword.validate!(opts, [
      :llm,
      :now,
      :llm_timeout,
      :max_concurrency,
      :budget,
      enabled: true,
      config: []
    ])
  end

  defp forget(snap, memories, forgetting) do
    if forgetting[:enabled], do: do_forget(snap, memories, forgetting), else: {:ok, memories}
  end

  defp do_forget(snap, memories, forgetting) do
    llm = forgetting[:llm] || Map.get(snap, :llm) || []

    opts =
      forgetting
      |> Keyword.drop([:enabled, :llm, :config])
      |> Keyword.reject(fn {_k, v} -> is_nil(v) end)
      |> Keyword.put(:llm, llm)

    SoulMem.Forgetting.on_recall(snap.memory, memories, opts)
  end

  defp validate_request(request) when is_map(request) do
    messages = Map.get(request, :messages, [])
    queries = Map.get(request, :queries, [])
    text = Map.get(request, :text)

    cond do
      Map.keys(request) -- [:messages, :queries, :text] != [] -> {:error, :invalid_request}
      not is_list(messages) -> {:error, :invalid_messages}
      not (is_list(queries) and Enum.all?(queries, &is_map/1)) -> {:error, :invalid_queries}
      not (is_nil(text) or is_binary(text)) -> {:error, :invalid_text}
      true -> {:ok, %{messages: messages, queries: queries, text: text}}
    end
  end

  defp validate_request(_request), do: {:error, :invalid_request}

  # One call into the retrieval backend: the text becomes queries there, and
  # with forgetting on, each memory comes back with its forgetting view.
  # Forgetting overrides are set on the character by this recall (they stay
  # until set again). A backend that is not loaded means no retrieval.
  defp retrieve(retrieval, snap, request, config, forgetting) do
    if Code.ensure_loaded?(retrieval) do
      text =
        cond do
          is_binary(request.text) and String.trim(request.text) != "" -> request.text
          request.queries == [] and request.messages != [] -> last_text(request.messages)
          true -> nil
        end

      short = %{messages: Enum.map(snap.window, & &1.text), summary: snap.summary}
      overrides = forgetting[:config]

      opts = [
        config: config,
        forgetting:
          if(forgetting[:enabled] and overrides not in [nil, []] and overrides != %{},
            do: SoulMem.Forgetting.config(overrides)
          ),
        views: forgetting[:enabled] == true,
        now: forgetting[:now]
      ]

      case retrieval.recall(
             snap.memory,
             %{text: text, queries: request.queries, short: short},
             opts
           ) do
        {:ok, result} ->
          {:ok,
           %{
             memories: Map.get(result, :memories, []),
             actions: Map.get(result, :actions, []),
             core: Map.get(result, :core, []) ++ Map.get(result, :self_knowledge, [])
           }}

        {:error, _} = error ->
          error
      end
    else
      {:ok, %{memories: [], actions: [], core: nil}}
    end
  end

  defp last_text(messages) do
    messages |> List.last() |> Map.get(:text)
  end

  # Retrieval did not run (no queries, no retrieval module): every note
  # flagged core still appears. (When it runs, the engine lists them itself.)
  defp fallback_core(memory) do
    case SoulMem.Retrieval.core(memory) do
      {:ok, items} ->
        items

      {:error, error} ->
        Logger.warning("recall: listing core memories failed: #{Exception.message(error)}")
        []
    end
  end
end

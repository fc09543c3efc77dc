defmodule SoulMem.Store do
  @moduledoc """
  A character's long-term memory on disk: one SQLite file per character
  under the data directory (`config :soul_mem, :data_dir`; env
  `SOUL_MEM_DATA_DIR`), held by the Rust core.

  The file keeps the memory graph (notes, links, archived notes), the
  sliding window and its summary, retrieval records, user feedback and
  forgetting state. It runs in WAL mode with `synchronous=FULL`: every write
  that returned `:ok` survives `kill -9`, and each call is one transaction
  (all of it lands or none).

  One owner at a time: a second `open/2` of the same character, from this or
  another OS process, fails with reason `:in_use` until the first closes (or
  its process dies). A damaged file fails with `:corrupt`, a foreign or newer
  one with `:incompatible`, an unwritable one with `:read_only`; a full disk
  fails the write with `:disk_full` and writes nothing.

  Used by `SoulMem.Character`, which owns its store; other code goes through
  the character.
  """

  alias SoulMem.{Error, Memory, Native}

  @enforce_keys [:ref, :character, :path]
  defstruct [:ref, :character, :path]

  @type t :: %__MODULE__{ref: reference(), character: String.t(), path: String.t()}

  @typedoc "A stored window message, oldest first."
  @type stored_message :: %{
          seq: pos_integer(),
          role: String.t(),
          text: String.t(),
          at: DateTime.t(),
          tagged: boolean()
        }

  @typedoc "What a restarting character reads back."
  @type state :: %{
          memory: Memory.t() | nil,
          window: [stored_message()],
          summary: String.t() | nil,
          records: [{String.t(), DateTime.t()}],
          feedback: [{String.t(), 1 | -1, DateTime.t()}]
        }

  @typedoc "What `peek/1` reads from a store file."
  @type peek :: %{
          character: String.t(),
          name: String.t() | nil,
          notes: non_neg_integer(),
          archived: non_neg_integer(),
          links: non_neg_integer(),
          window: non_neg_integer(),
          last_message_at: DateTime.t() | nil,
          graph_saved: boolean()
        }

  @doc "The data directory from the application env (default `./data`)."
  @spec data_dir() :: String.t()
  def data_dir, do: Application.get_env(:soul_mem, :data_dir) || Path.expand("data")

  @doc "The file `open/2` uses for `character` under `data_dir`."
  @spec path(String.t(), String.t()) :: String.t()
  def path(data_dir, character) when is_binary(data_dir) and is_binary(character),
    do: Native.store_path(data_dir, character)

  @doc "Whether a store file exists for `character` under `data_dir`."
  @spec exists?(String.t(), String.t()) :: boolean()
  def exists?(data_dir, character), do: File.regular?(path(data_dir, character))

  # SQLite keeps a closed WAL-mode database's uncheckpointed pages beside it
  # (after a crash): the file is these three.
  @wal_files ["-wal", "-shm"]

  @doc """
  Removes the closed store file at `path` with its WAL files and the saved
  long-term index working memory keeps beside a large character's store
  (missing ones are fine).
  """
  @spec remove_file(Path.t()) :: :ok
  def remove_file(path) when is_binary(path) do
    for suffix <- ["" | @wal_files], do: File.rm(path <> suffix)
    _ = remove_saved_index(path)
    :ok
  end

  @doc """
  Removes the saved long-term index (HNSW graph) working memory keeps beside
  the store file at `path` for a large character (missing files are fine). It
  is a cache: the next activation-mode open rebuilds it.
  """
  @spec remove_saved_index(Path.t()) :: :ok | {:error, Error.t()}
  def remove_saved_index(path) when is_binary(path) do
    case Native.store_remove_saved_index(path) do
      :ok -> :ok
      error -> Error.from_native(error)
    end
  end

  @doc """
  Renames the closed store file at `from` to `to`, its WAL files with it
  (the directory of `to` is made): the result of renaming the database. The
  saved long-term index of `from` is removed (it names its files after the
  store; working memory rebuilds it at the next open).
  """
  @spec rename_file(Path.t(), Path.t()) :: :ok | {:error, File.posix()}
  def rename_file(from, to) when is_binary(from) and is_binary(to) do
    File.mkdir_p!(Path.dirname(to))

    for suffix <- @wal_files,
        File.exists?(from <> suffix),
        do: File.rename(from <> suffix, to <> suffix)

    _ = remove_saved_index(from)

    File.rename(from, to)
  end

  @doc """
  Opens (creating it and the directory if needed) the store of `character`
  under `data_dir`. Holds the file's lock until `close/1` or until the
  returned value is garbage collected.

  Options: `:max_pages` — a quota in 4 KiB pages; writes that would grow the
  file past it fail with reason `:disk_full` and write nothing (default: no
  quota); `:in_use_retries` — how many times (50 ms apart) to try again
  while the store is `:in_use` (default 0), for a handle of this VM that is
  being released: the handle of a character that just stopped or crashed
  is freed when the VM collects it, moments later.
  """
  @spec open(String.t(), String.t(), keyword()) :: {:ok, t()} | {:error, Error.t()}
  def open(data_dir, character, opts \\ []) when is_binary(data_dir) and is_binary(character) do
    opts = Keyword.validate!(opts, max_pages: nil, in_use_retries: 0)
    max_pages = opts[:max_pages] || 0

    unless is_integer(max_pages) and max_pages >= 0,
      do: raise(ArgumentError, "expected :max_pages to be a non-negative integer")

    open_native(data_dir, character, max_pages, opts[:in_use_retries])
  end

  defp open_native(data_dir, character, max_pages, retries) do
    case Error.from_native(Native.store_open(data_dir, character, max_pages)) do
      {:ok, ref} ->
        {:ok, %__MODULE__{ref: ref, character: character, path: path(data_dir, character)}}

      {:error, %Error{reason: :in_use}} when retries > 0 ->
        Process.sleep(50)
        open_native(data_dir, character, max_pages, retries - 1)

      {:error, _} = error ->
        error
    end
  end

  @doc "Closes the store and releases its lock. Later calls fail; closing again is fine."
  @spec close(t()) :: :ok
  def close(%__MODULE__{ref: ref}) do
    {:ok, _} = Native.store_close(ref)
    :ok
  end

  @doc """
  Reads everything back: the graph (`nil` when no checkpoint saved one yet),
  the window, summary, retrieval records and feedback (readable note ids).
  With `graph: false` no note is read and the graph is empty (activation
  mode: `open_working/3` loads notes as recall needs them).
  """
  @spec load(t(), keyword()) :: {:ok, state()} | {:error, Error.t()}
  def load(%__MODULE__{ref: ref, character: character}, opts \\ []) do
    opts = Keyword.validate!(opts, graph: true)

    with {:ok, {graph, state}} <- Error.from_native(Native.store_load(ref, opts[:graph] == true)) do
      {:ok,
       %{
         memory: graph && %Memory{ref: graph, character: character},
         window:
           Enum.map(state["window"], fn m ->
             %{
               seq: m["seq"],
               role: m["role"],
               text: m["text"],
               at: from_ms(m["at_ms"]),
               tagged: m["tagged"]
             }
           end),
         summary: state["summary"],
         records: Enum.map(state["records"], fn [id, ms] -> {id, from_ms(ms)} end),
         feedback: Enum.map(state["feedback"], fn [id, v, ms] -> {id, v, from_ms(ms)} end)
       }}
    end
  end

  @doc """
  Writes the graph of `memory` plus, in the same transaction, the options
  given. A graph loaded from this store handle (or checkpointed to it before)
  writes only the notes changed since, otherwise the whole graph is written;
  `info/1` reports which (`"last_checkpoint"`). Either way the stored graph
  ends up equal to `memory`. Options:

    * `:summary` — the new running summary;
    * `:pop_to` — drop window messages up to this sequence number;
    * `:archive` — note ids to archive (kept on disk, left out of the graph
      next time it loads).
  """
  @spec checkpoint(t(), Memory.t(), keyword()) :: :ok | {:error, Error.t()}
  def checkpoint(%__MODULE__{ref: ref}, %Memory{ref: graph} = memory, opts \\ []) do
    opts = Keyword.validate!(opts, [:summary, :pop_to, archive: []])

    extra =
      %{"archive" => opts[:archive]}
      |> put_some("summary", opts[:summary])
      |> put_some("pop_to", opts[:pop_to])

    # A working-memory graph is a subset of the store: its checkpoint upserts
    # the loaded notes and never deletes the others (a whole-graph save would).
    result =
      case memory.working do
        nil -> Native.store_checkpoint(ref, graph, extra)
        working -> Native.working_checkpoint(working, extra)
      end

    with {:ok, _} <- Error.from_native(result), do: :ok
  end

  @doc """
  Switches `memory` (an empty graph from `load(store, graph: false)`) to
  activation mode over the store: builds the long-term vector index (notes
  lacking a vector are embedded and stored, progress messages go to
  `progress`) and loads the core memories. Recall then activates the k-hop
  neighbourhood of each query's seeds, releasing the least recently
  activated notes past the cap (written back first).

  Options (all optional): `:cap` (non-core notes kept, default 1000),
  `:activation_budget` (notes one activation loads at most, closest first,
  default 256), `:k_hops` (default 2), `:seeds_per_query` (5), `:min_score`,
  `:embedder` (`"model"` or `"hash"`; default the graph's embedder),
  `:ann_from` (from this many indexed notes on the long-term index is an
  HNSW graph saved beside the store, default 200 000; `:never` keeps the
  exact brute-force scan at any size). Returns the memory with `working`
  set and the index report (`kind` is `"scan"` or `"hnsw"`).
  """
  @spec open_working(t(), Memory.t(), keyword()) ::
          {:ok, Memory.t(), map()} | {:error, Error.t()}
  def open_working(%__MODULE__{ref: ref}, %Memory{ref: graph} = memory, opts \\ []) do
    {progress, opts} = Keyword.pop(opts, :progress, self())

    with {:ok, {working, report}} <-
           Error.from_native(Native.working_open(ref, graph, working_config(opts), progress)) do
      {:ok, %{memory | working: working}, report}
    end
  end

  @doc """
  Checks working-memory options (those of `open_working/3`, without
  `:progress`) without opening anything: what a character checks when it is
  started, so bad options are refused at once rather than when it loads.
  Unknown keys raise `ArgumentError`; out-of-range values are
  `{:error, %SoulMem.Error{}}`.
  """
  @spec check_working(keyword()) :: :ok | {:error, Error.t()}
  def check_working(opts) when is_list(opts) do
    with {:ok, _} <- Error.from_native(Native.working_check(working_config(opts))), do: :ok
  end

  # The native config map of `open_working/3`'s options.
  defp working_config(opts) do
    opts =
      Keyword.validate!(opts, [
        :cap,
        :activation_budget,
        :k_hops,
        :seeds_per_query,
        :min_score,
        :embedder,
        :ann_from
      ])

    for {k, v} <- opts, v != nil, into: %{} do
      # `nil` means "not given" here; the native side's "never" is null.
      if k == :ann_from and v == :never, do: {"ann_from", nil}, else: {Atom.to_string(k), v}
    end
  end

  @doc """
  Appends window messages (`{message, tagged?}` pairs; messages have `:role`,
  `:text`, `:at`) in one transaction: all or none. Returns their sequence
  numbers. Durable once this returns.
  """
  @spec append_messages(t(), [{map(), boolean()}]) ::
          {:ok, [pos_integer()]} | {:error, Error.t()}
  def append_messages(%__MODULE__{ref: ref}, messages) when is_list(messages) do
    rows =
      for {%{role: role, text: text, at: at}, tagged} <- messages,
          do: {to_string(role), text, to_ms(at), tagged == true}

    Error.from_native(Native.store_append_messages(ref, rows))
  end

  @doc """
  Drops the window messages from store sequence number `from_seq` on (the
  newest: a turn taken back). Durable once this returns.
  """
  @spec retract_messages(t(), integer()) :: :ok | {:error, Error.t()}
  def retract_messages(%__MODULE__{ref: ref}, from_seq) when is_integer(from_seq) do
    with {:ok, _} <- Error.from_native(Native.store_retract_messages(ref, from_seq)), do: :ok
  end

  @doc """
  Sets the summary (unless `nil`) and drops window messages up to `pop_to`
  (unless `nil`), in one transaction.
  """
  @spec update_window(t(), String.t() | nil, non_neg_integer() | nil) :: :ok | {:error, Error.t()}
  def update_window(%__MODULE__{ref: ref}, summary, pop_to) do
    with {:ok, _} <- Error.from_native(Native.store_window_update(ref, summary, pop_to || -1)),
         do: :ok
  end

  @doc "Appends feedback (`1` or `-1`) on a note of `memory`. Durable once this returns."
  @spec append_feedback(t(), Memory.t(), String.t(), 1 | -1, DateTime.t()) ::
          :ok | {:error, Error.t()}
  def append_feedback(%__MODULE__{ref: ref}, %Memory{ref: graph}, note_id, value, at) do
    with {:ok, _} <-
           Error.from_native(Native.store_append_feedback(ref, graph, note_id, value, to_ms(at))),
         do: :ok
  end

  @doc "Appends retrieval records: `ids` recalled at `at` (ids not in the graph are skipped)."
  @spec append_records(t(), Memory.t(), [String.t()], DateTime.t()) ::
          {:ok, non_neg_integer()} | {:error, Error.t()}
  def append_records(%__MODULE__{ref: ref}, %Memory{ref: graph}, ids, at) when is_list(ids),
    do: Error.from_native(Native.store_append_records(ref, graph, ids, to_ms(at)))

  @doc """
  The whole character as one JSON document (binary): notes (archived too),
  window, summary, records, feedback, forgetting state, embeddings.
  `import_json/2` restores it exactly.
  """
  @spec export_json(t()) :: {:ok, binary()} | {:error, Error.t()}
  def export_json(%__MODULE__{ref: ref}), do: Error.from_native(Native.store_export(ref))

  @doc """
  Replaces the store's content with an export of the same character, in one
  transaction; an invalid document changes nothing.
  """
  @spec import_json(t(), binary()) :: :ok | {:error, Error.t()}
  def import_json(%__MODULE__{ref: ref}, json) when is_binary(json) do
    with {:ok, _} <- Error.from_native(Native.store_import(ref, json)), do: :ok
  end

  @doc """
  Who the store file at `path` belongs to and how big it is, read without
  its lock (a running character keeps serving): `character` (its id),
  `name` (the content of its `sem_self` note), `notes`, `archived`,
  `links`, `window`, `last_message_at` (the newest window message) and
  `graph_saved`. Reason `:not_found` for a missing or empty file.
  """
  @spec peek(Path.t()) :: {:ok, peek()} | {:error, Error.t()}
  def peek(path) when is_binary(path) do
    with {:ok, peek} <- Error.from_native(Native.store_peek(path)) do
      {:ok, Map.update!(peek, :last_message_at, &parse_time/1)}
    end
  end

  defp parse_time(nil), do: nil

  defp parse_time(text) do
    case DateTime.from_iso8601(text) do
      {:ok, at, _offset} -> at
      _ -> nil
    end
  end

  @doc """
  Lists and searches the store's active notes, as `SoulMem.Memory.list_notes/2`
  lists a graph (same options and result): the listing of a character in
  activation mode, whose graph holds only the working set.
  """
  @spec list_notes(t(), Memory.list_opts()) :: {:ok, Memory.listing()} | {:error, Error.t()}
  def list_notes(%__MODULE__{ref: ref}, opts \\ %{}) do
    with {:ok, request} <- Memory.list_request(opts),
         do: Error.from_native(Native.store_list_notes(ref, request))
  end

  @doc """
  Counts and facts about the file: notes, archived, links, window, schema
  version, path, and `"last_checkpoint"` — what the last `checkpoint/3`
  through this handle wrote (`"mode"` `"full"` or `"incremental"`,
  `"full_reason"`, `"notes_written"`, `"links_written"`, `"notes_deleted"`),
  `nil` before the first (working-memory checkpoints are not reported).
  """
  @spec info(t()) :: {:ok, map()} | {:error, Error.t()}
  def info(%__MODULE__{ref: ref}) do
    Error.from_native(Native.store_info(ref))
  end

  defp put_some(map, _key, nil), do: map
  defp put_some(map, key, value), do: Map.put(map, key, value)

  defp to_ms(%DateTime{} = at), do: DateTime.to_unix(at, :millisecond)

  defp from_ms(ms), do: DateTime.from_unix!(ms, :millisecond)
end

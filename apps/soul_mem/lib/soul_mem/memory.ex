defmodule SoulMem.Memory do
  @moduledoc """
  One character's memory graph, held by the native graph store.

  A `%SoulMem.Memory{}` wraps a handle to a graph that lives in Rust. The
  graph is freed when the last reference to the handle is garbage collected;
  there is nothing to close.

      {:ok, memory} = SoulMem.Memory.import_file("demo", "fixtures/characters/demo.json")
      SoulMem.Memory.stats(memory).nodes
      {:ok, note} = SoulMem.Memory.get_note(memory, "sem_self")

  Failures are `{:error, %SoulMem.Error{}}`; the `!` variants raise it.
  """

  alias SoulMem.{Error, JSON, Native}

  @enforce_keys [:ref, :character]
  defstruct [:ref, :character, working: nil]

  @typedoc """
  `working` is set in activation mode (`SoulMem.Store.open_working/3`): the
  graph is then the character's working memory, a subset of its long-term
  memory in the store, and recall activates notes from the store first.
  """
  @type t :: %__MODULE__{ref: reference(), character: String.t(), working: reference() | nil}

  @typedoc "A note id: its readable id (`\"sem_self\"`) or its UUID string."
  @type note_id :: String.t()

  @type stats :: %{
          character: String.t(),
          nodes: non_neg_integer(),
          links: non_neg_integer(),
          pending_links: non_neg_integer(),
          nodes_by_kind: %{
            semantic: non_neg_integer(),
            specific_situation: non_neg_integer(),
            abstract_situation: non_neg_integer(),
            procedure: non_neg_integer()
          },
          links_by_kind: %{
            sem: non_neg_integer(),
            proc: non_neg_integer(),
            abstract_to_specific: non_neg_integer(),
            specific_to_abstract: non_neg_integer()
          }
        }

  @typedoc """
  Import options:

    * `:complete` (boolean, default `true`) — the input is a whole graph:
      every link must name a node of the input. With `false` the input may be
      partial and unresolved links are kept as pending links.
    * `:max_bytes` (non-negative integer, default `50_000_000`) — inputs
      larger than this fail with reason `:too_large`.
  """
  @type import_opts :: [complete: boolean(), max_bytes: non_neg_integer()]

  @import_defaults [complete: true, max_bytes: 50_000_000]

  @doc """
  Creates an empty memory graph for `character`.
  """
  @spec new(String.t()) :: t()
  def new(character) when is_binary(character) do
    %__MODULE__{ref: Native.graph_new(character), character: character}
  end

  @doc """
  Imports `character`'s graph from a Graph JSON binary (an array of
  `{id, tags, mem_type, mem_links}` nodes).

  See `t:import_opts/0` for the options; an unknown option or an option of the
  wrong type raises `ArgumentError`.
  """
  @spec import_json(String.t(), binary(), import_opts()) :: {:ok, t()} | {:error, Error.t()}
  def import_json(character, json, opts \\ []) when is_binary(character) and is_binary(json) do
    {complete, max_bytes} = import_options!(opts)

    character
    |> Native.graph_import_json(json, complete, max_bytes)
    |> wrap_graph(character)
  end

  @doc """
  Like `import_json/3`, but returns the memory or raises `SoulMem.Error`.
  """
  @spec import_json!(String.t(), binary(), import_opts()) :: t()
  def import_json!(character, json, opts \\ []), do: unwrap!(import_json(character, json, opts))

  @doc """
  Imports `character`'s graph from a Graph JSON file.

  The file is read by the native store (on a dirty I/O scheduler); a file that
  cannot be read fails with reason `:io`. Options as in `import_json/3`.
  """
  @spec import_file(String.t(), Path.t(), import_opts()) :: {:ok, t()} | {:error, Error.t()}
  def import_file(character, path, opts \\ []) when is_binary(character) do
    {complete, max_bytes} = import_options!(opts)
    path = IO.chardata_to_string(path)

    character
    |> Native.graph_import_file(path, complete, max_bytes)
    |> wrap_graph(character)
  end

  @doc """
  Like `import_file/3`, but returns the memory or raises `SoulMem.Error`.
  """
  @spec import_file!(String.t(), Path.t(), import_opts()) :: t()
  def import_file!(character, path, opts \\ []), do: unwrap!(import_file(character, path, opts))

  @doc """
  Counts of the graph: nodes and links, in total and by kind, and the links
  still pending (their target is not in the graph yet).
  """
  @spec stats(t()) :: stats()
  def stats(%__MODULE__{ref: ref}),
    do: ref |> Native.graph_stats() |> Map.drop([:decay_cache_hits, :decay_cache_misses])

  @doc """
  How many recalls reused the links' cached forgetting decay (`hits`) and how
  many computed it (`misses`) since the graph was loaded. An unchanged
  character's recalls hit.
  """
  @spec decay_cache(t()) :: %{hits: non_neg_integer(), misses: non_neg_integer()}
  def decay_cache(%__MODULE__{ref: ref}) do
    %{decay_cache_hits: hits, decay_cache_misses: misses} = Native.graph_stats(ref)
    %{hits: hits, misses: misses}
  end

  @doc """
  Fetches one note by readable id or UUID.

  The note is a map with string keys, in Graph JSON shape (`"id"`, `"tags"`,
  `"mem_type"`, `"mem_links"`) plus `"uuid"`, `"retrieval_count"`,
  `"create_time"` and `"last_accessed_time"`. An unknown id fails with reason
  `:not_found`.
  """
  @spec get_note(t(), note_id()) :: {:ok, map()} | {:error, Error.t()}
  def get_note(%__MODULE__{ref: ref}, id) when is_binary(id) do
    ref |> Native.graph_get_note(id) |> wrap()
  end

  @doc """
  Like `get_note/2`, but returns the note or raises `SoulMem.Error`.
  """
  @spec get_note!(t(), note_id()) :: map()
  def get_note!(memory, id), do: unwrap!(get_note(memory, id))

  @doc """
  Inserts or replaces one note, given in Graph JSON node shape (a map with
  string keys, or its JSON): `"id"`, `"tags"`, `"mem_type"`, optional
  `"mem_links"` (targets must be notes of the graph), `"core"`. Replacing
  keeps the note's history (creation and access times, retrieval count) and
  the links pointing at it.

  With a `store` (`SoulMem.Store`) the note is written there first, so the
  put is durable once this returns. Invalid notes fail with
  `{:error, %SoulMem.Error{}}` and change nothing. Returns the note as
  `get_note/2` shows it.
  """
  @spec put_note(t(), map() | binary(), SoulMem.Store.t() | nil) ::
          {:ok, map()} | {:error, Error.t()}
  def put_note(%__MODULE__{ref: ref}, note, store \\ nil) do
    store_ref = if store, do: store.ref

    # The note crosses as a Graph JSON node document: the importer that reads whole graphs
    # reads it, with the same checks.
    with {:ok, json} <- note_json(note), do: ref |> Native.note_put(store_ref, json) |> wrap()
  end

  defp note_json(note) when is_binary(note), do: {:ok, note}

  defp note_json(note) when is_map(note), do: JSON.encode_arg(note)

  defp note_json(_note), do: {:error, Error.new(:invalid_json, "expected a note map or JSON")}

  @typedoc """
  A note listing request (atom or string keys, every key optional): `query`
  (text searched case-insensitively in ids, texts, aliases, descriptions and
  tags; several words also match notes holding all of them), `kind`
  (`"semantic"`, `"specific_situation"`, `"abstract_situation"`,
  `"procedure"`), `page` (from 1) and `per_page` (1..200, default 50);
  integers may be given as decimal strings (query parameters).
  """
  @type list_opts :: %{optional(atom() | String.t()) => term()}

  @typedoc """
  One page of notes, as the JSON API shows it: `"total"`, `"page"`,
  `"per_page"` and `"items"`, each `%{"id", "kind", "text", "tags", "core",
  "aliases" (semantic notes), "links" (outgoing), "retrieval_count",
  "last_accessed_time"}`.
  """
  @type listing :: %{String.t() => term()}

  @doc """
  Lists and searches the notes of the graph: filtered by kind and query,
  exact matches first, then notes matching more of the query's words, then
  graph order; paged. A bad kind, page or per_page fails with reason
  `:invalid_argument` naming it. In activation mode the graph holds only
  the working set: list the store instead (`SoulMem.Store.list_notes/2`).
  """
  @spec list_notes(t(), list_opts()) :: {:ok, listing()} | {:error, Error.t()}
  def list_notes(%__MODULE__{ref: ref}, opts \\ %{}) do
    with {:ok, request} <- list_request(opts),
         do: ref |> Native.graph_list_notes(request) |> wrap()
  end

  @doc """
  The typed request of `list_notes/2` (and `SoulMem.Store.list_notes/2`) for
  `opts`: `{:ok, %{query, kind, page, per_page}}` (`nil` for defaults), or
  `:invalid_argument` for an unknown key or a value of the wrong type.
  """
  @spec list_request(list_opts()) :: {:ok, map()} | {:error, Error.t()}
  def list_request(opts) when is_map(opts) do
    Enum.reduce_while(opts, {:ok, %{query: nil, kind: nil, page: nil, per_page: nil}}, fn
      {key, value}, {:ok, acc} ->
        case list_option(to_string(key), value) do
          {:ok, k, v} -> {:cont, {:ok, Map.put(acc, k, v)}}
          {:error, _} = error -> {:halt, error}
        end
    end)
  end

  def list_request(_opts), do: {:error, Error.new(:invalid_argument, "expected a map of options")}

  defp list_option(key, nil) when key in ~w(query kind page per_page),
    do: {:ok, String.to_existing_atom(key), nil}

  defp list_option(key, value) when key in ~w(query kind) and is_binary(value),
    do: {:ok, String.to_existing_atom(key), value}

  defp list_option("kind", value) when is_atom(value), do: {:ok, :kind, Atom.to_string(value)}

  defp list_option(key, value) when key in ~w(page per_page) and is_integer(value),
    do: {:ok, String.to_existing_atom(key), value}

  defp list_option(key, value) when key in ~w(page per_page) and is_binary(value) do
    case Integer.parse(String.trim(value)) do
      {n, ""} ->
        {:ok, String.to_existing_atom(key), n}

      _ ->
        {:error, Error.new(:invalid_argument, "#{key} must be an integer, got #{inspect(value)}")}
    end
  end

  defp list_option(key, value),
    do: {:error, Error.new(:invalid_argument, "invalid #{key}: #{inspect(value, limit: 5)}")}

  @doc """
  Deletes a note (readable id or UUID) for good: the note and every link
  from or to it leave the graph (recall no longer finds it) and, with a
  `store`, the store in one transaction (note, links in both directions,
  embeddings, forgetting state, retrieval records and feedback), store
  first. In activation mode the character's store is used and the
  long-term index forgets the note. Returns `%{id: readable_id,
  links_removed: n}`; an unknown id fails with `:not_found`, the self node
  (`"sem_self"`) with `:invalid_argument`.
  """
  @spec delete_note(t(), note_id(), SoulMem.Store.t() | nil) ::
          {:ok, %{id: String.t(), links_removed: non_neg_integer()}} | {:error, Error.t()}
  def delete_note(%__MODULE__{ref: ref, working: working}, id, store \\ nil)
      when is_binary(id) do
    store_ref = if store, do: store.ref
    (working || ref) |> Native.note_delete(store_ref, id) |> wrap()
  end

  @doc """
  The notes within `hops` links of `ids` (either direction; unknown ids are
  skipped), at most `max_notes` (nearest first), and the links among them:
  `%{notes: [%{id, kind, content, core, hops}], links: [%{from, to, kind,
  intensity}]}` — the graph a page draws around a recall.
  """
  @spec neighbourhood(t(), [note_id()], non_neg_integer(), pos_integer()) ::
          {:ok, map()} | {:error, Error.t()}
  def neighbourhood(%__MODULE__{ref: ref}, ids, hops \\ 1, max_notes \\ 60)
      when is_list(ids) and is_integer(hops) and hops >= 0 and is_integer(max_notes) and
             max_notes > 0 do
    ref |> Native.graph_neighbourhood(ids, hops, max_notes) |> wrap()
  end

  @doc """
  Exports the whole graph as a Graph JSON binary.
  """
  @spec export_json(t()) :: {:ok, binary()} | {:error, Error.t()}
  def export_json(%__MODULE__{ref: ref}), do: ref |> Native.graph_export_json() |> wrap()

  @doc """
  Like `export_json/1`, but returns the JSON or raises `SoulMem.Error`.
  """
  @spec export_json!(t()) :: binary()
  def export_json!(memory), do: unwrap!(export_json(memory))

  @doc """
  Exports the graph's semantic notes (all but `sem_self`) as a SillyTavern
  World Info file: a map with string keys, `%{"entries" => %{"0" => %{"uid" =>
  0, "key" => aliases, "comment" => content, "content" => description,
  "constant" => core, ...}}}`. Encode it with `SoulMem.JSON` to write a file
  SillyTavern imports. See `SoulMem.Card` for the mapping.
  """
  @spec export_world_info(t()) :: {:ok, map()} | {:error, Error.t()}
  def export_world_info(%__MODULE__{ref: ref}),
    do: ref |> Native.graph_export_world_info() |> wrap()

  @doc """
  Exports the graph as a SillyTavern V2 character card: a map with string keys,
  `%{"spec" => "chara_card_v2", "spec_version" => "2.0", "data" => %{"name" =>
  ..., "description" => ..., "first_mes" => ..., "character_book" =>
  %{"entries" => [...]}, ...}}`. Needs the semantic note `sem_self` (reason
  `:not_found` otherwise). See `SoulMem.Card` for the mapping.
  """
  @spec export_card(t()) :: {:ok, map()} | {:error, Error.t()}
  def export_card(%__MODULE__{ref: ref}), do: ref |> Native.graph_export_card() |> wrap()

  ## Helpers

  defp import_options!(opts) do
    opts = Keyword.validate!(opts, @import_defaults)
    complete = Keyword.fetch!(opts, :complete)
    max_bytes = Keyword.fetch!(opts, :max_bytes)

    unless is_boolean(complete) do
      raise ArgumentError, "expected :complete to be a boolean, got: #{inspect(complete)}"
    end

    unless is_integer(max_bytes) and max_bytes >= 0 do
      raise ArgumentError,
            "expected :max_bytes to be a non-negative integer, got: #{inspect(max_bytes)}"
    end

    {complete, max_bytes}
  end

  defp wrap_graph(result, character) do
    with {:ok, ref} <- wrap(result) do
      {:ok, %__MODULE__{ref: ref, character: character}}
    end
  end

  defp wrap({:ok, value}), do: {:ok, value}

  defp wrap({:error, {kind, message}}) when is_atom(kind),
    do: {:error, Error.new(kind, to_string(message))}

  defp unwrap!({:ok, value}), do: value
  defp unwrap!({:error, %Error{} = error}), do: raise(error)

  defimpl Inspect do
    def inspect(%SoulMem.Memory{ref: ref, character: character}, _opts) do
      case safe_stats(ref) do
        %{nodes: nodes, links: links} ->
          "#SoulMem.Memory<#{character} nodes: #{nodes} links: #{links}>"

        nil ->
          "#SoulMem.Memory<#{character}>"
      end
    end

    defp safe_stats(ref) do
      SoulMem.Native.graph_stats(ref)
    rescue
      _ -> nil
    catch
      _, _ -> nil
    end
  end
end

defmodule SoulMem.Catalog do
  @moduledoc """
  The characters a node knows, running or stored, and their making and
  unmaking: `list/1`, `create/3`, `delete/2` (the façade's `SoulMem.characters/1`,
  `SoulMem.create/3`, `SoulMem.delete/2`).

  A stored character is a store file under the data directory
  (`SoulMem.Store`); its id, name and size are read without its lock
  (`SoulMem.Store.peek/1`), so listing never disturbs a running character.

  Creation writes the new character's store before it answers (the
  character starts from it, as any stored one), from one of:

    * `{:empty, %{name: name, description: text}}` — only its self note
      `sem_self` (a core memory);
    * `{:graph, json}` — a Graph JSON document (the seed's array format);
    * `{:export, document}` — an export of any character (`SoulMem.export/1`),
      taken over under the new id;
    * `{:card, bytes}` — a SillyTavern character card (PNG, JSON, CHARX) or
      World Info file, mapped by `SoulMem.Card`.

  Deletion stops the character (writing it back), writes an export backup
  to `<data_dir>/backups/`, then removes the store file — holding the
  store's lock from the backup to the removal, so nothing restarts it in
  between.
  """

  require Logger

  alias SoulMem.{Character, Characters, Error, Memory, Store}

  @typedoc "One character of `list/1`."
  @type entry :: %{
          id: String.t(),
          name: String.t() | nil,
          state: :running | :stored,
          status: :loading | :working | :idle | nil,
          notes: non_neg_integer(),
          links: non_neg_integer(),
          last_active: DateTime.t() | nil
        }

  @typedoc "Where a new character's memories come from."
  @type source ::
          {:empty, %{required(:name) => String.t(), optional(:description) => String.t()}}
          | {:graph, binary()}
          | {:export, map() | binary()}
          | {:card, binary()}

  @max_id_bytes 128
  @max_name_chars 200
  @max_description_bytes 64 * 1024

  @doc """
  The running and the stored characters, sorted by id. A running character
  reports its live graph counts and state; a stored one what its file holds.
  `last_active` is the time of its newest message. Files that are not
  readable stores are logged and left out.

  Options: `:data_dir` (default `SoulMem.Store.data_dir/0`).
  """
  @spec list(keyword()) :: [entry()]
  def list(opts \\ []) do
    opts = Keyword.validate!(opts, data_dir: nil)
    stored = stored(opts[:data_dir] || Store.data_dir())
    running = Map.new(Characters.list())

    (Map.keys(stored) ++ Map.keys(running))
    |> Enum.uniq()
    |> Enum.sort()
    |> Enum.flat_map(fn id -> entry(id, Map.get(running, id), Map.get(stored, id)) end)
  end

  defp entry(id, nil, peek), do: [stored_entry(id, peek)]

  defp entry(id, pid, peek) do
    with {:ok, info} <- Character.info(pid),
         {:ok, window} <- Character.window(pid) do
      last = window |> SoulMem.Window.visible() |> List.last()

      [
        %{
          id: id,
          name: (peek && peek.name) || self_name(pid),
          state: :running,
          status: info.state,
          notes: info.stats.nodes,
          links: info.stats.links,
          last_active: (last && last.at) || (peek && peek.last_message_at)
        }
      ]
    else
      # Stopped while listed: what its file says, if it has one.
      _ -> if peek, do: [stored_entry(id, peek)], else: []
    end
  end

  defp stored_entry(id, peek) do
    %{
      id: id,
      name: peek.name,
      state: :stored,
      status: nil,
      notes: peek.notes,
      links: peek.links,
      last_active: peek.last_message_at
    }
  end

  defp self_name(pid) do
    case SoulMem.get_note(pid, "sem_self") do
      {:ok, %{"mem_type" => %{"Semantic" => %{"content" => name}}}} -> name
      _ -> nil
    end
  end

  defp stored(data_dir) do
    data_dir
    |> Path.join("*.soulmem")
    |> Path.wildcard()
    |> Enum.reduce(%{}, fn path, acc ->
      case Store.peek(path) do
        {:ok, %{graph_saved: true} = peek} ->
          Map.put(acc, peek.character, peek)

        {:ok, _never_saved} ->
          acc

        {:error, error} ->
          Logger.warning("catalog: #{path} is not a readable store: #{Exception.message(error)}")
          acc
      end
    end)
  end

  @doc """
  Whether `id` can name a character: 1 to #{@max_id_bytes} bytes of UTF-8,
  no control characters, no `/` or `\\`, no surrounding whitespace (ids
  appear in URLs and file names).
  """
  @spec valid_id?(term()) :: boolean()
  def valid_id?(id) when is_binary(id) do
    id != "" and byte_size(id) <= @max_id_bytes and String.valid?(id) and
      String.trim(id) == id and not String.contains?(id, ["/", "\\"]) and
      not Regex.match?(~r/[\x00-\x1f\x7f]/u, id)
  end

  def valid_id?(_id), do: false

  @doc """
  Creates character `id` from `source` (see the module doc), stores it and
  starts it. Refuses an id in use (running, or stored with a graph) with
  reason `:exists`, an invalid id with `:invalid_character`, and a bad
  source with the reason of what is wrong in it; a refused creation writes
  nothing.

  Returns the running character with its name and, for a card, the
  import report (`SoulMem.Card.parse/2`). A card's character may be
  created without an id (`nil`): it is named after the card.

  Options: `:data_dir`, `:start` (more options for
  `SoulMem.Characters.ensure_started/2`), `:name` (a World Info file's
  character name), `:enrich` — for a card, `false` (default) or the options
  of `SoulMem.LLM.chat/2` (`[]`: the application's LLM) for the LLM pass
  that adds the situations and habits its long texts tell of
  (`SoulMem.Card.Enrichment`); its outcome is the report's `enrichment`
  (`created`, `merged`, `linked`, or `error` — the card's graph stands
  either way).
  """
  @spec create(String.t() | nil, source(), keyword()) ::
          {:ok, %{id: String.t(), pid: pid(), name: String.t() | nil, report: map() | nil}}
          | {:error, Error.t()}
  def create(id, source, opts \\ []) do
    opts = Keyword.validate!(opts, data_dir: nil, start: [], name: nil, enrich: false)
    data_dir = opts[:data_dir] || Store.data_dir()

    with {:ok, id, source, report} <- resolve(id, source, opts[:name]),
         :ok <- check_id(id),
         :ok <- check_free(id, data_dir),
         # Only a card has a long text to read.
         opts = if(report, do: opts, else: Keyword.put(opts, :enrich, false)),
         {:ok, made} <- make(id, source, data_dir, opts) do
      report =
        if made[:enrichment], do: Map.put(report, :enrichment, made.enrichment), else: report

      {:ok, made |> Map.delete(:enrichment) |> Map.merge(%{id: id, report: report})}
    end
  end

  # A card becomes Graph JSON first; without an id, its character's name
  # (spaces and separators as `_`) is the id.
  defp resolve(id, {:card, bytes}, name) when is_binary(bytes) do
    with {:ok, %{graph: graph, report: report}} <- SoulMem.Card.parse(bytes, name: name) do
      {:ok, id || id_from_name(report[:name]), {:graph, graph}, report}
    end
  end

  defp resolve(id, source, _name), do: {:ok, id, source, nil}

  defp id_from_name(name) when is_binary(name),
    do: name |> String.trim() |> String.replace(~r/[\s\/\\\x00-\x1f\x7f]+/u, "_")

  defp id_from_name(_name), do: nil

  defp check_id(id) do
    if valid_id?(id),
      do: :ok,
      else:
        {:error,
         Error.new(
           :invalid_character,
           "a character id is 1 to #{@max_id_bytes} bytes of text without control " <>
             "characters, / or \\, and without surrounding spaces"
         )}
  end

  defp check_free(id, data_dir) do
    taken? =
      Characters.whereis(id) != nil or
        match?({:ok, %{graph_saved: true}}, Store.peek(Store.path(data_dir, id)))

    if taken?, do: exists(id), else: :ok
  end

  defp exists(id), do: {:error, Error.new(:exists, "a character #{inspect(id)} already exists")}

  defp make(id, {:export, document}, data_dir, opts) do
    with {:ok, document} <- as_own_export(id, document),
         {:ok, pid} <- SoulMem.import(id, document, data_dir: data_dir, start: opts[:start]) do
      {:ok, %{pid: pid, name: self_name(pid)}}
    else
      # Made meanwhile by someone else.
      {:error, reason} when reason in [:exists, :running] -> exists(id)
      {:error, %Error{}} = error -> error
      {:error, reason} -> {:error, Error.new(:invalid_json, "the export: #{inspect(reason)}")}
    end
  end

  defp make(id, {:empty, fields}, data_dir, opts) when is_map(fields) do
    with {:ok, graph} <- self_graph(fields), do: make(id, {:graph, graph}, data_dir, opts)
  end

  defp make(id, {:graph, graph}, data_dir, opts) when is_binary(graph) do
    with {:ok, memory} <- Memory.import_json(id, graph) do
      enrichment = enrich(memory, opts[:enrich])
      start = Keyword.merge(opts[:start], memory: memory, persist: true, data_dir: data_dir)

      case Characters.ensure_started(id, start) do
        {:ok, pid} -> {:ok, %{pid: pid, name: self_name(pid), enrichment: enrichment}}
        {:error, reason} -> {:error, start_error(id, reason)}
      end
    end
  end

  defp make(_id, source, _data_dir, _opts) do
    {:error,
     Error.new(
       :invalid_argument,
       "unknown character source #{inspect(source, limit: 3, printable_limit: 40)}"
     )}
  end

  # The optional LLM pass over a card (SoulMem.Card.Enrichment): what it
  # added, or why it added nothing — never a failed creation.
  defp enrich(_memory, false), do: nil

  defp enrich(memory, llm) when is_list(llm) do
    case SoulMem.Card.Enrichment.run(memory, llm: llm) do
      {:ok, :empty} ->
        %{created: [], linked: 0}

      {:ok, result} ->
        Map.take(result, [:created, :merged, :linked])

      {:error, reason} ->
        Logger.warning("catalog: the card's LLM pass added nothing: #{inspect(reason)}")
        %{error: describe(reason)}
    end
  end

  defp describe(%Error{} = error), do: Exception.message(error)
  defp describe({:llm, reason}), do: "the LLM failed: #{inspect(reason)}"

  defp describe({:invalid_output, problems}),
    do: "invalid LLM output: #{Enum.join(problems, "; ")}"

  defp describe(reason), do: inspect(reason)

  defp start_error(_id, %Error{} = error), do: error
  defp start_error(_id, {:store_failed, %Error{} = error}), do: error

  defp start_error(id, reason),
    do: Error.new(:io, "character #{inspect(id)} did not start: #{inspect(reason)}")

  # An export names its character: taken over under the new id.
  defp as_own_export(id, document) when is_binary(document) do
    case SoulMem.JSON.decode(document) do
      {:ok, map} when is_map(map) -> as_own_export(id, map)
      _ -> {:error, Error.new(:invalid_document, "the export must be a JSON object")}
    end
  end

  defp as_own_export(id, %{} = document), do: {:ok, Map.put(document, "character", id)}

  defp as_own_export(_id, _document),
    do: {:error, Error.new(:invalid_document, "the export must be a JSON object")}

  defp self_graph(fields) do
    name = fields |> field(:name) |> trim()
    description = fields |> field(:description) |> trim()

    cond do
      not is_binary(name) or name == "" ->
        {:error, Error.new(:invalid_value, "name: a new character needs a name")}

      String.length(name) > @max_name_chars ->
        {:error, Error.new(:invalid_value, "name: at most #{@max_name_chars} characters")}

      not (is_nil(description) or is_binary(description)) ->
        {:error, Error.new(:invalid_value, "description: must be text")}

      is_binary(description) and byte_size(description) > @max_description_bytes ->
        {:error,
         Error.new(:invalid_value, "description: at most #{@max_description_bytes} bytes")}

      true ->
        SoulMem.JSON.encode([
          %{
            "id" => "sem_self",
            "tags" => [],
            "core" => true,
            "mem_type" => %{
              "Semantic" => %{
                "content" => name,
                "aliases" => [],
                "concept_type" => "Entity",
                "description" => description || ""
              }
            },
            "mem_links" => []
          }
        ])
    end
  end

  defp field(fields, key), do: Map.get(fields, key, Map.get(fields, Atom.to_string(key)))
  defp trim(value) when is_binary(value), do: String.trim(value)
  defp trim(value), do: value

  @doc """
  Deletes character `id`: stops it (a persisted one writes back first),
  writes an export backup `<data_dir>/backups/<file>-<UTC time>.json`, and
  removes its store. Returns the backup's path (`nil` for a character that
  had no store: it is only stopped). `{:error, %SoulMem.Error{reason:
  :not_found}}` when there is no such character; when the backup cannot be
  written, nothing is removed.

  Options: `:data_dir`.
  """
  @spec delete(String.t(), keyword()) :: {:ok, %{backup: Path.t() | nil}} | {:error, Error.t()}
  def delete(id, opts \\ []) when is_binary(id) do
    opts = Keyword.validate!(opts, data_dir: nil)
    data_dir = opts[:data_dir] || Store.data_dir()
    path = Store.path(data_dir, id)
    stopped = Characters.stop(id)

    cond do
      File.regular?(path) -> remove_store(id, data_dir, path)
      stopped == :ok -> {:ok, %{backup: nil}}
      true -> {:error, Error.new(:not_found, "no character #{inspect(id)}")}
    end
  end

  # The store's lock is held from the export to the removal: a character
  # that tried to restart meanwhile fails to open it, never half-reads it.
  defp remove_store(id, data_dir, path) do
    # The character just stopped: its handle is released moments later.
    with {:ok, store} <- Store.open(data_dir, id, in_use_retries: 19) do
      result =
        with {:ok, json} <- Store.export_json(store),
             backup = backup_path(data_dir, path),
             :ok <- write_backup(backup, json) do
          Store.remove_file(path)
          {:ok, %{backup: backup}}
        end

      Store.close(store)
      File.rm(path <> ".lock")
      result
    end
  end

  defp backup_path(data_dir, path) do
    stamp = DateTime.utc_now() |> DateTime.to_iso8601(:basic) |> String.replace(".", "")
    Path.join([data_dir, "backups", "#{Path.basename(path, ".soulmem")}-#{stamp}.json"])
  end

  defp write_backup(backup, json) do
    case SoulMem.JSON.write_file_atomic(backup, json, mode: 0o600) do
      :ok ->
        :ok

      {:error, posix} ->
        {:error,
         Error.new(:io, "cannot write the backup #{backup}: #{:file.format_error(posix)}")}
    end
  end
end

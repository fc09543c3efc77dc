defmodule SoulMemWeb.Management do
  @moduledoc """
  Character management over HTTP, for an operator token (the router checks
  it): list the characters (`GET /api/characters`), create one (`POST
  /api/characters`) and delete one (`DELETE /api/characters/:id`). Calls
  the runtime's façade (`SoulMem.characters/1`, `SoulMem.create/3`,
  `SoulMem.delete/2`) and the token store; never the NIF.

  A creation mints the new character's first token and returns it — the
  only time it is shown. A deletion revokes every token of the character
  first, so nothing reaches it while its backup is written and its store
  removed.

  Creation bodies:

    * JSON `{"id", "name", "description"?}` — an empty character;
    * JSON `{"id", "graph": [...]}` — a Graph JSON document (the seed's
      array format);
    * JSON `{"id", "export": {...}}` — an export (`GET
      /api/characters/:id/export`), taken over under the new id;
    * JSON `{"id"?, "card": {...}, "name"?, "enrich"?}` — a SillyTavern card
      JSON (V1, V2, V3) or a World Info file (`name` names its character);
    * any other content type (`image/png`, `application/zip`,
      `application/octet-stream`) — the bytes of a card (PNG, CHARX or
      JSON), with `?id=`, `?name=` and `?enrich=true` in the query.

  `enrich` runs the optional LLM pass over the card's long texts
  (`SoulMem.Card.Enrichment`, the node's configured LLM); the report says
  what it added or why it added nothing.

  Without an id, a card's character is named after the card
  (`SoulMem.Catalog.create/3`).
  """

  alias SoulMemWeb.{Error, Tokens}

  @json_sources ~w(graph export card)

  @doc """
  The characters of the node: `{"characters": [{id, name, state, status,
  notes, links, last_active, tokens}]}` (`tokens` — how many stored tokens
  open it).
  """
  @spec list() :: {:ok, map()}
  def list do
    tokens = Map.new(Tokens.counts())

    characters =
      for c <- SoulMem.characters() do
        %{
          "id" => c.id,
          "name" => c.name,
          "state" => Atom.to_string(c.state),
          "status" => c.status && Atom.to_string(c.status),
          "notes" => c.notes,
          "links" => c.links,
          "last_active" => c.last_active && DateTime.to_iso8601(c.last_active),
          "tokens" => Map.get(tokens, c.id, 0)
        }
      end

    {:ok, %{"characters" => characters}}
  end

  @doc """
  Creates a character from a request body: `json` is the decoded JSON body
  (`nil` for a body of another content type, given raw as `raw`); `query`
  the decoded query string. Answers `{id, name, token, report}`.
  """
  @spec create(map() | nil, binary(), map()) :: {:ok, map()} | {:error, Error.t()}
  def create(json, raw, query) do
    with {:ok, id, source, opts} <- source(json, raw, query),
         {:ok, made} <- endpoint(SoulMem.create(id, source, opts)),
         {:ok, token} <- endpoint(Tokens.create(made.id)) do
      {:ok,
       %{
         "id" => made.id,
         "name" => made.name,
         "token" => token,
         "report" => made.report
       }}
    end
  end

  defp source(nil, raw, query) when is_binary(raw) and raw != "" do
    with :ok <- optional_string(query["id"], "id"),
         :ok <- optional_string(query["name"], "name"),
         do:
           {:ok, query["id"], {:card, raw},
            name: query["name"], enrich: enrich(query["enrich"] == "true")}
  end

  defp source(nil, _raw, _query),
    do: {:error, Error.new(:invalid_payload, "send a card file or a JSON object")}

  defp source(%{} = json, _raw, _query) do
    given = Enum.filter(@json_sources, &Map.has_key?(json, &1))
    allowed = ["id", "name", "description", "enrich" | @json_sources]

    cond do
      (unknown = Map.keys(json) -- allowed) != [] ->
        {:error, Error.new(:invalid_payload, "unknown field(s): #{Enum.join(unknown, ", ")}")}

      length(given) > 1 ->
        {:error, Error.new(:invalid_payload, "give one of graph, export or card")}

      not (is_binary(json["id"]) or (json["id"] == nil and given == ["card"])) ->
        {:error, Error.new(:invalid_payload, "id must be a string")}

      true ->
        json_source(given, json)
    end
  end

  defp source(_json, _raw, _query),
    do: {:error, Error.new(:invalid_payload, "the body must be a JSON object or a card file")}

  defp json_source([], json),
    do: {:ok, json["id"], {:empty, %{name: json["name"], description: json["description"]}}, []}

  defp json_source(["graph"], %{"graph" => graph} = json) when is_list(graph),
    do: {:ok, json["id"], {:graph, SoulMem.JSON.encode!(graph)}, []}

  defp json_source(["export"], %{"export" => export} = json) when is_map(export),
    do: {:ok, json["id"], {:export, export}, []}

  defp json_source(["card"], %{"card" => card} = json) when is_map(card) do
    with :ok <- optional_string(json["name"], "name"),
         do:
           {:ok, json["id"], {:card, SoulMem.JSON.encode!(card)},
            name: json["name"], enrich: enrich(json["enrich"] == true)}
  end

  defp json_source([field], _json) do
    shape = if field == "graph", do: "an array of notes", else: "a JSON object"
    {:error, Error.new(:invalid_payload, "#{field} must be #{shape}")}
  end

  # The card's LLM pass uses the node's configured LLM.
  defp enrich(true), do: []
  defp enrich(false), do: false

  defp optional_string(value, _name) when is_nil(value) or is_binary(value), do: :ok

  defp optional_string(_value, name),
    do: {:error, Error.new(:invalid_payload, "#{name} must be a string")}

  # A runtime result, its error as the endpoint's.
  defp endpoint({:error, reason}), do: {:error, Error.from(reason)}
  defp endpoint(result), do: result

  @doc """
  Deletes character `id`: revokes its tokens (joined channels close), then
  `SoulMem.delete/2` (export backup, then the store is removed). Answers
  `{deleted, backup}`.
  """
  @spec delete(String.t()) :: {:ok, map()} | {:error, Error.t()}
  def delete(id) do
    with :ok <- endpoint(Tokens.revoke(id)),
         {:ok, %{backup: backup}} <- endpoint(SoulMem.delete(id)) do
      {:ok, %{"deleted" => id, "backup" => backup}}
    end
  end
end

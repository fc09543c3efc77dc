defmodule SoulMemWeb.Operations do
  @moduledoc """
  The operations of the endpoint, shared by the channel (`SoulMemWeb.Socket`)
  and the HTTP API (`SoulMemWeb.Router`): validate a decoded JSON payload,
  call the runtime's façade (`SoulMem`; never the NIF) and render the result
  as JSON-ready maps.

  Operations (the channel event names): `message`, `recall`, `turn` (push,
  recall and the character's LLM reply: `SoulMem.turn/3`), `history` (the
  visible window and summary), `graph` (the neighbourhood of some notes),
  `feedback`, `control`, `notes` (a page of the notes, searched), `note:get`,
  `note:put`, `note:delete`, `export` (also as SillyTavern World Info or
  card), `import`. The
  streamed `chat` turn runs outside (`chat_args/1` checks its payload):
  the channel and the HTTP API stream its events. A payload with a
  wrong shape is refused before the runtime is called, so nothing changes.
  """

  require Logger

  alias SoulMemWeb.Error

  @type result :: {:ok, map()} | {:error, Error.t()}

  @operations ~w(message recall turn history graph feedback control notes note:get note:put note:delete export import)
  @max_graph_ids 50
  @tasks %{
    "consolidate" => :consolidate,
    "persist" => :persist,
    "forget" => :forget,
    "summarize_pending" => :summarize_pending
  }

  @doc "The operation names."
  @spec names() :: [String.t()]
  def names, do: @operations

  @doc """
  Returns the running character, starting it when needed with its
  configured start options (`config :soul_mem_web, characters: %{id =>
  opts}`; a new demo character is seeded with its graph by
  `SoulMem.Characters`).
  """
  @spec ensure_character(String.t()) :: {:ok, pid()} | {:error, Error.t()}
  def ensure_character(character_id) do
    case SoulMem.ensure_started(character_id, start_opts(character_id)) do
      {:ok, pid} -> {:ok, pid}
      {:error, reason} -> {:error, Error.from(reason)}
    end
  end

  @doc """
  The start options of `character_id` (see `ensure_character/1`): from
  `config :soul_mem_web, :characters`, else `[]`.
  """
  @spec start_opts(String.t()) :: keyword()
  def start_opts(character_id) do
    configured = Application.get_env(:soul_mem_web, :characters, %{})

    Map.get(configured, character_id, [])
  end

  @doc """
  Runs operation `name` on `character_id` with a decoded JSON `payload`.
  The character is started first when it does not run.
  """
  @spec run(String.t(), String.t(), term()) :: result()
  # An import replaces the character's store: it must not be running, so it
  # is not started first.
  def run(character_id, "import", payload), do: "import" |> op(character_id, payload) |> wrap()

  def run(character_id, name, payload) when name in @operations do
    with {:ok, _pid} <- ensure_character(character_id) do
      name |> op(character_id, payload) |> wrap()
    end
  end

  def run(_character_id, _name, _payload), do: {:error, Error.new(:unknown_event)}

  ## Operations

  # With `speaker`, the line is pushed as that speaker's (`SoulMem.Scene`);
  # with `scene`, into the windows of every character present as well.
  defp op("message", id, payload) do
    with {:ok, p} <-
           shape(payload,
             required: ["role", "text"],
             optional: ["tag", "speaker", "scene", "scene_tokens"]
           ),
         {:ok, message} <- message(p),
         :ok <- bool_or_nil(p["tag"], "tag"),
         :ok <- string_or_nil(p["speaker"], "speaker"),
         {:ok, others} <- scene(id, p),
         {:ok, witnessed} <- say(id, others, Map.put(message, :speaker, p["speaker"])),
         :ok <- if(p["tag"] == true, do: SoulMem.tag(id), else: :ok) do
      {:ok, Map.put(witnessed, "ok", true)}
    end
  end

  defp op("recall", id, payload) do
    with {:ok, p} <- shape(payload, optional: ["text", "queries", "messages", "options"]),
         {:ok, request} <- recall_request(p),
         {:ok, config} <- map_or_nil(p["options"], "options"),
         {:ok, result} <- SoulMem.recall(id, request, config: config || %{}) do
      {:ok, render_recall(result)}
    end
  end

  # The whole turn: the user's message, the recall for it and the character's
  # reply from the LLM (kept in the window). Without an LLM answer the turn
  # still recalls and says why in `llm_error`; the message is kept.
  defp op("turn", id, payload) do
    with {:ok, p} <-
           shape(payload,
             required: ["text"],
             optional: ["partner", "reply", "scene", "scene_tokens"]
           ),
         :ok <- if(is_binary(p["text"]), do: :ok, else: {:error, Error.new(:invalid_text)}),
         :ok <- string_or_nil(p["partner"], "partner"),
         :ok <- bool_or_nil(p["reply"], "reply"),
         {:ok, others} <- scene(id, p),
         llm = if(p["reply"] == false, do: false, else: []),
         {:ok, turn} <-
           SoulMem.turn(id, p["text"], partner: p["partner"], llm: llm, scene: others) do
      {:ok,
       turn.recall
       |> render_recall()
       |> Map.put("reply", turn.reply)
       |> Map.put("llm_error", llm_error(id, turn.llm_error))}
    end
  end

  defp op("history", id, payload) do
    with {:ok, _p} <- shape(payload, []),
         {:ok, history} <- SoulMem.history(id) do
      {:ok,
       %{
         "messages" => Enum.map(history.messages, &json_safe/1),
         "summary" => history.summary
       }}
    end
  end

  defp op("graph", id, payload) do
    with {:ok, p} <- shape(payload, required: ["ids"], optional: ["hops"]),
         :ok <- graph_ids(p["ids"]),
         {:ok, hops} <- hops(p["hops"]),
         {:ok, n} <- SoulMem.neighbourhood(id, p["ids"], hops: hops) do
      {:ok,
       %{
         "nodes" => Enum.map(n.notes, &json_safe/1),
         "links" => Enum.map(n.links, &json_safe/1)
       }}
    end
  end

  defp op("feedback", id, payload) do
    with {:ok, p} <- shape(payload, required: ["note_id", "value"]),
         :ok <- SoulMem.feedback(id, p["note_id"], p["value"]) do
      {:ok, %{"ok" => true}}
    end
  end

  defp op("control", id, payload) do
    with {:ok, p} <- shape(payload, required: ["task"]),
         {:ok, task} <- fetch_task(p["task"]),
         :ok <- SoulMem.force(id, task) do
      {:ok, %{"ok" => true, "task" => p["task"], "started" => true}}
    end
  end

  defp op("note:get", id, payload) do
    with {:ok, p} <- shape(payload, required: ["id"]),
         :ok <- note_id(p["id"]),
         {:ok, note} <- SoulMem.get_note(id, p["id"]) do
      {:ok, %{"note" => note}}
    end
  end

  defp op("note:put", id, payload) do
    with {:ok, p} <- shape(payload, required: ["note"]),
         {:ok, note} <- map_or_nil(p["note"], "note"),
         :ok <- note_id(note && note["id"]),
         {:ok, stored} <- SoulMem.put_note(id, note) do
      {:ok, %{"ok" => true, "note" => stored}}
    end
  end

  # One page of the notes, searched by text and kind.
  defp op("notes", id, payload) do
    with {:ok, p} <- shape(payload || %{}, optional: ["query", "kind", "page", "per_page"]),
         {:ok, listing} <- SoulMem.notes(id, p) do
      {:ok, json_safe(listing)}
    end
  end

  defp op("note:delete", id, payload) do
    with {:ok, p} <- shape(payload, required: ["id"]),
         :ok <- note_id(p["id"]),
         {:ok, deleted} <- SoulMem.delete_note(id, p["id"]) do
      {:ok, %{"ok" => true, "id" => deleted.id, "links_removed" => deleted.links_removed}}
    end
  end

  # `format`: the export document (default), or the semantic memories for
  # SillyTavern as a World Info file (`world_info`) or a V2 card (`card`).
  defp op("export", id, payload) do
    with {:ok, p} <- shape(payload || %{}, optional: ["format"]),
         {:ok, format} <- export_format(p["format"]),
         {:ok, exported} <- SoulMem.export(id, format) do
      {:ok, exported}
    end
  end

  # `document` is an export (`export`); with `replace: true` a running
  # character is stopped and its store replaced.
  defp op("import", id, payload) do
    with {:ok, p} <- shape(payload, required: ["document"], optional: ["replace"]),
         {:ok, document} <- map_or_nil(p["document"], "document"),
         :ok <-
           if(document,
             do: :ok,
             else: {:error, Error.new(:invalid_payload, "document is required")}
           ),
         :ok <- bool_or_nil(p["replace"], "replace"),
         replace = p["replace"] == true,
         :ok <- if(replace, do: stop_quietly(id), else: :ok),
         {:ok, _pid} <-
           SoulMem.import(
             id,
             document,
             replace: replace,
             start: Keyword.delete(start_opts(id), :graph)
           ) do
      {:ok, %{"ok" => true, "character" => id}}
    end
  end

  defp stop_quietly(id) do
    SoulMem.stop(id)
    :ok
  end

  defp graph_ids(ids) when is_list(ids) and length(ids) <= @max_graph_ids do
    if Enum.all?(ids, &(is_binary(&1) and byte_size(&1) <= 256)),
      do: :ok,
      else: {:error, Error.new(:invalid_payload, "ids must be note ids (strings)")}
  end

  defp graph_ids(_ids),
    do: {:error, Error.new(:invalid_payload, "ids must be a list of at most #{@max_graph_ids}")}

  defp hops(nil), do: {:ok, 1}
  defp hops(h) when h in [0, 1, 2], do: {:ok, h}
  defp hops(_), do: {:error, Error.new(:invalid_payload, "hops must be 0, 1 or 2")}

  @doc """
  Checks a `chat` payload of `character_id` (`{text, partner?, scene?,
  scene_tokens?}`): `{:ok, text, opts}` for `SoulMem.start_turn/3`, or the
  error to answer with (nothing runs). The other characters of a scene are
  authorized by their own tokens and started.
  """
  @spec chat_args(String.t(), term()) :: {:ok, String.t(), keyword()} | {:error, Error.t()}
  def chat_args(character_id, payload) do
    with {:ok, p} <-
           shape(payload, required: ["text"], optional: ["partner", "scene", "scene_tokens"]),
         :ok <- if(is_binary(p["text"]), do: :ok, else: {:error, Error.new(:invalid_text)}),
         :ok <- if(String.trim(p["text"]) != "", do: :ok, else: {:error, Error.new(:empty_text)}),
         :ok <- string_or_nil(p["partner"], "partner"),
         {:ok, others} <- scene(character_id, p) do
      {:ok, p["text"], partner: p["partner"], scene: others}
    end
  end

  # A group chat: `scene` lists the characters present (the character of the
  # request is always one); every other one must be opened by its own token
  # in `scene_tokens` (a token opens one character only), and is started.
  defp scene(id, p) do
    case {p["scene"], p["scene_tokens"] || %{}} do
      {nil, tokens} when tokens == %{} ->
        {:ok, []}

      {nil, _tokens} ->
        {:error, Error.new(:invalid_payload, "scene_tokens needs a scene")}

      {scene, tokens} when is_list(scene) and is_map(tokens) ->
        if Enum.all?(scene, &is_binary/1),
          do: scene_members(scene |> Enum.uniq() |> List.delete(id), tokens),
          else: {:error, Error.new(:invalid_payload, "scene must be a list of character ids")}

      _ ->
        {:error,
         Error.new(
           :invalid_payload,
           "scene must be a list of character ids, scene_tokens an object"
         )}
    end
  end

  defp scene_members(others, tokens) do
    cond do
      length(others) + 1 > SoulMem.Scene.max_present() ->
        {:error,
         Error.new(:invalid_payload, "a scene holds at most #{SoulMem.Scene.max_present()}")}

      (refused = Enum.reject(others, &SoulMemWeb.Tokens.verify(&1, tokens[&1]))) != [] ->
        {:error,
         Error.new(
           :forbidden,
           "scene_tokens has no token that opens #{Enum.map_join(refused, ", ", &inspect/1)}"
         )}

      true ->
        Enum.reduce_while(others, {:ok, others}, fn other, acc ->
          case ensure_character(other) do
            {:ok, _pid} -> {:cont, acc}
            {:error, _} = error -> {:halt, error}
          end
        end)
    end
  end

  # The character's own line first: when it is refused, no one else hears it.
  # One time for everyone present.
  defp say(id, others, line) do
    line = %{
      text: line.text,
      role: String.to_existing_atom(line.role),
      speaker: line.speaker,
      at: DateTime.utc_now()
    }

    with :ok <- SoulMem.push(id, SoulMem.Scene.as_witnessed(id, line)),
         {:ok, %{pushed: pushed, failed: failed}} <- SoulMem.witness(others, line) do
      failed = Map.new(failed, fn {other, reason} -> {other, Error.from(reason).code} end)

      {:ok, if(others == [], do: %{}, else: %{"witnessed" => [id | pushed], "failed" => failed})}
    end
  end

  @doc """
  The event a streamed reply step is sent as, on the channel and over
  server-sent events alike: `{"reply_delta", %{"text"}}`, `{"reply_done",
  %{"text"}}`, `{"reply_error", %{"error"}}`, or `nil` for a step that is not
  a reply event (`SoulMem.start_turn/3`'s events).
  """
  @spec reply_event(String.t(), term()) :: {String.t(), map()} | nil
  def reply_event(_id, {:reply_delta, text}), do: {"reply_delta", %{"text" => text}}
  def reply_event(_id, {:reply, text}), do: {"reply_done", %{"text" => text}}

  def reply_event(id, {:reply_failed, reason}),
    do: {"reply_error", %{"error" => reply_error(id, reason)}}

  def reply_event(_id, _other), do: nil

  @doc """
  The error a failed reply of a chat turn is shown with: `llm_not_configured`
  (no LLM set up: says how to get one) or `llm_unavailable`.
  """
  @spec reply_error(String.t(), term()) :: map()
  def reply_error(_id, :not_configured) do
    %{
      "code" => "llm_not_configured",
      "message" =>
        "no LLM is configured: set SOUL_MEM_LLM_BASE_URL to an OpenAI-compatible server, " <>
          "or start one with scripts/run.sh --llm"
    }
  end

  def reply_error(id, reason), do: llm_error(id, reason)

  defp llm_error(_id, nil), do: nil

  defp llm_error(id, reason) do
    Logger.warning("soul_mem_web: #{id}'s reply failed: #{inspect(reason, limit: 10)}")
    %{"code" => "llm_unavailable", "message" => "the character's LLM did not answer"}
  end

  defp wrap({:ok, %{} = map}), do: {:ok, map}
  defp wrap({:error, reason}), do: {:error, Error.from(reason)}

  ## Rendering

  @doc """
  Renders a `SoulMem.recall/3` result as JSON-ready maps: `memories`,
  `actions` and `core` (each item with id, kind, content, score, stage and
  seeds: why it was recalled), `window` (role, text, at), `summary`, the
  rendered `context` and `embedding` (`"model"`, `"hash"`, or `"partial"`
  while the model still embeds the graph and recall uses the lexical index).
  """
  @spec render_recall(map()) :: map()
  def render_recall(result) do
    %{
      "memories" => Enum.map(Map.get(result, :memories, []), &json_safe/1),
      "actions" => Enum.map(Map.get(result, :actions, []), &json_safe/1),
      "core" => Enum.map(Map.get(result, :core, []), &json_safe/1),
      "window" => Enum.map(Map.get(result, :window, []), &json_safe/1),
      "summary" => Map.get(result, :summary) || "",
      "context" => Map.get(result, :context) || "",
      "embedding" => to_string(Map.get(result, :embedding, :none))
    }
  end

  @doc """
  The payload a character event (`{:soul_mem, id, event, payload}`) is
  pushed with, on the channel and the data plane alike: `summary_updated`
  as `%{"summary"}`, a map as its JSON-ready self, anything else as
  `%{"result"}`.
  """
  @spec event_body(atom(), term()) :: map()
  def event_body(:summary_updated, summary) when is_binary(summary), do: %{"summary" => summary}
  def event_body(_event, %{} = map), do: json_safe(map)
  def event_body(_event, other), do: %{"result" => json_safe(other)}

  @doc """
  Makes a term encodable as JSON: maps get string keys, atoms become
  strings, `DateTime`s ISO 8601, tuples lists; pids, refs and functions their
  inspected text.
  """
  @spec json_safe(term()) :: term()
  def json_safe(%DateTime{} = dt), do: DateTime.to_iso8601(dt)
  def json_safe(%NaiveDateTime{} = dt), do: NaiveDateTime.to_iso8601(dt)
  def json_safe(%_{} = struct), do: struct |> Map.from_struct() |> json_safe()

  def json_safe(map) when is_map(map),
    do: Map.new(map, fn {k, v} -> {key(k), json_safe(v)} end)

  def json_safe(list) when is_list(list), do: Enum.map(list, &json_safe/1)
  def json_safe(tuple) when is_tuple(tuple), do: tuple |> Tuple.to_list() |> json_safe()
  def json_safe(value) when is_nil(value) or is_boolean(value) or is_number(value), do: value
  def json_safe(atom) when is_atom(atom), do: Atom.to_string(atom)

  def json_safe(binary) when is_binary(binary),
    do: if(String.valid?(binary), do: binary, else: Base.encode64(binary))

  def json_safe(other), do: inspect(other)

  defp key(k) when is_binary(k), do: k
  defp key(k) when is_atom(k), do: Atom.to_string(k)
  defp key(k), do: inspect(k)

  ## Validation

  # A JSON object with exactly the `required` keys and some `optional` ones.
  defp shape(payload, opts) when is_map(payload) do
    required = Keyword.get(opts, :required, [])
    allowed = required ++ Keyword.get(opts, :optional, [])

    cond do
      (missing = Enum.reject(required, &Map.has_key?(payload, &1))) != [] ->
        {:error, Error.new(:invalid_payload, "missing field(s): #{Enum.join(missing, ", ")}")}

      (unknown = Map.keys(payload) -- allowed) != [] ->
        {:error,
         Error.new(
           :invalid_payload,
           "unknown field(s): #{Enum.join(Enum.map(unknown, &to_string/1), ", ")}"
         )}

      true ->
        {:ok, payload}
    end
  end

  defp shape(_payload, _opts),
    do: {:error, Error.new(:invalid_payload, "the payload must be a JSON object")}

  defp message(%{"role" => role, "text" => text})
       when role in ["user", "assistant"] and is_binary(text),
       do: {:ok, %{role: role, text: text}}

  defp message(%{"role" => role}) when role not in ["user", "assistant"],
    do: {:error, Error.new(:invalid_role)}

  defp message(_), do: {:error, Error.new(:invalid_message)}

  defp recall_request(p) do
    with {:ok, messages} <- messages(p["messages"]),
         :ok <- string_or_nil(p["text"], "text"),
         :ok <- queries(p["queries"]) do
      request =
        %{text: p["text"], queries: p["queries"], messages: messages}
        |> Enum.reject(fn {_k, v} -> v == nil end)
        |> Map.new()

      {:ok, request}
    end
  end

  defp messages(nil), do: {:ok, nil}

  defp messages(list) when is_list(list) and length(list) <= 64 do
    Enum.reduce_while(list, {:ok, []}, fn m, {:ok, acc} ->
      with {:ok, m} <- shape(m, required: ["role", "text"]),
           {:ok, message} <- message(m) do
        {:cont, {:ok, acc ++ [message]}}
      else
        error -> {:halt, error}
      end
    end)
  end

  defp messages(_),
    do: {:error, Error.new(:invalid_messages, "messages must be a list of at most 64 messages")}

  defp queries(nil), do: :ok

  defp queries(list) when is_list(list) and length(list) <= 64 do
    if Enum.all?(list, &is_map/1), do: :ok, else: {:error, Error.new(:invalid_queries)}
  end

  defp queries(_),
    do: {:error, Error.new(:invalid_queries, "queries must be a list of at most 64 objects")}

  defp fetch_task(task) do
    case Map.fetch(@tasks, task) do
      {:ok, atom} ->
        {:ok, atom}

      :error ->
        {:error,
         Error.new(
           :invalid_payload,
           "task must be one of: #{@tasks |> Map.keys() |> Enum.sort() |> Enum.join(", ")}"
         )}
    end
  end

  defp export_format(nil), do: {:ok, :soulmem}
  defp export_format("soulmem"), do: {:ok, :soulmem}
  defp export_format("world_info"), do: {:ok, :world_info}
  defp export_format("card"), do: {:ok, :card}

  defp export_format(_),
    do: {:error, Error.new(:invalid_payload, "format must be soulmem, world_info or card")}

  defp note_id(id) when is_binary(id) and id != "" and byte_size(id) <= 512, do: :ok
  defp note_id(_), do: {:error, Error.new(:invalid_note_id)}

  defp string_or_nil(value, _name) when is_nil(value) or is_binary(value), do: :ok

  defp string_or_nil(_value, name),
    do: {:error, Error.new(:invalid_payload, "#{name} must be a string")}

  defp bool_or_nil(value, _name) when is_nil(value) or is_boolean(value), do: :ok

  defp bool_or_nil(_value, name),
    do: {:error, Error.new(:invalid_payload, "#{name} must be true or false")}

  defp map_or_nil(value, _name) when is_nil(value) or is_map(value), do: {:ok, value}

  defp map_or_nil(_value, name),
    do: {:error, Error.new(:invalid_payload, "#{name} must be a JSON object")}
end

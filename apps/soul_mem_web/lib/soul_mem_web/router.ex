defmodule SoulMemWeb.Router do
  @moduledoc """
  The yaws appmod mounted at `/`: every HTTP request of the endpoint comes
  through `out/1`.

    * `GET /` and `/assets/*` — the chat page (`priv/static`, phoenix.js
      from the npm install);
    * `GET /health` — `SoulMemWeb.Health.check/0` as JSON;
    * `GET /socket/websocket?token=…&vsn=2.0.0` — the Phoenix channel socket
      (`SoulMemWeb.Socket`); a missing or unknown token is refused (403)
      before the upgrade;
    * `/api/characters/:id/…` — the JSON API (`SoulMemWeb.Operations`),
      with `Authorization: Bearer <token>` for that character:
      `POST messages | recall | turn | feedback | control`, `POST import` (body: an
      export; `?replace=true` stops the character and replaces its store),
      `GET notes?query=&kind=&page=&per_page=`, `GET | PUT | DELETE
      notes/:note_id`, `GET export[?format=world_info|card]`, `GET history`;
    * `/api/characters` — with an operator token (`SoulMemWeb.Management`):
      `GET` lists the characters, `POST` creates one (empty, Graph JSON,
      export or card; answers its first token), `DELETE /api/characters/:id`
      deletes one after an export backup;
    * `/api/operator/tokens` — with an operator token (`SoulMemWeb.Tokens`):
      `GET` lists characters and their token counts, `POST tokens/:id`
      creates a token (shown once), `DELETE tokens/:id` revokes them all.

  Errors are `{"error": {"code", "message"}}` with a 4xx/5xx status; a crash
  is logged and answered with a generic 500 (`crashmsg/3` replaces yaws'
  stack-trace page too).
  """

  require Logger
  require SoulMemWeb.Yaws

  alias SoulMemWeb.{Error, Management, OpenAI, Operations, Tokens, Yaws}

  @json ~c"application/json; charset=utf-8"

  @api_posts %{
    "messages" => "message",
    "recall" => "recall",
    "turn" => "turn",
    "feedback" => "feedback",
    "control" => "control",
    "import" => "import",
    "chat" => :chat
  }

  @doc """
  yaws appmod callback: answers one HTTP request. yaws reads at most
  `body_chunk_bytes` of a body before calling it; a longer (or chunked) body
  arrives in pieces (`{:partial, data}`), read on only once the request's
  route, token and rate are checked (`admit/1`), so an unauthenticated
  client never makes the server hold more than one piece.
  """
  @spec out(tuple()) :: list() | tuple()
  def out(arg) do
    case Yaws.arg(arg, :clidata) do
      {:partial, data} ->
        piece(arg, data)

      _ ->
        case whole_body(arg) do
          {:reply, response} -> response
          arg -> request(arg)
        end
    end
  catch
    kind, reason ->
      Logger.error(
        "soul_mem_web: request failed: " <> Exception.format(kind, reason, __STACKTRACE__)
      )

      json_error(Error.new(:internal))
  end

  @doc "yaws errormod_crash callback: a generic JSON 500, never a stack trace."
  @spec crashmsg(tuple(), tuple(), term()) :: {:content, charlist(), binary()}
  def crashmsg(_arg, _sconf, message) do
    Logger.error("soul_mem_web: yaws reported a crash: #{inspect(message, limit: 50)}")
    {:content, @json, SoulMem.JSON.encode!(Error.body(Error.new(:internal)))}
  end

  @malformed_path ~c"/.malformed-path"

  @doc """
  yaws arg_rewrite callback, run before yaws decodes the path: a path it
  cannot decode (`%zz`, `%00`) would get yaws' HTML 400 page, so it is
  pointed at a route that answers the JSON 400 instead.
  """
  @spec arg_rewrite(tuple()) :: tuple()
  def arg_rewrite(arg) do
    req = Yaws.arg(arg, :req)

    with {:abs_path, raw} <- Yaws.http_request(req, :path),
         {:EXIT, _} <- catch_decode(raw) do
      Yaws.arg(arg, req: Yaws.http_request(req, path: {:abs_path, @malformed_path}))
    else
      _ -> arg
    end
  end

  defp catch_decode(raw) do
    :yaws_api.url_decode_q_split(raw)
  catch
    kind, reason -> {:EXIT, {kind, reason}}
  end

  @doc "yaws errormod_404 callback: a JSON 404."
  @spec out404(tuple(), tuple(), tuple()) :: list()
  def out404(_arg, _gconf, _sconf), do: json_error(Error.new(:not_found))

  ## Bodies

  # The last piece of a body read in pieces: the request goes on with the
  # whole body as its clidata, marked admitted (its rates were charged then).
  defp whole_body(arg) do
    case Yaws.arg(arg, :state) do
      {:body, parts, size, limit} ->
        data = Yaws.arg(arg, :clidata)

        if size + byte_size(data) > limit do
          {:reply, json_error(too_large(limit))}
        else
          body = IO.iodata_to_binary(Enum.reverse([data | parts]))
          Yaws.arg(arg, clidata: body, state: :admitted)
        end

      {:discard, _size, error} ->
        {:reply, json_error(error)}

      _ ->
        arg
    end
  end

  defp piece(arg, data) do
    admitted =
      case Yaws.arg(arg, :state) do
        {:body, parts, size, limit} -> {:ok, parts, size, limit}
        {:discard, _size, _error} = discarding -> discarding
        _ -> admit(arg)
      end

    case admitted do
      {:ok, parts, size, limit} ->
        size = size + byte_size(data)

        if size > limit,
          do: discard(size, too_large(limit)),
          else: {:get_more, :undefined, {:body, [data | parts], size, limit}}

      {:discard, size, error} ->
        discard(size + byte_size(data), error)

      {:error, %Error{} = error} ->
        json_error(error) |> closing()

      :no_body ->
        # A route that takes no body answers now; the unread body ends the
        # connection.
        arg |> request() |> closing()
    end
  end

  # An authorized client over the limit gets its 413 after its body, read
  # and dropped piece by piece, so it sees the answer rather than a reset
  # connection; past @max_discard bytes the connection is closed instead.
  @max_discard 64 * 1024 * 1024

  defp discard(size, error) when size > @max_discard, do: json_error(error) |> closing()
  defp discard(size, error), do: {:get_more, :undefined, {:discard, size, error}}

  defp too_large(limit), do: Error.new(:too_large, "the body exceeds #{limit} bytes")

  # Before reading on: the route takes a body, the client and its token may
  # send it. Returns the route's body limit, or a body to drop when its
  # declared length is over it.
  defp admit(arg) do
    with :ok <- rate(:ip, peer(arg)) do
      case {method(arg), segments(arg)} do
        {method, ["api", "characters", id, action | rest]} ->
          with {:ok, limit} <- body_limit(method, [action | rest]),
               {:ok, id} <- character_id(id),
               {:ok, token} <- authorize(arg, id),
               :ok <- rate(:token, token),
               do: read_on(arg, limit)

        {:POST, ["api", "characters"]} ->
          with {:ok, token} <- authorize_operator(arg),
               :ok <- rate(:token, token),
               do: read_on(arg, limit(:max_import_bytes))

        {:POST, ["v1", "chat", "completions"]} ->
          # The character is named in the body: only a known token may send one.
          with {:ok, token} <- known_token(arg),
               :ok <- rate(:token, token),
               do: read_on(arg, limit(:max_body_bytes))

        _ ->
          :no_body
      end
    end
  end

  # An admitted body is read on up to `limit`, or dropped when its declared
  # length is over it.
  defp read_on(arg, limit) do
    case declared_length(arg, limit) do
      :ok -> {:ok, [], 0, limit}
      {:error, error} -> {:discard, 0, error}
    end
  end

  defp known_token(arg) do
    token = bearer_token(arg)

    if Tokens.known?(token),
      do: {:ok, token},
      else: {:error, Error.new(:unauthorized, "send Authorization: Bearer <character token>")}
  end

  defp body_limit(:POST, ["import"]), do: {:ok, limit(:max_import_bytes)}

  defp body_limit(:POST, [action]) when is_map_key(@api_posts, action),
    do: {:ok, limit(:max_body_bytes)}

  defp body_limit(:PUT, ["notes", _]), do: {:ok, limit(:max_body_bytes)}
  defp body_limit(_method, _rest), do: :no_body

  defp declared_length(arg, limit) do
    case content_length(arg) do
      length when is_integer(length) and length > limit ->
        {:error, too_large(limit)}

      _ ->
        :ok
    end
  end

  defp closing(response) when is_list(response),
    do: [{:header, {:connection, ~c"close"}} | response]

  defp closing(response), do: response

  ## Routes

  defp request(arg) do
    case charge(arg, :ip, peer(arg)) do
      :ok -> route(method(arg), segments(arg), arg)
      {:error, error} -> json_error(error)
    end
  end

  defp route(_method, [".malformed-path"], _arg),
    do: json_error(Error.new(:invalid_path))

  defp route(:GET, [], _arg), do: static(["index.html"])
  defp route(:GET, ["assets" | file], _arg), do: static(file)

  defp route(:GET, ["health"], _arg),
    do: json(200, Operations.json_safe(SoulMemWeb.Health.check()))

  defp route(:GET, ["socket", "websocket"], arg), do: websocket(arg)

  # The OpenAI-compatible endpoint (SoulMemWeb.OpenAI): its own error shape.
  defp route(:GET, ["v1", "models"], arg),
    do: arg |> bearer_token() |> OpenAI.models() |> open_ai()

  defp route(:POST, ["v1", "chat", "completions"], arg) do
    with {:ok, token} <- known_token(arg),
         :ok <- charge(arg, :token, token),
         {:ok, body} <- body(arg, limit(:max_body_bytes)) do
      arg |> Yaws.arg(:pid) |> OpenAI.complete(token, body) |> open_ai()
    else
      {:error, %Error{} = error} -> error |> OpenAI.from_error() |> open_ai()
    end
  end

  defp route(_method, ["v1" | _], _arg),
    do: Error.new(:not_found) |> OpenAI.from_error() |> open_ai()

  # Character management (SoulMemWeb.Management): an operator token.
  defp route(method, ["api", "characters"], arg) when method in [:GET, :POST] do
    with {:ok, token} <- authorize_operator(arg),
         :ok <- charge(arg, :token, token),
         {:ok, body} <- if(method == :GET, do: Management.list(), else: create(arg)) do
      json(if(method == :POST, do: 201, else: 200), body)
    else
      {:error, %Error{} = error} -> json_error(error)
    end
  end

  defp route(:DELETE, ["api", "characters", id], arg) do
    with {:ok, token} <- authorize_operator(arg),
         :ok <- charge(arg, :token, token),
         {:ok, id} <- character_id(id) do
      id |> Management.delete() |> respond()
    else
      {:error, %Error{} = error} -> json_error(error)
    end
  end

  defp route(_method, ["api", "characters"], _arg),
    do: json_error(Error.new(:method_not_allowed))

  defp route(method, ["api", "characters", id | rest], arg) do
    with {:ok, id} <- character_id(id),
         {:ok, token} <- authorize(arg, id),
         :ok <- charge(arg, :token, token),
         {:ok, op, payload} <- api(method, rest, arg) do
      case op do
        # Which character the token opens, without starting it (the page's check).
        :token -> json(200, %{"character" => id})
        :chat -> chat(arg, id, payload)
        _ -> id |> Operations.run(op, payload) |> respond()
      end
    else
      {:error, %Error{} = error} -> json_error(error)
    end
  end

  defp route(method, ["api", "operator" | rest], arg) do
    with {:ok, token} <- authorize_operator(arg),
         :ok <- rate(:token, token) do
      operator(method, rest)
    else
      {:error, %Error{} = error} -> json_error(error)
    end
  end

  defp route(_method, path, _arg) when path in [[], ["health"], ["socket", "websocket"]],
    do: json_error(Error.new(:method_not_allowed))

  defp route(_method, _path, _arg), do: json_error(Error.new(:not_found))

  # A chat turn: server-sent events when the client asks for them, else the
  # whole turn as one JSON answer (the `turn` operation).
  defp chat(arg, id, payload) do
    if String.contains?(
         to_string(Yaws.headers(Yaws.arg(arg, :headers), :accept)),
         "text/event-stream"
       ) do
      case SoulMemWeb.ChatStream.start(Yaws.arg(arg, :pid), id, payload) do
        {:ok, _producer} ->
          [
            {:status, 200},
            {:header, {:cache_control, "no-store"}},
            {:header, {~c"X-Content-Type-Options", "nosniff"}},
            {:streamcontent, "text/event-stream", ""}
          ]

        {:error, error} ->
          json_error(error)
      end
    else
      id |> Operations.run("turn", payload) |> respond()
    end
  end

  defp open_ai({:json, status, body}), do: json(status, body)

  defp open_ai({:stream, _producer}) do
    [
      {:status, 200},
      {:header, {:cache_control, "no-store"}},
      {:header, {~c"X-Content-Type-Options", "nosniff"}},
      {:streamcontent, "text/event-stream", ""}
    ]
  end

  # A JSON body names its source; any other body is a card file.
  defp create(arg) do
    if json_body?(arg) do
      with {:ok, payload} <- body(arg, limit(:max_import_bytes)),
           do: Management.create(payload, "", query(arg))
    else
      with :ok <- declared_length(arg, limit(:max_import_bytes)) do
        data = Yaws.arg(arg, :clidata)
        Management.create(nil, if(is_binary(data), do: data, else: ""), query(arg))
      end
    end
  end

  # Without a content type (browsers send none for .charx files) the body
  # says what it is: a PNG or a zip is a card file.
  defp json_body?(arg) do
    case Yaws.headers(Yaws.arg(arg, :headers), :content_type) do
      type when is_list(type) or is_binary(type) ->
        type |> to_string() |> String.downcase() |> String.starts_with?("application/json")

      _ ->
        not match?(<<0x89, "PNG", _::binary>>, Yaws.arg(arg, :clidata)) and
          not match?(<<"PK", 3, 4, _::binary>>, Yaws.arg(arg, :clidata))
    end
  end

  defp respond({:ok, body}), do: json(200, body)
  defp respond({:error, error}), do: json_error(error)

  defp api(:POST, [action], arg) when is_map_key(@api_posts, action) do
    op = Map.fetch!(@api_posts, action)
    limit = if op == "import", do: limit(:max_import_bytes), else: limit(:max_body_bytes)

    with {:ok, payload} <- body(arg, limit) do
      if op == "import",
        do: {:ok, op, %{"document" => payload, "replace" => query(arg)["replace"] == "true"}},
        else: {:ok, op, payload}
    end
  end

  defp api(:GET, ["notes", note_id], _arg), do: {:ok, "note:get", %{"id" => note_id}}

  defp api(:PUT, ["notes", note_id], arg) do
    case body(arg, limit(:max_body_bytes)) do
      {:ok, %{"id" => other}} when other != note_id ->
        {:error, Error.new(:invalid_payload, "the note's id does not match the URL")}

      {:ok, %{} = note} ->
        {:ok, "note:put", %{"note" => Map.put(note, "id", note_id)}}

      {:ok, _} ->
        {:error, Error.new(:invalid_payload, "the body must be a note object")}

      error ->
        error
    end
  end

  defp api(:GET, ["export"], arg), do: {:ok, "export", Map.take(query(arg), ["format"])}

  # Page numbers stay text here: the listing reads them and names a bad one.
  defp api(:GET, ["notes"], arg),
    do: {:ok, "notes", arg |> query() |> Map.take(["query", "kind", "page", "per_page"])}

  defp api(:DELETE, ["notes", note_id], _arg), do: {:ok, "note:delete", %{"id" => note_id}}
  defp api(:GET, ["history"], _arg), do: {:ok, "history", %{}}
  defp api(:GET, ["token"], _arg), do: {:ok, :token, %{}}

  defp api(_method, [action], _arg) when is_map_key(@api_posts, action) or action == "export",
    do: {:error, Error.new(:method_not_allowed)}

  defp api(_method, ["notes", _], _arg), do: {:error, Error.new(:method_not_allowed)}
  defp api(_method, _rest, _arg), do: {:error, Error.new(:not_found)}

  ## Operator API (the page's operator view)

  defp operator(:GET, ["tokens"]) do
    characters = for {id, n} <- Tokens.counts(), do: %{"id" => id, "tokens" => n}
    json(200, %{"characters" => characters})
  end

  defp operator(:POST, ["tokens", id]) do
    case Tokens.create(id) do
      {:ok, token} -> json(200, %{"character" => id, "token" => token})
      {:error, reason} -> json_error(Error.from(reason))
    end
  end

  # Revocation ends the character's joined channels at once (SoulMemWeb.Socket).
  defp operator(:DELETE, ["tokens", id]) do
    case Tokens.revoke(id) do
      :ok -> json(200, %{"ok" => true, "character" => id})
      {:error, reason} -> json_error(Error.from(reason))
    end
  end

  defp operator(_method, ["tokens" | _]), do: json_error(Error.new(:method_not_allowed))
  defp operator(_method, _rest), do: json_error(Error.new(:not_found))

  defp authorize_operator(arg) do
    token = bearer_token(arg)

    cond do
      token == nil ->
        {:error, Error.new(:unauthorized, "send Authorization: Bearer <operator token>")}

      Tokens.operator?(token) ->
        {:ok, token}

      true ->
        {:error, Error.new(:forbidden, "an operator token is required")}
    end
  end

  ## WebSocket

  defp websocket(arg) do
    token = arg |> query() |> Map.get("token")

    cond do
      not upgrade?(arg) ->
        json_error(Error.new(:invalid_payload, "expected a WebSocket upgrade"))

      not origin_allowed?(header(arg, "origin"), host(arg)) ->
        json_error(Error.new(:forbidden, "this page's origin may not open the socket"), 403)

      not Tokens.known?(token) ->
        json_error(Error.new(:unauthorized, "the socket needs a valid token param"), 403)

      SoulMemWeb.Socket.count(token) >= limit(:max_sockets_per_token) ->
        json_error(Error.new(:too_many_connections))

      true ->
        max = limit(:max_frame_bytes)

        {:websocket, SoulMemWeb.Socket,
         [
           {:callback, {:basic, %{token: token}}},
           {:max_frame_size, max},
           {:max_message_size, max},
           # A client that stops answering pings is dropped (Phoenix clients
           # also send heartbeats every 30 s).
           {:keepalive, true},
           {:keepalive_timeout, 60_000},
           {:keepalive_grace_period, 10_000},
           {:drop_on_timeout, true}
         ]}
    end
  end

  @loopback_hosts ["localhost", "127.0.0.1", "[::1]"]

  @doc """
  Whether a WebSocket upgrade carrying `origin` (the `Origin` header, `nil`
  when absent) to `host` (the `Host` header) may proceed. Browsers always send
  `Origin`; a client without one (the official phoenix client under Node,
  curl, services) is not a web page and passes. A browser page passes when it
  was served by this endpoint under a loopback name (its origin is the
  request's own `http://host`) or its origin is in `config :soul_mem_web,
  :allowed_origins` (`SOUL_MEM_ALLOWED_ORIGINS`, comma-separated, for LAN
  names). Anything else — another site, `null`, a DNS-rebinding name that
  points at 127.0.0.1 — is refused, so a page the user visits cannot drive a
  character with a token it guessed or the demo's.
  """
  @spec origin_allowed?(String.t() | nil, String.t() | nil) :: boolean()
  def origin_allowed?(nil, _host), do: true

  def origin_allowed?(origin, host) do
    origin = origin |> String.trim() |> String.downcase() |> String.trim_trailing("/")
    allowed = Application.get_env(:soul_mem_web, :allowed_origins, [])

    origin in Enum.map(allowed, &String.downcase/1) or same_loopback_origin?(origin, host)
  end

  defp same_loopback_origin?(origin, host) when is_binary(host) do
    host = String.downcase(host)
    name = host |> String.replace(~r/:\d+$/, "")
    name in @loopback_hosts and origin == "http://" <> host
  end

  defp same_loopback_origin?(_origin, _host), do: false

  defp host(arg) do
    case Yaws.arg(arg, :headers) |> Yaws.headers(:host) do
      host when is_list(host) or is_binary(host) -> :erlang.iolist_to_binary(host)
      _ -> nil
    end
  end

  defp upgrade?(arg) do
    case header(arg, "upgrade") do
      nil -> false
      value -> value |> String.downcase() |> String.contains?("websocket")
    end
  end

  ## Requests

  defp method(arg) do
    Yaws.arg(arg, :req) |> Yaws.http_request(:method)
  end

  defp segments(arg) do
    raw =
      case Yaws.arg(arg, :req) |> Yaws.http_request(:path) do
        {:abs_path, path} -> :erlang.iolist_to_binary(path)
        _ -> ""
      end

    raw
    |> String.split("?", parts: 2)
    |> hd()
    |> String.split("/", trim: true)
    |> Enum.map(&URI.decode/1)
  end

  defp query(arg) do
    case Yaws.arg(arg, :querydata) do
      q when is_list(q) or is_binary(q) -> q |> :erlang.iolist_to_binary() |> URI.decode_query()
      _ -> %{}
    end
  rescue
    ArgumentError -> %{}
  end

  defp header(arg, name) do
    headers = Yaws.arg(arg, :headers)

    Enum.find_value(Yaws.headers(headers, :other), fn
      {:http_header, _, key, _, value} ->
        if String.downcase(to_string(key)) == name, do: :erlang.iolist_to_binary(value)

      _ ->
        nil
    end)
  end

  defp character_id(id) do
    if id != "" and byte_size(id) <= 128 and String.valid?(id),
      do: {:ok, id},
      else: {:error, Error.new(:invalid_character)}
  end

  defp bearer_token(arg) do
    case Yaws.headers(Yaws.arg(arg, :headers), :authorization) do
      {_, _, orig} -> bearer(:erlang.iolist_to_binary(orig))
      _ -> nil
    end
  end

  defp authorize(arg, character) do
    token = bearer_token(arg)

    cond do
      token == nil -> {:error, Error.new(:unauthorized, "send Authorization: Bearer <token>")}
      Tokens.verify(character, token) -> {:ok, token}
      Tokens.known?(token) -> {:error, Error.new(:forbidden)}
      true -> {:error, Error.new(:unauthorized, "invalid token")}
    end
  end

  defp bearer(value) do
    case String.split(String.trim(value), " ", parts: 2) do
      [scheme, token] -> if String.downcase(scheme) == "bearer", do: String.trim(token)
      _ -> nil
    end
  end

  defp body(arg, limit) do
    data = Yaws.arg(arg, :clidata)

    with :ok <- declared_length(arg, limit) do
      decode_body(data, limit)
    end
  end

  defp decode_body(data, limit) do
    cond do
      not is_binary(data) or data == "" ->
        {:error, Error.new(:invalid_json, "a JSON body is required")}

      byte_size(data) > limit ->
        {:error, too_large(limit)}

      true ->
        case SoulMem.JSON.decode(data) do
          {:ok, payload} -> {:ok, payload}
          {:error, _} -> {:error, Error.new(:invalid_json)}
        end
    end
  end

  # A client over its limit waits: 429 with Retry-After. Tokens are keyed by
  # their digest, so the limiter's table holds no secret.
  defp rate(:token, token), do: limited(:token, Tokens.digest(token))
  defp rate(kind, key), do: limited(kind, key)

  # One request spends one unit of each rate: a body read in pieces was
  # charged when admit/1 let it in.
  defp charge(arg, kind, key) do
    if Yaws.arg(arg, :state) == :admitted, do: :ok, else: rate(kind, key)
  end

  defp limited(kind, key) do
    case SoulMemWeb.RateLimit.check(kind, key) do
      :ok -> :ok
      {:error, seconds} -> {:error, Error.rate_limited(seconds)}
    end
  end

  defp peer(arg) do
    case Yaws.arg(arg, :client_ip_port) do
      {ip, _port} -> ip
      _ -> :unknown
    end
  end

  defp content_length(arg) do
    case Yaws.headers(Yaws.arg(arg, :headers), :content_length) do
      value when is_list(value) or is_binary(value) ->
        case Integer.parse(:erlang.iolist_to_binary(value)) do
          {n, ""} -> n
          _ -> nil
        end

      _ ->
        nil
    end
  end

  @doc false
  @spec limit(atom()) :: pos_integer()
  def limit(key) do
    defaults = [
      max_body_bytes: 1_048_576,
      max_import_bytes: 16_777_216,
      max_frame_bytes: 1_048_576,
      body_chunk_bytes: 8_192,
      max_connections: 512,
      max_sockets_per_token: 16
    ]

    Application.get_env(:soul_mem_web, key, Keyword.fetch!(defaults, key))
  end

  ## Responses

  defp static(segments) do
    with {:ok, type, path} <- SoulMemWeb.Assets.lookup(segments),
         {:ok, content} <- File.read(path) do
      [
        {:status, 200},
        {:header, {~c"X-Content-Type-Options", "nosniff"}},
        {:header, {:cache_control, "no-cache"}},
        {:content, type, content}
      ]
    else
      _ -> json_error(Error.new(:not_found, "no such asset (run scripts/setup.sh for npm ones)"))
    end
  end

  defp json(status, body) do
    [
      {:status, status},
      {:header, {:cache_control, "no-store"}},
      {:header, {~c"X-Content-Type-Options", "nosniff"}},
      {:content, @json, SoulMem.JSON.encode!(body)}
    ]
  end

  defp json_error(%Error{} = error, status \\ nil) do
    response = json(status || error.status, Error.body(error))

    response =
      if error.retry_after,
        do: [{:header, {~c"Retry-After", Integer.to_string(error.retry_after)}} | response],
        else: response

    # An oversized body may not have been read to its end: the connection
    # cannot be reused.
    if error.code == "too_large",
      do: [{:header, {:connection, ~c"close"}} | response],
      else: response
  end
end

defmodule SoulMemWeb.OpenAI do
  @moduledoc """
  The OpenAI-compatible endpoint any role-play frontend can use:
  `GET /v1/models` lists the characters a token opens, `POST
  /v1/chat/completions` answers a chat (`model` = a character id,
  `Authorization: Bearer <that character's token>`) with the character's
  memory (`SoulMem.complete/3`), as one `chat.completion` or, with
  `"stream": true`, as `chat.completion.chunk` server-sent events ending
  with `data: [DONE]`.

  Errors have OpenAI's shape, `{"error": {"message", "type", "code"}}`: 400
  `invalid_request_error` (a request it cannot take; nothing is stored), 401
  `authentication_error`, 404 `model_not_found` (also for a character the
  token does not open: existence is not revealed), 413, 429, 502
  `upstream_error` (the LLM failed; the user's turn is kept), 503.
  """

  alias SoulMemWeb.{Error, Operations, Tokens}

  @typedoc "What the router sends: a JSON body with its status, or a started event stream."
  @type answer :: {:json, pos_integer(), map()} | {:stream, pid()}

  @doc "The characters `token` opens, as OpenAI models."
  @spec models(String.t() | nil) :: answer()
  def models(token) do
    if Tokens.known?(token) do
      data =
        for character <- Tokens.characters(), Tokens.verify(character, token) do
          %{"id" => character, "object" => "model", "created" => 0, "owned_by" => "soulmem"}
        end

      {:json, 200, %{"object" => "list", "data" => data}}
    else
      error(401, "authentication_error", "invalid_api_key", "invalid or missing token")
    end
  end

  @doc """
  Answers a decoded chat-completions `body` for `token`; with `"stream":
  true` the events go to the yaws connection process `yaws_pid`.
  """
  @spec complete(pid(), String.t() | nil, term()) :: answer()
  def complete(yaws_pid, token, body) do
    with {:ok, body} <- object(body),
         {:ok, character} <- character(body, token),
         :ok <- checked(body),
         {:ok, _pid} <- started(character) do
      if body["stream"] == true,
        do: {:stream, spawn(fn -> stream(yaws_pid, character, body) end)},
        else: whole(character, body)
    end
  end

  @doc "An OpenAI-shaped error for one of the endpoint's errors (`SoulMemWeb.Error`)."
  @spec from_error(Error.t()) :: answer()
  def from_error(%Error{} = e) do
    type =
      case e.status do
        401 -> "authentication_error"
        403 -> "permission_error"
        404 -> "not_found_error"
        429 -> "rate_limit_error"
        s when s >= 500 -> "api_error"
        _ -> "invalid_request_error"
      end

    error(e.status, type, to_string(e.code), e.message)
  end

  defp object(%{} = body), do: {:ok, body}
  defp object(_), do: invalid("the body must be a JSON object")

  defp character(%{"model" => model}, token) when is_binary(model) do
    cond do
      Tokens.verify(model, token) ->
        {:ok, model}

      Tokens.known?(token) ->
        error(
          404,
          "not_found_error",
          "model_not_found",
          "no model #{inspect(model)} for this token"
        )

      true ->
        error(401, "authentication_error", "invalid_api_key", "invalid or missing token")
    end
  end

  defp character(_body, _token), do: invalid("model must be a character id (GET /v1/models)")

  defp checked(body) do
    case SoulMem.check_completion(body) do
      :ok -> :ok
      {:error, reason} -> failure(reason)
    end
  end

  defp started(character) do
    case Operations.ensure_character(character) do
      {:ok, pid} -> {:ok, pid}
      {:error, %Error{} = error} -> from_error(error)
    end
  end

  defp whole(character, body) do
    case SoulMem.complete(character, body) do
      {:ok, %{content: content}} ->
        {:json, 200,
         %{
           "id" => id(),
           "object" => "chat.completion",
           "created" => System.os_time(:second),
           "model" => character,
           "choices" => [
             %{
               "index" => 0,
               "message" => %{"role" => "assistant", "content" => content},
               "finish_reason" => "stop"
             }
           ],
           "usage" => %{"prompt_tokens" => 0, "completion_tokens" => 0, "total_tokens" => 0}
         }}

      {:error, reason} ->
        failure(reason)
    end
  end

  # The producer of a streamed answer: chunks as the LLM's pieces arrive. A
  # failure before the first piece is an error event; after it, the stream
  # ends with what came.
  defp stream(yaws_pid, character, body) do
    id = id()
    created = System.os_time(:second)
    chunk = &chunk(yaws_pid, id, created, character, &1, &2)
    # The role comes first, in a chunk of its own (as OpenAI streams it).
    chunk.(%{"role" => "assistant", "content" => ""}, nil)

    case SoulMem.complete(character, body, on_delta: &chunk.(%{"content" => &1}, nil)) do
      {:ok, _} ->
        chunk.(%{}, "stop")

      {:error, reason} ->
        {:json, _status, error} = failure(reason)
        deliver(yaws_pid, SoulMem.JSON.encode!(error))
    end

    deliver(yaws_pid, "[DONE]")
    :yaws_api.stream_chunk_end(yaws_pid)
  end

  defp chunk(yaws_pid, id, created, model, delta, finish) do
    deliver(
      yaws_pid,
      SoulMem.JSON.encode!(%{
        "id" => id,
        "object" => "chat.completion.chunk",
        "created" => created,
        "model" => model,
        "choices" => [%{"index" => 0, "delta" => delta, "finish_reason" => finish}]
      })
    )
  end

  defp deliver(yaws_pid, data),
    do: :yaws_api.stream_chunk_deliver(yaws_pid, ["data: ", data, "\n\n"])

  defp failure({:bad_request, message}), do: invalid(message)

  defp failure({:llm, :not_configured}),
    do:
      error(
        503,
        "api_error",
        "llm_not_configured",
        Operations.reply_error("", :not_configured)["message"]
      )

  defp failure({:llm, reason}),
    do:
      error(
        502,
        "upstream_error",
        "upstream_error",
        "the LLM failed: #{inspect(reason, limit: 5)}"
      )

  defp failure(reason), do: reason |> Error.from() |> from_error()

  defp invalid(message), do: error(400, "invalid_request_error", "invalid_request", message)

  defp error(status, type, code, message),
    do: {:json, status, %{"error" => %{"message" => message, "type" => type, "code" => code}}}

  defp id, do: "chatcmpl-" <> Base.url_encode64(:crypto.strong_rand_bytes(12), padding: false)
end

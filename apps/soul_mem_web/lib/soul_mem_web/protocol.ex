defmodule SoulMemWeb.Protocol do
  @moduledoc """
  The Phoenix Channels V2 JSON serializer (`vsn=2.0.0`): every frame is the
  JSON array `[join_ref, ref, topic, event, payload]`.

    * client → server: `decode/1`;
    * server → client: `reply/5` (`phx_reply` with `{status, response}`),
      `push/4` (a server event, `ref` null), `close/2` (`phx_close`),
      `error/2` (`phx_error`).

  Pure functions: the socket process (`SoulMemWeb.Socket`) holds the state.
  """

  alias SoulMemWeb.Error

  defmodule Message do
    @moduledoc "A decoded client frame."
    @enforce_keys [:topic, :event, :payload]
    defstruct [:join_ref, :ref, :topic, :event, :payload]

    @type t :: %__MODULE__{
            join_ref: String.t() | nil,
            ref: String.t() | nil,
            topic: String.t(),
            event: String.t(),
            payload: map()
          }
  end

  @max_field_bytes 256

  @doc """
  Decodes one text frame. On failure returns `{:error, error, refs}` where
  `refs` is `{join_ref, ref, topic}` as far as they could be read (so that
  the client can still get an error reply), or `nil`.
  """
  @spec decode(binary()) ::
          {:ok, Message.t()}
          | {:error, Error.t(), {String.t() | nil, String.t() | nil, String.t() | nil} | nil}
  def decode(frame) when is_binary(frame) do
    case SoulMem.JSON.decode(frame) do
      {:ok, [join_ref, ref, topic, event, payload]} ->
        refs = {field(join_ref), field(ref), field(topic)}

        cond do
          not (ref?(join_ref) and ref?(ref)) ->
            {:error, Error.new(:invalid_payload, "join_ref and ref must be strings or null"), nil}

          not (name?(topic) and name?(event)) ->
            {:error, Error.new(:invalid_payload, "topic and event must be non-empty strings"),
             refs}

          not is_map(payload) ->
            {:error, Error.new(:invalid_payload, "the payload must be a JSON object"), refs}

          true ->
            {:ok,
             %Message{
               join_ref: field(join_ref),
               ref: field(ref),
               topic: topic,
               event: event,
               payload: payload
             }}
        end

      {:ok, _other} ->
        {:error, Error.new(:invalid_payload, "a frame is [join_ref, ref, topic, event, payload]"),
         nil}

      {:error, _} ->
        {:error, Error.new(:invalid_json, "the frame is not valid JSON"), nil}
    end
  end

  @doc "A `phx_reply` frame: `status` \"ok\" or \"error\" with `response`."
  @spec reply(String.t() | nil, String.t() | nil, String.t(), :ok | :error, map()) :: binary()
  def reply(join_ref, ref, topic, status, response) when status in [:ok, :error] do
    encode([join_ref, ref, topic, "phx_reply", %{"status" => status, "response" => response}])
  end

  @doc """
  The response of an error reply: the Phoenix-style `reason` (the code) and
  the endpoint's `error` object.
  """
  @spec error_response(Error.t()) :: map()
  def error_response(%Error{code: code} = error),
    do: Map.put(Error.body(error), "reason", code)

  @doc "A server push: `[join_ref, null, topic, event, payload]`."
  @spec push(String.t() | nil, String.t(), String.t(), map()) :: binary()
  def push(join_ref, topic, event, payload), do: encode([join_ref, nil, topic, event, payload])

  @doc "`phx_close` for a channel that the server ends (after `phx_leave`, or a re-join)."
  @spec close(String.t() | nil, String.t()) :: binary()
  def close(join_ref, topic), do: encode([join_ref, join_ref, topic, "phx_close", %{}])

  @doc "`phx_error` for a channel that can no longer serve (the client rejoins)."
  @spec error(String.t() | nil, String.t()) :: binary()
  def error(join_ref, topic), do: encode([join_ref, join_ref, topic, "phx_error", %{}])

  defp encode(term), do: SoulMem.JSON.encode!(term)

  defp ref?(value),
    do: is_nil(value) or (is_binary(value) and byte_size(value) <= @max_field_bytes)

  defp name?(value),
    do: is_binary(value) and value != "" and byte_size(value) <= @max_field_bytes

  # Echoed back only when it is a short string (an error reply must not
  # amplify a hostile frame).
  defp field(value) when is_binary(value) and byte_size(value) <= @max_field_bytes, do: value
  defp field(_value), do: nil
end

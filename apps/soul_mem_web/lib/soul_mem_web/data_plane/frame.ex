defmodule SoulMemWeb.DataPlane.Frame do
  @moduledoc """
  The data plane's frame bodies (see `SoulMemWeb.DataPlane`): a request
  checked into `t:request/0`, and the MessagePack of replies and pushes. The
  4-byte length prefix is `:gen_tcp`'s (`{packet, 4}`), not added here.
  """

  alias SoulMem.MsgPack
  alias SoulMemWeb.Error

  @max_character_bytes 128
  @max_ref_bytes 256
  @fields ["op", "ref", "character", "token", "args"]

  @typedoc "A request's correlation id, chosen by the client (nil in replies to unreadable frames)."
  @type ref :: String.t() | integer() | nil

  @typedoc "A checked request."
  @type request :: %{
          op: String.t(),
          ref: ref(),
          character: String.t(),
          token: String.t(),
          args: map()
        }

  @doc """
  Checks a decoded frame body: a map with `op`, `ref` (a string or an
  integer), `character`, `token` and optionally `args` (a map, `{}` when left out), nothing else.
  An error is `invalid_frame` with the `ref` when the frame had a usable one.
  """
  @spec request(term()) :: {:ok, request()} | {:error, ref(), Error.t()}
  def request(%{} = body) do
    ref = ref_of(body)

    cond do
      (missing = Enum.reject(["op", "ref", "character", "token"], &Map.has_key?(body, &1))) != [] ->
        invalid(ref, "missing field(s): #{Enum.join(missing, ", ")}")

      ref == nil ->
        invalid(ref, "ref must be a string of at most #{@max_ref_bytes} bytes or an integer")

      (unknown = Map.keys(body) -- @fields) != [] ->
        invalid(ref, "unknown field(s): #{Enum.join(unknown, ", ")}")

      not is_binary(body["op"]) ->
        invalid(ref, "op must be a string")

      not character?(body["character"]) ->
        invalid(ref, "character must be a character id (at most #{@max_character_bytes} bytes)")

      not is_binary(body["token"]) ->
        invalid(ref, "token must be a string")

      not (is_map(body["args"]) or is_nil(body["args"])) ->
        invalid(ref, "args must be a map")

      true ->
        {:ok,
         %{
           op: body["op"],
           ref: ref,
           character: body["character"],
           token: body["token"],
           args: body["args"] || %{}
         }}
    end
  end

  def request(_body),
    do: {:error, nil, Error.new(:invalid_frame, "a request frame must be a MessagePack map")}

  @doc "The `invalid_frame` error for a frame that is not MessagePack."
  @spec undecodable(SoulMem.Error.t()) :: Error.t()
  def undecodable(%SoulMem.Error{reason: reason, message: message}),
    do: Error.new(:invalid_frame, "not a MessagePack frame (#{reason}: #{message})")

  @doc "A success reply: `{ref, ok: true, result}`."
  @spec ok(ref(), map()) :: binary()
  def ok(ref, result) do
    case MsgPack.encode(%{"ref" => ref, "ok" => true, "result" => result}) do
      {:ok, bytes} ->
        bytes

      # Results are JSON-ready maps (`Operations.json_safe/1`), so this is a bug.
      {:error, e} ->
        error(ref, Error.new(:internal, "the result cannot be encoded: #{e.message}"))
    end
  end

  @doc "An error reply: `{ref, ok: false, error: {code, message, retry_after?}}`."
  @spec error(ref(), Error.t()) :: binary()
  def error(ref, %Error{} = error) do
    MsgPack.encode!(%{"ref" => ref, "ok" => false, "error" => Error.body(error)["error"]})
  end

  @doc "A server push: `{push: event, character, payload}`."
  @spec push(String.t(), String.t(), map()) :: binary()
  def push(event, character, payload),
    do: MsgPack.encode!(%{"push" => event, "character" => character, "payload" => payload})

  defp invalid(ref, message), do: {:error, ref, Error.new(:invalid_frame, message)}

  defp ref_of(body), do: if(valid_ref?(body["ref"]), do: body["ref"], else: nil)

  defp valid_ref?(ref) when is_integer(ref), do: true
  defp valid_ref?(ref) when is_binary(ref), do: byte_size(ref) <= @max_ref_bytes
  defp valid_ref?(_ref), do: false

  defp character?(id),
    do: is_binary(id) and id != "" and byte_size(id) <= @max_character_bytes
end

defmodule SoulMem.MsgPack do
  @moduledoc """
  MessagePack, encoded and decoded in Rust (`rmpv`/`rmp` in the NIF), for the
  data plane that services off the BEAM talk to (`SoulMemWeb.DataPlane`).

  Decoding gives:

  | MessagePack | Elixir |
  |---|---|
  | map (string keys only) | map with binary keys |
  | array | list |
  | str (UTF-8) | binary |
  | bin | `{:bin, binary}` |
  | int, float | integer, float |
  | true, false, nil | `true`, `false`, `nil` |

  and refuses, with `{:error, %SoulMem.Error{}}`: ext types, maps with
  non-string keys or duplicate keys, NaN and infinities, trailing bytes
  (`:invalid_msgpack`); strings that are not UTF-8 (`:not_utf8`); more than
  `:max_depth` nested containers (default 64, also the ceiling) or more than
  `:max_elements` values, map keys included (default 100,000)
  (`:limit_exceeded`).

  Encoding takes maps with atom or string keys, lists, UTF-8 binaries (str),
  `{:bin, binary}` (bin), integers within the 64-bit range, floats, booleans,
  `nil` and other atoms (as str); anything else (a pid, another tuple, a
  binary that is not UTF-8, nesting beyond 64) is refused as
  `:invalid_argument` naming the path of the value.

  Small inputs run on the normal scheduler; frames over 16 KiB are decoded on
  a dirty CPU scheduler, and an encode whose output passes 16 KiB is
  restarted there (see `bench/README.md` for the timings).
  """

  alias SoulMem.{Error, Native}

  @dirty_bytes 16 * 1024
  @max_depth 64
  @default_max_elements 100_000

  @typedoc "A decoded MessagePack value."
  @type value ::
          %{optional(String.t()) => value()}
          | [value()]
          | String.t()
          | {:bin, binary()}
          | integer()
          | float()
          | boolean()
          | nil

  @typedoc "Decode limits: `:max_depth` (1..64) and `:max_elements` (positive)."
  @type limits :: [max_depth: pos_integer(), max_elements: pos_integer()]

  @doc """
  Decodes one MessagePack value from `bytes` (see the moduledoc for the
  mapping and what is refused). Raises `ArgumentError` when `bytes` is not a
  binary or a limit is out of range.
  """
  @spec decode(binary(), limits()) :: {:ok, value()} | {:error, Error.t()}
  def decode(bytes, limits \\ [])

  def decode(bytes, limits) when is_binary(bytes) do
    limits = Keyword.validate!(limits, max_depth: @max_depth, max_elements: @default_max_elements)

    max_depth = limits[:max_depth]
    max_elements = limits[:max_elements]

    unless is_integer(max_depth) and max_depth in 1..@max_depth,
      do:
        raise(ArgumentError, "max_depth must be in 1..#{@max_depth}, got: #{inspect(max_depth)}")

    unless is_integer(max_elements) and max_elements > 0,
      do: raise(ArgumentError, "max_elements must be positive, got: #{inspect(max_elements)}")

    nif_limits = %{max_depth: max_depth, max_elements: max_elements}

    result =
      if byte_size(bytes) > @dirty_bytes,
        do: Native.msgpack_decode_dirty(bytes, nif_limits),
        else: Native.msgpack_decode(bytes, nif_limits)

    Error.from_native(result)
  end

  def decode(bytes, _limits),
    do: raise(ArgumentError, "expected a binary to decode, got: #{inspect(bytes, limit: 5)}")

  @doc """
  Encodes `term` as MessagePack (see the moduledoc for what it takes).
  """
  @spec encode(term()) :: {:ok, binary()} | {:error, Error.t()}
  def encode(term) do
    case Native.msgpack_encode(term) do
      :dirty -> term |> Native.msgpack_encode_dirty() |> Error.from_native()
      result -> Error.from_native(result)
    end
  end

  @doc """
  Encodes `term` as MessagePack; raises `SoulMem.Error` when it cannot be
  encoded.
  """
  @spec encode!(term()) :: binary()
  def encode!(term) do
    case encode(term) do
      {:ok, bytes} -> bytes
      {:error, error} -> raise error
    end
  end
end

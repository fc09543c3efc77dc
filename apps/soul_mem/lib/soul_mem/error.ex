defmodule SoulMem.Error do
  @moduledoc """
  The error of every failing `SoulMem` operation.

  `reason` is a stable atom to match on; `message` is for people. Reasons
  reported by the native graph store:

    * `:invalid_json` — not JSON, or not Graph JSON (wrong shape, unknown tag)
    * `:duplicate_id` — two nodes share an id
    * `:missing_link_target` — a link names a node that does not exist
    * `:invalid_value` — a field has a value outside its domain
    * `:invalid_timestamp` — a timestamp that cannot be parsed
    * `:too_large` — the input exceeds `:max_bytes`
    * `:not_utf8` — the input is not valid UTF-8
    * `:io` — the file cannot be read
    * `:not_found` — no note with that id
    * `:poisoned` — an earlier panic left the graph in an unknown state
    * `:invalid_card` — a character card or World Info file that cannot be
      read (the message names the chunk, field or lorebook entry)
    * `:limit_exceeded` — an input holds more (entries, text, nesting) than
      allowed
    * `:invalid_msgpack` — not one MessagePack value the data plane accepts
      (`SoulMem.MsgPack`)
    * `:invalid_argument` — a term `SoulMem.MsgPack.encode/1` cannot encode

  Reasons reported by the on-disk store (`SoulMem.Store`):

    * `:corrupt` — the file is damaged or not an SQLite database
    * `:incompatible` — a foreign SQLite file, another character's store, or
      a newer schema
    * `:in_use` — another process (or handle) has the store open
    * `:read_only` — the file or its directory cannot be written
    * `:disk_full` — the disk (or the store's quota) is full; nothing was
      written
    * `:replica_mismatch` — a replica cannot take a batch of changes (another
      base, a batch missing) or a primary lost track of its changes: the
      replica is rebuilt from a snapshot (`SoulMem.Store.Replica`)
  """

  defexception [:reason, :message]

  @type reason ::
          :invalid_json
          | :duplicate_id
          | :missing_link_target
          | :invalid_value
          | :invalid_timestamp
          | :too_large
          | :not_utf8
          | :io
          | :not_found
          | :poisoned
          | :invalid_card
          | :limit_exceeded
          | :invalid_msgpack
          | :invalid_argument
          | :corrupt
          | :incompatible
          | :in_use
          | :read_only
          | :disk_full
          | :replica_mismatch
          | atom()

  @type t :: %__MODULE__{reason: reason(), message: String.t()}

  @doc """
  Builds an error from a `reason` atom and a message.
  """
  @spec new(reason(), String.t()) :: t()
  def new(reason, message) when is_atom(reason) and is_binary(message) do
    %__MODULE__{reason: reason, message: message}
  end

  @doc """
  Converts a native result: `{:ok, v}` stays, `{:error, {kind, message}}` becomes
  `{:error, %SoulMem.Error{}}`.
  """
  @spec from_native({:ok, term()} | {:error, {atom(), String.t()}}) ::
          {:ok, term()} | {:error, t()}
  def from_native({:ok, value}), do: {:ok, value}

  def from_native({:error, {kind, message}}) when is_atom(kind),
    do: {:error, new(kind, to_string(message))}

  @impl true
  def message(%__MODULE__{reason: reason, message: message}), do: "#{reason}: #{message}"
end

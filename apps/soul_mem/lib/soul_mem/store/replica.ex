defmodule SoulMem.Store.Replica do
  @moduledoc """
  Replication at the store level (the Rust core's `store::replication`):
  SQLite's session extension records the rows each write of a primary
  store changes, and those changesets replay, in order, on a copy of it.

    * on the primary (an open `SoulMem.Store`): `capture/2` turns recording
      on, `take_changes/1` takes the changesets of the writes since the last
      call, `snapshot/2` writes a consistent copy (the replica's base),
      `epoch/1` reads the copy's epoch;
    * on a replica file (by path; no process holds it open): `init/2`
      stamps a snapshot as replica `base` at batch 0, `apply/4` applies
      batch `seq` durably, `state/1` tells where it stands, `promote/1` turns
      it into a primary copy at the next epoch.

  A replica refuses a batch from another base or out of order (reason
  `:replica_mismatch`, nothing applied) and acknowledges one it has applied
  already without applying it twice.
  """

  alias SoulMem.{Error, Native, Store}

  @typedoc "Where a replica stands."
  @type state :: %{base: String.t(), seq: non_neg_integer(), epoch: non_neg_integer()}

  @doc "Turns change capture of `store` on or off (off drops what was not taken)."
  @spec capture(Store.t(), boolean()) :: :ok | {:error, Error.t()}
  def capture(%Store{ref: ref}, on) when is_boolean(on) do
    with {:ok, _} <- Error.from_native(Native.store_set_capture(ref, on)), do: :ok
  end

  @doc """
  The changesets of the writes `store` committed since the last call, oldest
  first. Reason `:replica_mismatch` when one was not recorded (the replica
  must be rebuilt from a snapshot).
  """
  @spec take_changes(Store.t()) :: {:ok, [binary()]} | {:error, Error.t()}
  def take_changes(%Store{ref: ref}), do: Error.from_native(Native.store_take_changes(ref))

  @doc """
  Writes a consistent copy of `store` to `dest` (which must not exist) and
  drops the changes captured so far; returns its size in bytes.
  """
  @spec snapshot(Store.t(), Path.t()) :: {:ok, non_neg_integer()} | {:error, Error.t()}
  def snapshot(%Store{ref: ref}, dest) when is_binary(dest),
    do: Error.from_native(Native.store_snapshot(ref, dest))

  @doc "The epoch of `store`'s copy (raised each time a replica takes over)."
  @spec epoch(Store.t()) :: {:ok, non_neg_integer()} | {:error, Error.t()}
  def epoch(%Store{ref: ref}), do: Error.from_native(Native.store_epoch(ref))

  @doc "Stamps the snapshot at `path` as replica `base` at batch 0."
  @spec init(Path.t(), String.t()) :: :ok | {:error, Error.t()}
  def init(path, base) when is_binary(path) and is_binary(base) do
    with {:ok, _} <- Error.from_native(Native.replica_init(path, base)), do: :ok
  end

  @doc """
  Applies batch `seq` of replica `base` (changesets in order) to the replica
  at `path`, durable when it returns.
  """
  @spec apply(Path.t(), String.t(), pos_integer(), [binary()]) :: :ok | {:error, Error.t()}
  def apply(path, base, seq, changes)
      when is_binary(path) and is_binary(base) and is_integer(seq) and seq > 0 and
             is_list(changes) do
    with {:ok, _} <- Error.from_native(Native.replica_apply(path, base, seq, changes)), do: :ok
  end

  @doc "Where the replica at `path` stands."
  @spec state(Path.t()) :: {:ok, state()} | {:error, Error.t()}
  def state(path) when is_binary(path), do: Error.from_native(Native.replica_state(path))

  @doc "Promotes the replica at `path` to a primary copy; returns its new epoch."
  @spec promote(Path.t()) :: {:ok, pos_integer()} | {:error, Error.t()}
  def promote(path) when is_binary(path), do: Error.from_native(Native.replica_promote(path))
end

defmodule SoulMem.Cluster.Transfer do
  @moduledoc """
  Copies a closed store file to another node, verified.

  The sender reads the file in chunks (`@chunk_bytes`) and appends each to a
  temporary file on the receiving node with one `:erpc` call per chunk (no
  receiving process to keep alive: a sender that dies leaves only a temp
  file, which the next transfer of that character replaces). The last call
  checks the SHA-256 of what arrived against the sender's, fsyncs it and
  renames it into place: as the character's store in the receiver's data
  directory (`:store`, a move), where a store already there is never
  replaced (`{:error, :exists}`), or as its replica (`:replica`,
  `SoulMem.Cluster.Replication`), which replaces the replica there.
  """

  @chunk_bytes 1_048_576

  @typedoc """
  What the file becomes on the receiver: a store, or a store of a copy at
  `epoch` from node `from` (a store there that it beats is set aside,
  `SoulMem.Cluster.Moves.make_room/2`), or a replica.
  """
  @type kind :: :store | {:store, {non_neg_integer(), node()}} | :replica

  @doc """
  Sends the store file at `path` (closed: no process has it open) as the
  store (or, with `kind` `:replica`, the replica) of character `id` on
  `node`. `{:ok, %{bytes, sha256}}` once it is durable there under its final
  name.
  """
  @spec send_file(Path.t(), String.t(), node(), kind()) ::
          {:ok, %{bytes: non_neg_integer(), sha256: binary()}} | {:error, term()}
  def send_file(path, id, node, kind \\ :store)
      when is_binary(path) and is_binary(id) and is_atom(node) do
    with {:ok, temp} <- :erpc.call(node, __MODULE__, :begin, [id, kind]),
         {:ok, bytes, sha} <- stream(path, node, temp),
         :ok <- :erpc.call(node, __MODULE__, :finish, [id, temp, sha, kind]) do
      {:ok, %{bytes: bytes, sha256: sha}}
    end
  catch
    # The receiver down or failing: the move is abandoned, not crashed.
    kind, reason -> {:error, {:transfer, {kind, reason}}}
  end

  defp stream(path, node, temp) do
    File.open(path, [:read, :raw, :binary], fn io -> stream(io, node, temp, 0, sha_init()) end)
    |> case do
      {:ok, result} -> result
      {:error, _} = error -> error
    end
  end

  defp stream(io, node, temp, bytes, ctx) do
    case IO.binread(io, @chunk_bytes) do
      :eof ->
        {:ok, bytes, :crypto.hash_final(ctx)}

      {:error, _} = error ->
        error

      chunk ->
        case :erpc.call(node, __MODULE__, :append, [temp, chunk]) do
          :ok -> stream(io, node, temp, bytes + byte_size(chunk), :crypto.hash_update(ctx, chunk))
          {:error, _} = error -> error
        end
    end
  end

  defp sha_init, do: :crypto.hash_init(:sha256)

  defp dest(id, :replica), do: SoulMem.Cluster.Replication.path(id)
  defp dest(id, _store), do: SoulMem.Store.path(SoulMem.Store.data_dir(), id)

  @doc false
  # Receiver: a fresh, empty temp file for `id` in the data directory. A
  # store superseded by a newer copy elsewhere is set aside first.
  @spec begin(String.t(), kind()) :: {:ok, Path.t()} | {:error, term()}
  def begin(id, kind \\ :store) do
    dest = dest(id, kind)

    with :ok <- room(id, kind, File.exists?(dest)) do
      temp = dest <> ".incoming"
      File.mkdir_p!(Path.dirname(temp))
      with :ok <- File.write(temp, ""), do: {:ok, temp}
    end
  end

  defp room(_id, :replica, _exists?), do: :ok
  defp room(_id, _store, false), do: :ok
  defp room(_id, :store, true), do: {:error, :exists}
  defp room(id, {:store, theirs}, true), do: SoulMem.Cluster.Moves.make_room(id, theirs)

  @doc false
  # Receiver: appends one chunk.
  @spec append(Path.t(), binary()) :: :ok | {:error, term()}
  def append(temp, chunk), do: File.write(temp, chunk, [:append, :raw])

  @doc false
  # Receiver: checks, fsyncs and renames the temp file into place.
  @spec finish(String.t(), Path.t(), binary(), kind()) :: :ok | {:error, term()}
  def finish(id, temp, sha, kind \\ :store) do
    dest = dest(id, kind)

    with {:ok, ^sha} <- digest_and_sync(temp),
         :ok <- install(id, temp, dest, kind) do
      :ok
    else
      {:ok, _other} ->
        File.rm(temp)
        {:error, :checksum_mismatch}

      true ->
        File.rm(temp)
        {:error, :exists}

      {:error, _} = error ->
        error
    end
  end

  # A replica is replaced whole: its old WAL must not be replayed onto the new file.
  defp install(_id, temp, dest, :replica) do
    SoulMem.Store.remove_file(dest)
    File.rename(temp, dest)
  end

  # A store: under the character's lock, never over one that is there.
  defp install(id, temp, dest, _store) do
    SoulMem.Cluster.Moves.locked(id, fn ->
      with false <- File.exists?(dest),
           :ok <- File.rename(temp, dest) do
        SoulMem.Cluster.Moves.arrived(id)
      end
    end)
  end

  @doc false
  # Receiver: removes a store that arrived for a move that was then
  # abandoned (the character stays on the sender).
  @spec discard(String.t()) :: :ok | {:error, term()}
  def discard(id), do: File.rm(SoulMem.Store.path(SoulMem.Store.data_dir(), id))

  @doc """
  Removes the store of `id` that `send_file/3` put on `node`, for a move
  abandoned after it (best effort: a node that cannot be reached keeps it,
  and a later move there refuses with `:exists`).
  """
  @spec discard(String.t(), node()) :: :ok | {:error, term()}
  def discard(id, node) do
    :erpc.call(node, __MODULE__, :discard, [id])
  catch
    kind, reason -> {:error, {kind, reason}}
  end

  defp digest_and_sync(temp) do
    with {:ok, io} <- :file.open(temp, [:read, :raw, :binary]) do
      try do
        with :ok <- :file.sync(io), do: {:ok, digest(io, sha_init())}
      after
        :file.close(io)
      end
    end
  end

  defp digest(io, ctx) do
    case :file.read(io, @chunk_bytes) do
      {:ok, chunk} -> digest(io, :crypto.hash_update(ctx, chunk))
      :eof -> :crypto.hash_final(ctx)
    end
  end
end

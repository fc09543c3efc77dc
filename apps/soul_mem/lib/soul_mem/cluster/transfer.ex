defmodule SoulMem.Cluster.Transfer do
  @moduledoc """
  Copies a closed store file to another node, verified.

  The sender reads the file in chunks (`@chunk_bytes`) and appends each to a
  temporary file on the receiving node with one `:erpc` call per chunk (no
  receiving process to keep alive: a sender that dies leaves only a temp
  file, which the next transfer of that character replaces). The last call
  checks the SHA-256 of what arrived against the sender's, fsyncs it and
  renames it to the character's store path in the receiver's data
  directory; a store already there is never replaced (`{:error, :exists}`).
  """

  @chunk_bytes 1_048_576

  @doc """
  Sends the store file at `path` (closed: no process has it open) as the
  store of character `id` on `node`. `{:ok, %{bytes, sha256}}` once it is
  durable there under its final name.
  """
  @spec send_file(Path.t(), String.t(), node()) ::
          {:ok, %{bytes: non_neg_integer(), sha256: binary()}} | {:error, term()}
  def send_file(path, id, node) when is_binary(path) and is_binary(id) and is_atom(node) do
    with {:ok, temp} <- :erpc.call(node, __MODULE__, :begin, [id]),
         {:ok, bytes, sha} <- stream(path, node, temp),
         :ok <- :erpc.call(node, __MODULE__, :finish, [id, temp, sha]) do
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

  @doc false
  # Receiver: a fresh, empty temp file for `id` in the data directory.
  @spec begin(String.t()) :: {:ok, Path.t()} | {:error, term()}
  def begin(id) do
    dest = SoulMem.Store.path(SoulMem.Store.data_dir(), id)

    if File.exists?(dest) do
      {:error, :exists}
    else
      temp = dest <> ".incoming"
      File.mkdir_p!(Path.dirname(temp))
      with :ok <- File.write(temp, ""), do: {:ok, temp}
    end
  end

  @doc false
  # Receiver: appends one chunk.
  @spec append(Path.t(), binary()) :: :ok | {:error, term()}
  def append(temp, chunk), do: File.write(temp, chunk, [:append, :raw])

  @doc false
  # Receiver: checks, fsyncs and renames the temp file into place.
  @spec finish(String.t(), Path.t(), binary()) :: :ok | {:error, term()}
  def finish(id, temp, sha) do
    dest = SoulMem.Store.path(SoulMem.Store.data_dir(), id)

    with {:ok, ^sha} <- digest_and_sync(temp),
         false <- File.exists?(dest),
         :ok <- File.rename(temp, dest) do
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

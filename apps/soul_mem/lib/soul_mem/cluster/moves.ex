defmodule SoulMem.Cluster.Moves do
  @moduledoc """
  Moves characters off this node (`SoulMem.Cluster.drain/1`), one at a
  time, and says where a character that was here is now.

  A move of character `id` to node `to`:

    1. `id` is marked `:moving`: from then on no request reaches it here
       (`SoulMem.Characters` answers `{:error, :moving}`, which the caller's
       `SoulMem.Cluster.Router` retries for a bounded time) and it cannot be
       started here (`SoulMem.Character` refuses to start);
    2. its running process, if any, is written back (`:persist`, the move
       is abandoned if that fails) and stopped: the requests it had accepted
       are all in the file, those it had not are answered `:moving` and
       retried;
    3. the closed file goes to `to` (`SoulMem.Cluster.Transfer`: SHA-256
       checked, fsynced, renamed into place, never over an existing store),
       and a character that was running is started there from it;
    4. `id` is marked `{:moved, to}`: requests that still reach this node
       are forwarded there, where the character starts from the file;
    5. the file here is renamed `<file>.moved` (kept as a backup, not
       listed nor opened).

  A failure before step 4 unmarks `id`: it stays here and serves. Requests
  wait during steps 1–3 only.

  While the node drains, a character that is neither stored nor running
  here is forwarded at once to its home without this node, so none is
  created here that the drain would miss.

  The marks are in a public ETS table this process owns (reads cost no
  message); they are not kept across a restart, by which time the node is
  marked drained and placement sends nothing here.
  """

  use GenServer

  require Logger

  alias SoulMem.{Catalog, Characters, Store}
  alias SoulMem.Cluster.Placement

  @table __MODULE__

  @typedoc "Where a character that placement puts on this node is."
  @type where :: :here | :moving | {:moved, node()}

  @doc "Starts the owner of the marks table."
  @spec start_link(keyword()) :: GenServer.on_start()
  def start_link(opts \\ []), do: GenServer.start_link(__MODULE__, opts, name: __MODULE__)

  @doc "Where character `id` is, as far as this node knows (`:here` when it never moved)."
  @spec where(String.t()) :: where()
  def where(id) when is_binary(id) do
    case :ets.lookup(@table, id) do
      [{^id, mark}] -> mark
      [] -> draining(id)
    end
  rescue
    ArgumentError -> :here
  end

  defp draining(id) do
    if :ets.member(@table, :draining) and not Store.exists?(Store.data_dir(), id) and
         Characters.list() |> List.keymember?(id, 0) == false,
       do: {:moved, Placement.pick(id, Map.delete(Placement.candidates(), node()))},
       else: :here
  end

  @doc "Whether character `id` is being moved off this node right now."
  @spec moving?(String.t()) :: boolean()
  def moving?(id), do: where(id) == :moving

  @doc """
  Moves character `id` (running or stored here) to node `to` as described
  in the moduledoc. `{:ok, %{bytes, sha256, ms}}`, or the step's error with
  the character still here.
  """
  @spec move(String.t(), node()) :: {:ok, map()} | {:error, term()}
  def move(id, to) when is_binary(id) and is_atom(to) and to != node() do
    started = System.monotonic_time(:millisecond)
    path = Store.path(Store.data_dir(), id)

    with true <- :ets.insert_new(@table, {id, :moving}) || {:error, :already_moving},
         {:ok, running?} <- stop(id),
         {:ok, sent} <- copy(running?, path, id, to) do
      :ets.insert(@table, {id, {:moved, to}})
      _ = File.rename(path, path <> ".moved")
      {:ok, Map.put(sent, :ms, System.monotonic_time(:millisecond) - started)}
    else
      {:error, reason, running?} ->
        :ets.delete(@table, id)
        # It was running: it runs here again, from its file.
        if running?, do: Characters.ensure_started(id)
        failed(id, to, reason)

      {:error, :already_moving} ->
        failed(id, to, :already_moving)

      {:error, reason} ->
        :ets.delete(@table, id)
        failed(id, to, reason)
    end
  end

  defp failed(id, to, reason) do
    Logger.warning("cluster: #{id} not moved to #{to}: #{inspect(reason)}")
    {:error, reason}
  end

  defp copy(running?, path, id, to) do
    with {:ok, sent} <- Store.exists?(Store.data_dir(), id) |> send(path, id, to),
         :ok <- restart(running?, id, to) do
      {:ok, sent}
    else
      {:error, reason} -> {:error, reason, running?}
    end
  end

  # A character that was running runs on its new node before the switch; if
  # it cannot start there, the copy is removed and it stays here.
  defp restart(false, _id, _to), do: :ok

  defp restart(true, id, to) do
    case SoulMem.Cluster.Router.remote(to, Characters, :ensure_started, [id, []], 60_000) do
      {:ok, _pid} ->
        :ok

      error ->
        _ = SoulMem.Cluster.Transfer.discard(id, to)
        {:error, {:start_failed, error}}
    end
  end

  defp send(true, path, id, to), do: SoulMem.Cluster.Transfer.send_file(path, id, to)
  defp send(false, _path, _id, _to), do: {:ok, %{bytes: 0, sha256: nil}}

  # Characters.list/0 and the supervisor are local: this node's process.
  defp stop(id) do
    case List.keyfind(Characters.list(), id, 0) do
      nil ->
        {:ok, false}

      {^id, pid} ->
        with :ok <- persist(pid) do
          ref = Process.monitor(pid)
          _ = DynamicSupervisor.terminate_child(SoulMem.CharacterSupervisor, pid)

          receive do
            {:DOWN, ^ref, :process, ^pid, _} -> {:ok, true}
          end
        end
    end
  end

  defp persist(pid) do
    case GenServer.call(pid, {:before, :infinity, {:force, :persist}}, 60_000) do
      :ok -> :ok
      {:error, :unsupported} -> :ok
      {:error, _} = error -> error
    end
  catch
    :exit, _ -> :ok
  end

  @doc """
  Moves every character of this node (stored or running) to its home
  without this node, forwarding new ones meanwhile; returns the moves'
  results by id. Used by `SoulMem.Cluster.drain/1`, on the drained node.
  """
  @spec drain_local() :: %{String.t() => {:ok, map()} | {:error, term()}}
  def drain_local do
    :ets.insert(@table, {:draining, true})
    drain_pass(%{})
  end

  defp drain_pass(done) do
    targets = Map.delete(Placement.candidates(), node())

    pending =
      for %{id: id} <- Catalog.list(), not Map.has_key?(done, id), where(id) == :here, do: id

    if pending == [] or map_size(targets) == 0 do
      done
    else
      pending
      |> Map.new(fn id -> {id, move(id, Placement.pick(id, targets))} end)
      |> Map.merge(done)
      |> drain_pass()
    end
  end

  @impl true
  def init(_opts) do
    :ets.new(@table, [:named_table, :public, :set, read_concurrency: true])
    {:ok, nil}
  end
end

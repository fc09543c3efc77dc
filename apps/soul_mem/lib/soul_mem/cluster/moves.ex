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

  **Homes that change.** When a node joins (or the known set changes), each
  node looks at the characters it stores (`:rebalance`): one whose home is
  now another live node moves there — at once when it is not running, at
  its next Idle when it is (`idle/1`, from the character's Idle transition).
  Until it arrives, its new home forwards requests to the node that holds
  it: a node asked for a character it neither runs nor stores asks the
  other members who holds a copy (`holding/1`) and forwards to the holder
  of the newest one (`{:held_by, node}`, cleared when the file arrives).

  **Two copies.** The same question sorts out copies that met again (a home
  back after its replica took over, a healed split): the copy with the
  higher epoch wins (`SoulMem.Cluster.Conflicts`); a losing copy here is set
  aside and reported, a running loser is stopped first.

  The marks are in a public ETS table this process owns (reads cost no
  message); they are not kept across a restart, by which time the node is
  marked drained and placement sends nothing here.
  """

  use GenServer

  require Logger

  alias SoulMem.{Catalog, Characters, Store}
  alias SoulMem.Cluster.{Conflicts, Membership, Placement, Replication}

  @table __MODULE__

  @typedoc "Where a character that placement puts on this node is."
  @type where :: :here | :moving | {:moved, node()}

  @locate_timeout 2_000

  @doc "Starts the owner of the marks table."
  @spec start_link(keyword()) :: GenServer.on_start()
  def start_link(opts \\ []), do: GenServer.start_link(__MODULE__, opts, name: __MODULE__)

  @doc "Where character `id` is, as far as this node knows (`:here` when it never moved)."
  @spec where(String.t()) :: where()
  def where(id) when is_binary(id) do
    case :ets.lookup(@table, id) do
      [{^id, {:held_by, node}}] -> {:moved, node}
      [{^id, :pending}] -> :here
      [{^id, mark}] -> mark
      [] -> with :here <- draining(id), do: locate(id)
    end
  rescue
    ArgumentError -> :here
  end

  # Not running here: the newest copy elsewhere, if it beats this node's.
  defp locate(id) do
    others = Membership.live() -- [node()]

    if Membership.known() == nil or others == [] or running_here?(id) do
      :here
    else
      {primaries, moving} = copies_elsewhere(id, others)
      mine = local_epoch(id)

      cond do
        # A copy on its way (here, or elsewhere) that is newer than this node's, or this
        # node has none: wait for it rather than start an old or empty one. (At an equal
        # epoch the copy here is the one that arrived.)
        Enum.any?(moving, fn {epoch, _node} -> mine == nil or epoch > mine end) -> :moving
        primaries != [] -> primaries |> newest(id) |> follow(id)
        true -> :here
      end
    end
  end

  # What the other live members hold of `id`, as `{epoch, node}`: their
  # primary copies, and the copies they are moving.
  defp copies_elsewhere(id, others) do
    answers =
      Enum.zip(:erpc.multicall(others, __MODULE__, :holding, [id], @locate_timeout), others)

    {for({{:ok, {:primary, epoch}}, node} <- answers, do: {epoch, node}),
     for({{:ok, {:moving, epoch}}, node} <- answers, do: {epoch, node})}
  end

  defp newest(copies, id),
    do: Enum.reduce(copies, &if(Conflicts.newer?(id, &1, &2), do: &1, else: &2))

  # Decided under the character's lock: a copy may arrive meanwhile
  # (Transfer.finish takes the same lock), and one that arrived is not
  # followed away from.
  defp follow({_epoch, node} = theirs, id) do
    locked(id, fn ->
      mine = local_epoch(id)

      cond do
        mine == nil -> held_by(id, node)
        Conflicts.beats?(id, theirs, mine) -> yield_to(id, theirs)
        true -> :here
      end
    end)
  end

  defp held_by(id, node) do
    :ets.insert(@table, {id, {:held_by, node}})
    {:moved, node}
  end

  # The copy here lost to `theirs`: kept and reported.
  defp set_aside(id, {epoch, node}) do
    _ = Conflicts.set_aside(id, node, epoch)
    :ok
  end

  # ... and requests go to the winner from now on.
  defp yield_to(id, {_epoch, node} = theirs) do
    set_aside(id, theirs)
    held_by(id, node)
  end

  @doc false
  # Runs `fun` holding this node's lock on character `id`: deciding which
  # copy of it is here (locate, Transfer.begin/finish, set-aside) is one
  # step at a time.
  @spec locked(String.t(), (() -> result)) :: result when result: term()
  def locked(id, fun), do: :global.trans({{__MODULE__, id}, self()}, fun, [node()])

  defp local_epoch(id) do
    case Store.peek(Store.path(Store.data_dir(), id)) do
      {:ok, peek} -> peek.epoch
      {:error, _} -> nil
    end
  end

  defp running_here?(id), do: Registry.lookup(SoulMem.Registry, id) != []

  @doc false
  # Asked by a node looking for `id` (locate/1): this node's primary copy,
  # unless it moved or is moving away (or is only forwarded from here).
  @spec holding(String.t()) :: {:primary | :moving, non_neg_integer()} | :none
  def holding(id) do
    mark =
      case :ets.lookup(@table, id) do
        [{_, mark}] -> mark
        [] -> nil
      end

    case {mark, local_epoch(id)} do
      {_, nil} -> :none
      {mark, epoch} when mark in [nil, :pending] -> {:primary, epoch}
      # Being moved away: the receiver's copy already, not a rival.
      {:moving, epoch} -> {:moving, epoch}
      _forwarded -> :none
    end
  end

  @doc false
  # Transfer.finish: the store of `id` arrived here; stop forwarding it.
  @spec arrived(String.t()) :: :ok
  def arrived(id) do
    :ets.match_delete(@table, {id, {:held_by, :_}})
    :ets.match_delete(@table, {id, {:moved, :_}})
    :ok
  rescue
    ArgumentError -> :ok
  end

  @doc false
  # Transfer.begin: a copy of `id` at `epoch` from `from` is coming and one
  # is stored here. :ok when it wins (this one is set aside), else :exists.
  @spec make_room(String.t(), {non_neg_integer(), node()}) :: :ok | {:error, :exists}
  def make_room(id, theirs) do
    locked(id, fn ->
      mine = local_epoch(id)

      cond do
        mine == nil -> :ok
        running_here?(id) or not Conflicts.beats?(id, theirs, mine) -> {:error, :exists}
        true -> set_aside(id, theirs)
      end
    end)
  end

  @doc """
  Called when character `id` goes Idle: if it waits to move (its home
  changed while it ran), the move starts now.
  """
  @spec idle(String.t()) :: :ok
  def idle(id) do
    if :ets.lookup(@table, id) == [{id, :pending}], do: GenServer.cast(__MODULE__, {:idle, id})
    :ok
  rescue
    ArgumentError -> :ok
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

    :ets.match_delete(@table, {id, :pending})

    with true <- :ets.insert_new(@table, {id, :moving}) || {:error, :already_moving},
         {:ok, running?} <- stop(id),
         {:ok, sent} <- safely(fn -> copy(running?, path, id, to) end, running?) do
      :ets.insert(@table, {id, {:moved, to}})
      _ = File.rename(path, path <> ".moved")
      # The saved long-term index belongs to the character's new node now.
      _ = Store.remove_saved_index(path)
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

  # A crash mid-copy must not leave the character marked :moving for good.
  defp safely(fun, running?) do
    fun.()
  rescue
    error -> {:error, {:crashed, error}, running?}
  catch
    kind, reason -> {:error, {kind, reason}, running?}
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

  defp send(true, path, id, to) do
    epoch = local_epoch(id) || 0
    SoulMem.Cluster.Transfer.send_file(path, id, to, {:store, {epoch, node()}})
  end

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
    {:ok, %{rebalancing: nil, again: false, waiters: []}}
  end

  @doc """
  Runs a rebalance on this node now (see the moduledoc) and returns once it
  is over: what membership changes trigger by themselves, for operators and
  tests. A rebalance already running finishes first.
  """
  @spec rebalance_now(timeout()) :: :ok
  def rebalance_now(timeout \\ :infinity), do: GenServer.call(__MODULE__, :rebalance, timeout)

  @impl true
  def handle_call(:rebalance, from, state),
    do: {:noreply, start_rebalance(%{state | waiters: [from | state.waiters]})}

  # One rebalance at a time, in its own process (moves take seconds); a
  # change meanwhile runs another after it.
  @impl true
  def handle_info(:rebalance, state), do: {:noreply, start_rebalance(state)}

  def handle_info({:DOWN, _ref, :process, pid, _}, %{rebalancing: pid} = state) do
    state = %{state | rebalancing: nil}

    if state.again do
      {:noreply, start_rebalance(state)}
    else
      for from <- state.waiters, do: GenServer.reply(from, :ok)
      {:noreply, %{state | waiters: []}}
    end
  end

  def handle_info(_other, state), do: {:noreply, state}

  defp start_rebalance(%{rebalancing: nil} = state) do
    {pid, _ref} = spawn_monitor(&rebalance/0)
    %{state | rebalancing: pid, again: false}
  end

  defp start_rebalance(state), do: %{state | again: true}

  @impl true
  def handle_cast({:idle, id}, state) do
    spawn(fn -> move_home(id) end)
    {:noreply, state}
  end

  # Every character stored or running here: a copy that lost is set aside
  # (a running one stopped first); one whose home is another live node moves
  # there, now or at its next Idle.
  defp rebalance do
    if Membership.known() != nil and not :ets.member(@table, :draining) do
      running = Characters.list() |> Enum.map(&elem(&1, 0)) |> MapSet.new()

      for %{id: id} <- Catalog.list(), :ets.lookup(@table, id) in [[], [{id, :pending}]] do
        # A stored copy that lost is set aside by where/1's lookup of the others.
        if MapSet.member?(running, id), do: reconcile_running(id)
        home = Placement.home(id)

        cond do
          where(id) != :here or not Store.exists?(Store.data_dir(), id) -> :ok
          home == node() and not MapSet.member?(running, id) -> Replication.ensure_replica(id)
          home == node() or not Membership.live?(home) -> :ok
          MapSet.member?(running, id) and working?(id) -> pend(id, home)
          true -> move(id, home)
        end
      end
    end
  end

  # Marked to move at its next Idle; one that went Idle meanwhile (its idle/1
  # found no mark) moves now.
  defp pend(id, home) do
    :ets.insert(@table, {id, :pending})
    if not working?(id) and :ets.lookup(@table, id) == [{id, :pending}], do: move(id, home)
  end

  # Running and Working: it moves at its next Idle (Idle already, or
  # stopped meanwhile: now).
  defp working?(id) do
    case Registry.lookup(SoulMem.Registry, id) do
      [{pid, _}] ->
        match?({:ok, %{state: :working}}, GenServer.call(pid, {:before, :infinity, :info}, 5_000))

      [] ->
        false
    end
  catch
    :exit, _ -> false
  end

  # A running character whose copy lost to a newer one elsewhere: stopped
  # (written back), set aside, forwarded.
  defp reconcile_running(id) do
    {primaries, _moving} = copies_elsewhere(id, Membership.live() -- [node()])

    with [_ | _] <- primaries,
         theirs <- newest(primaries, id),
         mine when is_integer(mine) <- local_epoch(id),
         true <- Conflicts.beats?(id, theirs, mine),
         true <- :ets.insert_new(@table, {id, :moving}) do
      _ = stop(id)
      locked(id, fn -> yield_to(id, theirs) end)
    end
  end

  defp move_home(id) do
    home = Placement.home(id)

    if home != node() and Membership.live?(home),
      do: move(id, home),
      else: :ets.match_delete(@table, {id, :pending})
  end
end

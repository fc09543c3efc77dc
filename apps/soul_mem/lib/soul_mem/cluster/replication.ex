defmodule SoulMem.Cluster.Replication do
  @moduledoc """
  `replicas: 1`: every character's store has a copy on a second node, kept
  in step before each write is acknowledged, that takes over when the home
  node stays down.

  **Which node.** The replica of character `id` is the first live node after
  its home in the rendezvous ranking (`SoulMem.Cluster.Placement.ranking/1`),
  the same node that `Placement.home/1` names once the home has been down
  for `failover_after_ms` (app env `cluster: [failover_after_ms: 5_000]`).

  **Keeping it in step.** The character's store records the changeset of
  each write (`SoulMem.Store.Replica`, SQLite's session extension). After
  every request, timer or task the character process handles, and before
  its reply leaves, `sync/1` ships the new changesets as one numbered batch
  to the replica node, which applies them durably
  (`<data_dir>/replicas/<id>.db`) and answers. A replica that is new, out of
  step (a batch missing, another base), or on another node than before is
  rebuilt from a snapshot (`VACUUM INTO`, streamed with
  `SoulMem.Cluster.Transfer`, SHA-256 checked).

  **Taking over.** When the home has been down past the timeout, requests
  reach the replica node, which promotes its copy to the next epoch
  (`adopt/1`) and serves from it, replicating in turn to the next live node.
  A home that comes back finds the newer epoch elsewhere: its own copy is
  set aside (`SoulMem.Cluster.Conflicts`, reported when it holds anything
  the newer one lacks) and the character moves back to it at its next Idle
  (`SoulMem.Cluster.Moves`).

  **What can be lost.** With replication on and another node live: nothing
  acknowledged — a write is acknowledged only once the replica has it (a
  write the home committed but could not ship is retried with a snapshot
  before the reply). When no other node is live the home acknowledges
  alone (logged as degraded) and ships a snapshot as soon as one is back:
  those writes are lost only if the home's disk is lost before then. With
  replication off a character is on one disk: its writes are durable there,
  and it answers `:home_node_down` while that node is down.
  """

  require Logger

  alias SoulMem.{Store, Store.Replica}
  alias SoulMem.Cluster.{Membership, Placement, Transfer}

  @typedoc "Where a character's replica stands, on its home (kept in the process state)."
  @type link :: %{node: node(), base: String.t(), seq: non_neg_integer()} | :degraded | nil

  @doc "Whether replication is on: a cluster with `replicas: 1`."
  @spec enabled?() :: boolean()
  def enabled?, do: SoulMem.Cluster.config()[:replicas] == 1 and Membership.known() != nil

  @doc "How long a home node must be down before its replica takes over (ms)."
  @spec failover_after() :: non_neg_integer()
  def failover_after, do: SoulMem.Cluster.config()[:failover_after_ms] || 5_000

  @doc """
  The node that holds (or should hold) the replica of character `id` homed
  on this node: the first live node after this one in its ranking; `nil`
  when there is none.
  """
  @spec target(String.t()) :: node() | nil
  def target(id) do
    {before, from_here} = id |> Placement.ranking() |> Enum.split_while(&(&1 != node()))
    Enum.find(from_here ++ before, &(&1 != node() and Membership.live?(&1)))
  end

  @doc "The path of character `id`'s replica in this node's data directory."
  @spec path(String.t()) :: Path.t()
  def path(id), do: Store.path(Path.join(Store.data_dir(), "replicas"), id)

  @doc """
  Ships what `store` wrote since the last call to the replica of `id`
  (see the moduledoc) and returns the new link. Never fails the caller: a
  replica that cannot be reached is replaced by the next live node (with a
  snapshot); with none left the link is `:degraded` until one is back.
  """
  @spec sync(String.t(), Store.t() | nil, link()) :: link()
  def sync(_id, nil, link), do: link

  def sync(id, store, link) do
    if enabled?(), do: sync_enabled(id, store, link, target(id)), else: link
  end

  defp sync_enabled(id, store, link, nil) do
    # Nobody to replicate to: drop the changes; a snapshot follows later.
    _ = Replica.take_changes(store)
    if link != :degraded, do: Logger.warning("replication: #{id} has no live replica node")
    :degraded
  end

  defp sync_enabled(id, store, %{node: node} = link, node) do
    with {:ok, changes} <- Replica.take_changes(store),
         {:ok, link} <- ship(id, link, changes) do
      link
    else
      _ -> resync(id, store, node)
    end
  end

  defp sync_enabled(id, store, _link, node), do: resync(id, store, node)

  defp ship(_id, link, []), do: {:ok, link}

  defp ship(id, link, changes) do
    seq = link.seq + 1

    case call(link.node, :receive_batch, [id, link.base, seq, changes]) do
      :ok -> {:ok, %{link | seq: seq}}
      other -> {:error, other}
    end
  end

  # A snapshot of the store to `node`, stamped as a new base. Capture goes
  # on first (a character started before the cluster formed had it off).
  defp resync(id, store, node) do
    _ = Replica.capture(store, true)
    base = Base.url_encode64(:crypto.strong_rand_bytes(12), padding: false)
    temp = Path.join(System.tmp_dir!(), "soul_mem_snapshot_#{base}.db")

    result =
      with {:ok, _bytes} <- Replica.snapshot(store, temp),
           {:ok, _sent} <- Transfer.send_file(temp, id, node, :replica),
           :ok <- call(node, :receive_base, [id, base]) do
        %{node: node, base: base, seq: 0}
      end

    File.rm(temp)

    case result do
      %{} = link ->
        link

      error ->
        Logger.warning("replication: #{id} not replicated to #{node}: #{inspect(error)}")
        # Try the next node when that one is down now; else stay degraded.
        if Membership.live?(node) or target(id) == node,
          do: :degraded,
          else: sync_enabled(id, store, nil, target(id))
    end
  end

  defp call(node, fun, args) do
    :erpc.call(node, __MODULE__, fun, args, 30_000)
  catch
    kind, reason -> {:error, {kind, reason}}
  end

  @doc """
  For a character stored on this node, its home, and not running: gives
  its replica node a copy when it has none (a character that has not run
  since replication was turned on, or whose replica node changed). Run by
  the rebalance that membership changes start (`SoulMem.Cluster.Moves`).
  """
  @spec ensure_replica(String.t()) :: :ok | :degraded | {:error, term()}
  def ensure_replica(id) do
    with true <- enabled?() || :ok,
         true <- Store.exists?(Store.data_dir(), id) || :ok,
         node when node != nil <- target(id) || :degraded,
         {:error, _} <- call(node, :replica_state, [id]),
         {:ok, store} <- Store.open(Store.data_dir(), id, in_use_retries: 0) do
      try do
        case resync(id, store, node) do
          %{} -> :ok
          other -> {:error, other}
        end
      after
        Store.close(store)
      end
    else
      {:ok, %{}} -> :ok
      other -> other
    end
  end

  @doc """
  Whether this node stands in for `id`'s home: the first node of its
  ranking is another one, down (past the failover timeout, or routing would
  not have come here).
  """
  @spec standing_in?(String.t()) :: boolean()
  def standing_in?(id) do
    case Placement.ranking(id) do
      [first | _] -> first != node() and not Membership.live?(first)
      [] -> false
    end
  end

  @doc """
  Asks every character running on this node to replicate now (a node came
  back: a degraded one ships its snapshot without waiting for a request).
  """
  @spec nudge() :: :ok
  def nudge do
    if enabled?(), do: for({_id, pid} <- SoulMem.Characters.list(), do: send(pid, :replicate))
    :ok
  end

  @doc false
  # Replica node: where this node's replica of `id` stands.
  @spec replica_state(String.t()) :: {:ok, Replica.state()} | {:error, term()}
  def replica_state(id), do: Replica.state(path(id))

  @doc false
  # Replica node: a snapshot for `id` arrived (Transfer put it at path/1):
  # stamp it as `base`.
  @spec receive_base(String.t(), String.t()) :: :ok | {:error, term()}
  def receive_base(id, base), do: Replica.init(path(id), base)

  @doc false
  # Replica node: batch `seq` of `base` for `id`.
  @spec receive_batch(String.t(), String.t(), pos_integer(), [binary()]) :: :ok | {:error, term()}
  def receive_batch(id, base, seq, changes), do: Replica.apply(path(id), base, seq, changes)

  @doc """
  On the node that is now home to `id` (its old home down past the
  timeout): when this node has no store of `id` but a replica, promotes the
  replica to the next epoch and puts it in place as the store.
  `{:ok, epoch}`, `:none` when there is no replica here.
  """
  @spec adopt(String.t()) :: {:ok, pos_integer()} | :none | {:error, term()}
  def adopt(id) do
    replica = path(id)
    store = Store.path(Store.data_dir(), id)

    cond do
      File.exists?(store) or not File.exists?(replica) ->
        :none

      true ->
        with {:ok, epoch} <- Replica.promote(replica),
             :ok <- Store.rename_file(replica, store) do
          Logger.warning("replication: #{id} taken over on #{node()} at epoch #{epoch}")
          {:ok, epoch}
        end
    end
  end
end

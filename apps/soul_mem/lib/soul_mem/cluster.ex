defmodule SoulMem.Cluster do
  @moduledoc """
  SoulMem on several nodes: which nodes serve characters, where each
  character lives, and how nodes find each other. Off unless configured
  (`config :soul_mem, :cluster, enabled: true, discovery: [...]`, or the
  `SOUL_MEM_CLUSTER_*` variables of `config/runtime.exs`); a node that is
  not distributed, or not enabled, serves every character itself, exactly as
  a single node always did.

    * `SoulMem.Cluster.Discovery` — finds nodes and connects them
      (`SoulMem.Cluster.Discovery.Static`, `SoulMem.Cluster.Discovery.Gossip`);
    * `SoulMem.Cluster.Membership` — the SoulMem nodes (a `:pg` group) and
      their weights;
    * `SoulMem.Cluster.Placement` — each character's home node (weighted
      rendezvous hashing);
    * `SoulMem.Cluster.Router` — runs an operation on the home node
      (`:erpc`).

    * `SoulMem.Cluster.Moves` — moves characters whose home changed (a
      node joined, a drain) and finds the newest copy of one;
    * `SoulMem.Cluster.Replication` — `replicas: 1`: a second copy of every
      character kept in step before each write is acknowledged, which takes
      over when the home stays down;
    * `SoulMem.Cluster.Conflicts` — copies that lost to a newer one, kept
      and reported.

  A node keeps the characters it is home to in its own data directory.
  Without replication, when a node is down its characters answer `{:error,
  :home_node_down}` until it is back (or until an operator `forget/1`s it,
  after which they start afresh elsewhere); with `replicas: 1` they answer
  it only until the failover timeout, then their replica serves.
  """

  @doc "The cluster settings (app env `:cluster`), with defaults."
  @spec config() :: keyword()
  def config do
    Keyword.merge(
      [enabled: false, discovery: [], weight: nil, replicas: 0, failover_after_ms: 5_000],
      Application.get_env(:soul_mem, :cluster, [])
    )
  end

  @doc """
  Whether this node takes part in a cluster: enabled in the config and
  distributed (`--name`/`--sname`).
  """
  @spec enabled?() :: boolean()
  def enabled?, do: config()[:enabled] == true and Node.alive?()

  @doc """
  This node's placement weight: app env `cluster: [weight: w]`, by default
  its scheduler count (a node with twice the cores homes about twice the
  characters).
  """
  @spec weight() :: pos_integer()
  def weight do
    case config()[:weight] do
      w when is_integer(w) and w > 0 -> w
      _ -> System.schedulers_online()
    end
  end

  @doc """
  The children the runtime starts for the cluster: the `:pg` scope always
  (cheap, and lets a node join later), the membership, and one discovery
  process per configured strategy when enabled.
  """
  @spec children() :: [Supervisor.child_spec()]
  def children do
    scope = %{id: :pg, start: {:pg, :start_link, [SoulMem.Cluster.Membership.scope()]}}
    moves = SoulMem.Cluster.Moves

    if config()[:enabled] == true do
      discovery =
        for {strategy, opts} <- config()[:discovery] do
          Supervisor.child_spec({SoulMem.Cluster.Discovery, {strategy, opts}}, id: strategy)
        end

      [scope, moves, SoulMem.Cluster.Membership | discovery]
    else
      [scope, moves]
    end
  end

  @doc "The live SoulMem nodes (this one included when enabled), sorted."
  @spec members() :: [node()]
  def members, do: SoulMem.Cluster.Membership.live()

  @doc "Every SoulMem node this one knows, live or down, with its weight."
  @spec known() :: %{node() => pos_integer()}
  def known, do: SoulMem.Cluster.Membership.known()

  @doc """
  Forgets a node that is down for good: every node drops it from the
  placement, and its characters start afresh on their new home nodes (their
  stores stay in the dead node's data directory — copy them over first to
  keep them). `{:error, :alive}` while it is a live member.
  """
  @spec forget(node()) :: :ok | {:error, :alive}
  def forget(node) when is_atom(node), do: SoulMem.Cluster.Membership.forget(node)

  @doc """
  Drains live member `node`: moves every character it stores or runs
  (running ones are written back and stopped first) to the node that is its
  home without `node` (`SoulMem.Cluster.Moves`), then marks `node` drained
  on every member, so that placement skips it from then on — it stays a
  member, and homes no character. Requests for a character wait while it
  moves; none acknowledged is lost. Returns the moves by id (`{:ok, %{bytes,
  sha256, ms}}`).

  When a move fails, that character stays on `node`, serving, and `node` is
  not marked drained (placement would send its requests to a node without
  its file): `{:error, {:not_moved, %{id => reason}}}`; `node` keeps
  forwarding the moved ones, and `drain/1` again retries the rest.
  `{:error, :not_a_member}` for a node that is not a live member (or when
  this node is not in a cluster), `{:error, :last_node}` when every other
  node is drained already.
  """
  @spec drain(node()) ::
          {:ok, %{String.t() => {:ok, map()}}}
          | {:error, :not_a_member | :last_node | {:not_moved, %{String.t() => term()}}}
  def drain(node) when is_atom(node) do
    others = Map.delete(SoulMem.Cluster.Placement.candidates(), node)

    cond do
      SoulMem.Cluster.Membership.known() == nil or node not in members() ->
        {:error, :not_a_member}

      map_size(others) == 0 ->
        {:error, :last_node}

      true ->
        drain_member(node)
    end
  end

  defp drain_member(node) do
    moves = :erpc.call(node, SoulMem.Cluster.Moves, :drain_local, [], :infinity)
    failed = for {id, {:error, reason}} <- moves, into: %{}, do: {id, reason}

    if failed == %{} do
      :ok = :erpc.call(node, SoulMem.Cluster.Membership, :mark_drained, [node])
      {:ok, moves}
    else
      {:error, {:not_moved, failed}}
    end
  end

  @doc "The drained nodes (`drain/1`)."
  @spec drained() :: [node()]
  def drained, do: SoulMem.Cluster.Membership.drained() |> Enum.sort()

  @doc """
  Moves now, from this node, what should move (characters whose home is
  another live node; a running one at its next Idle) and sets aside copies
  that lost to a newer one. Membership changes run the same by themselves;
  returns when it is over.
  """
  @spec rebalance() :: :ok
  def rebalance, do: SoulMem.Cluster.Moves.rebalance_now()

  @doc "The reports of copies this node set aside (`SoulMem.Cluster.Conflicts`)."
  @spec conflicts() :: [map()]
  def conflicts, do: SoulMem.Cluster.Conflicts.list()

  @doc "The home node of character `id` (`SoulMem.Cluster.Placement.home/1`)."
  @spec home(String.t()) :: node()
  def home(id) when is_binary(id), do: SoulMem.Cluster.Placement.home(id)
end

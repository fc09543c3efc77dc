defmodule SoulMem.Cluster.Placement do
  @moduledoc """
  Each character's home node, by weighted rendezvous (highest random weight)
  hashing over the known SoulMem nodes (`SoulMem.Cluster.Membership`).

  Every node computes the same home from the same known set without asking
  anyone: character `id` scores `-w / ln(u)` on each node of weight `w`,
  where `u` in (0, 1) comes from SHA-256 of the node name and the id; the
  highest score wins. A node of weight `2w` wins about twice as often, and
  when a node is added or forgotten only the characters it wins or loses
  move (about `1/n` of them), never the others.

  Drained nodes (`SoulMem.Cluster.drain/1`) are skipped: a character's
  home is the best of the others (`candidates/0`), so draining a node moves
  only its own characters, each to the node that would have been its home
  without it.

  With replication on (`replicas: 1`, `SoulMem.Cluster.Replication`), a
  home that has been down for the failover timeout hands its characters to
  the next live node in their ranking — the node that holds their replica —
  until it is live again.

  Not in a cluster, every character's home is this node.
  """

  @two53 9_007_199_254_740_992

  @doc "The home node of character `id` over the known nodes (this node when not clustered)."
  @spec home(String.t()) :: node()
  def home(id) when is_binary(id) do
    case SoulMem.Cluster.Membership.known() do
      nil ->
        node()

      known when map_size(known) == 0 ->
        node()

      _known ->
        if SoulMem.Cluster.Replication.enabled?(), do: failover(id), else: pick(id, candidates())
    end
  end

  # The first node of the ranking that is live, or down for less than the
  # failover timeout (its characters wait for it: :home_node_down).
  defp failover(id) do
    timeout = SoulMem.Cluster.Replication.failover_after()
    [first | _] = ranking = ranking(id)

    Enum.find(ranking, first, fn node ->
      SoulMem.Cluster.Membership.down_for(node) < timeout
    end)
  end

  @doc """
  The candidate nodes (`candidates/0`) in the order of their score for
  `id`, best first: the home, then the node its replica goes to, and so on.
  """
  @spec ranking(String.t()) :: [node()]
  def ranking(id) when is_binary(id) do
    candidates()
    |> Enum.sort_by(fn {node, w} -> {score(id, node, w), node} end, :desc)
    |> Enum.map(&elem(&1, 0))
  end

  @doc """
  The known nodes that may home characters: all but the drained ones (all
  of them when every node is drained).
  """
  @spec candidates() :: %{node() => pos_integer()}
  def candidates do
    known = SoulMem.Cluster.Membership.known() || %{}
    open = Map.drop(known, MapSet.to_list(SoulMem.Cluster.Membership.drained()))
    if map_size(open) == 0, do: known, else: open
  end

  @doc "The node of `nodes` (`%{node => weight}`) with the highest score for `id`."
  @spec pick(String.t(), %{node() => pos_integer()}) :: node()
  def pick(id, nodes) when is_binary(id) and map_size(nodes) > 0 do
    {node, _w} = Enum.max_by(nodes, fn {node, w} -> {score(id, node, w), node} end)
    node
  end

  @doc "The weighted rendezvous score of `id` on `node` of weight `weight`."
  @spec score(String.t(), node(), pos_integer()) :: float()
  def score(id, node, weight) do
    <<x::53, _::bitstring>> = :crypto.hash(:sha256, [Atom.to_string(node), 0, id])
    # u in (0, 1), never 0 or 1, so ln(u) is finite and negative.
    u = (x + 1) / (@two53 + 1)
    -weight / :math.log(u)
  end
end

defmodule SoulMem.Cluster.Membership do
  @moduledoc """
  Which nodes are SoulMem nodes, live or down, and their placement weights.

  Membership is a `:pg` group (`scope/0`, group `:soul_mem_nodes`) that this
  process joins when the cluster is enabled, rather than
  `:net_kernel.monitor_nodes/1`: `Node.list/0` also holds remote shells,
  `mix soul.token` VMs, test controllers and nodes of other applications,
  none of which may home a character; a `:pg` member is a running SoulMem
  runtime, and `:pg` drops it by itself when its node goes down or the
  runtime stops.

  Placement is computed over the *known* nodes — every SoulMem node seen
  since this data directory was first used, with the weight it announced —
  not over the live ones: a node that goes down keeps its characters (their
  stores are on its disk), which answer `{:error, :home_node_down}` until it
  is back, instead of starting empty somewhere else. Members exchange what
  they know when they meet (a newcomer learns of nodes that are down now);
  the set is kept in `<data_dir>/cluster_nodes.json` across restarts, and
  `forget/1` removes a node for good.

  The known set is published in `:persistent_term` (it changes only when a
  node joins or is forgotten), so `SoulMem.Cluster.Placement.home/1` costs no
  message.
  """

  use GenServer

  require Logger

  @scope SoulMem.Cluster.Scope
  @group :soul_mem_nodes
  @known_key {__MODULE__, :known}
  @drained_key {__MODULE__, :drained}
  @down_key {__MODULE__, :down_since}
  @file_name "cluster_nodes.json"

  @doc "The `:pg` scope of SoulMem's cluster groups."
  @spec scope() :: atom()
  def scope, do: @scope

  @doc "Starts the membership of this node (joins the group)."
  @spec start_link(keyword()) :: GenServer.on_start()
  def start_link(opts \\ []), do: GenServer.start_link(__MODULE__, opts, name: __MODULE__)

  @doc """
  The known nodes with their weights (`%{node => weight}`), or `nil` when
  this node is not in a cluster.
  """
  @spec known() :: %{node() => pos_integer()} | nil
  def known, do: :persistent_term.get(@known_key, nil)

  @doc """
  The drained nodes (`SoulMem.Cluster.drain/1`): members that home no
  character. Empty when this node is not in a cluster.
  """
  @spec drained() :: MapSet.t(node())
  def drained, do: :persistent_term.get(@drained_key, MapSet.new())

  @doc """
  Marks `node` drained on every live member (and in each one's
  `cluster_nodes.json`): placement skips it from then on. Called by
  `SoulMem.Cluster.drain/1` once the node's characters have moved.
  """
  @spec mark_drained(node()) :: :ok
  def mark_drained(node) when is_atom(node),
    do: GenServer.call(__MODULE__, {:mark_drained, node})

  @doc """
  How long (ms) known node `node` has been down as this node saw it: since
  it left (0 while its leave is on its way), or since this node's
  membership started when it was never seen live; 0 while it is live.
  """
  @spec down_for(node()) :: non_neg_integer()
  def down_for(node) when is_atom(node) do
    if live?(node) do
      0
    else
      {since, started, seen} = :persistent_term.get(@down_key, {%{}, 0, MapSet.new()})

      cond do
        Map.has_key?(since, node) -> System.monotonic_time(:millisecond) - since[node]
        # Gone from :pg, its leave not handled yet: down from now.
        MapSet.member?(seen, node) -> 0
        true -> System.monotonic_time(:millisecond) - started
      end
    end
  end

  @doc "The live SoulMem nodes, sorted (`[node()]` when not in a cluster)."
  @spec live() :: [node()]
  def live do
    if known() do
      @scope |> :pg.get_members(@group) |> Enum.map(&node/1) |> Enum.uniq() |> Enum.sort()
    else
      [node()]
    end
  end

  @doc "Whether `node` is a live SoulMem node (this node always is)."
  @spec live?(node()) :: boolean()
  def live?(node) when node == node(), do: true
  def live?(node), do: Enum.any?(:pg.get_members(@scope, @group), &(node(&1) == node))

  @doc """
  Waits until this node knows every node of `nodes` with its weight and
  sees it live, i.e. until they agree on every character's home: for boot
  scripts and tests. `{:error, :timeout}` after `timeout` ms.
  """
  @spec await([node()], non_neg_integer()) :: :ok | {:error, :timeout}
  def await(nodes, timeout \\ 5_000) when is_list(nodes),
    do: GenServer.call(__MODULE__, {:await, nodes, timeout}, timeout + 1_000)

  @doc "Drops a node that is down from every member's known set; see `SoulMem.Cluster.forget/1`."
  @spec forget(node()) :: :ok | {:error, :alive}
  def forget(node), do: GenServer.call(__MODULE__, {:forget, node})

  @impl true
  def init(_opts) do
    # terminate/2 withdraws the published set, so a stopped runtime is not
    # taken for a cluster member by Placement.
    Process.flag(:trap_exit, true)
    file = Path.join(SoulMem.Store.data_dir(), @file_name)
    {known, drained} = read_file(file)
    known = Map.put(known, node(), SoulMem.Cluster.weight())
    state = %{file: file, known: known, drained: drained, waiters: [], down: %{}}
    :persistent_term.put(@down_key, {%{}, System.monotonic_time(:millisecond), MapSet.new()})
    publish(state)
    :ok = :pg.join(@scope, @group, self())
    {ref, groups} = :pg.monitor_scope(@scope)
    state = Map.put(state, :ref, ref)
    {:ok, met(state, Map.get(groups, @group, []))}
  end

  @impl true
  def handle_call({:await, nodes, timeout}, from, state) do
    ref = make_ref()
    Process.send_after(self(), {:await_expired, ref}, timeout)
    {:noreply, notify(%{state | waiters: [{ref, from, nodes} | state.waiters]})}
  end

  def handle_call({:mark_drained, node}, _from, state) do
    for pid <- :pg.get_members(@scope, @group),
        node(pid) != node(),
        do: send(pid, {:drained, node})

    {:reply, :ok, add_drained(state, [node])}
  end

  def handle_call({:forget, node}, _from, state) do
    if live?(node) do
      {:reply, {:error, :alive}, state}
    else
      for pid <- :pg.get_members(@scope, @group),
          node(pid) != node(),
          do: send(pid, {:forget, node})

      {:reply, :ok, drop(state, node)}
    end
  end

  @impl true
  def handle_info({ref, :join, @group, pids}, %{ref: ref} = state) do
    state = state |> met(pids) |> notify() |> up(Enum.map(pids, &node/1))
    rebalance()
    {:noreply, state}
  end

  # A node whose last member left is down from now (for the failover timeout).
  def handle_info({ref, :leave, @group, pids}, %{ref: ref} = state) do
    gone = pids |> Enum.map(&node/1) |> Enum.uniq() |> Enum.reject(&live?/1)
    now = System.monotonic_time(:millisecond)
    {:noreply, set_down(state, Map.merge(state.down, Map.new(gone, &{&1, now})))}
  end

  def handle_info({ref, _event, _group, _pids}, %{ref: ref} = state), do: {:noreply, state}

  def handle_info({:await_expired, ref}, state) do
    {expired, waiters} = Enum.split_with(state.waiters, &(elem(&1, 0) == ref))
    for {_ref, from, _nodes} <- expired, do: GenServer.reply(from, {:error, :timeout})
    {:noreply, %{state | waiters: waiters}}
  end

  # A member's own weight is authoritative; of other nodes it only adds what
  # this node did not know.
  def handle_info({:hello, from, weight, known}, state) when is_atom(from) and is_map(known) do
    merged =
      state.known
      |> Map.merge(known, fn _node, mine, theirs -> mine || theirs end)
      |> Map.put(from, weight)

    if merged != state.known, do: rebalance()
    {:noreply, notify(update(state, merged))}
  end

  def handle_info({:drained, node}, state) when is_atom(node),
    do: {:noreply, add_drained(state, [node])}

  def handle_info({:forget, node}, state), do: {:noreply, drop(state, node)}
  def handle_info(_other, state), do: {:noreply, state}

  defp up(state, nodes) do
    {since, started, seen} = :persistent_term.get(@down_key)
    seen = MapSet.union(seen, MapSet.new(nodes))
    :persistent_term.put(@down_key, {since, started, seen})
    set_down(state, Map.drop(state.down, nodes))
  end

  defp set_down(%{down: down} = state, down), do: state

  defp set_down(state, down) do
    {_since, started, seen} = :persistent_term.get(@down_key)
    :persistent_term.put(@down_key, {down, started, seen})
    %{state | down: down}
  end

  # Characters whose home changed move (SoulMem.Cluster.Moves); the known
  # set a hello brings may change homes too.
  defp rebalance do
    if Process.whereis(SoulMem.Cluster.Moves), do: send(SoulMem.Cluster.Moves, :rebalance)
    SoulMem.Cluster.Replication.nudge()
  end

  # Tell every remote member that appeared what this node knows (it answers
  # with its own hello, since this node's join reaches it too).
  defp met(state, pids) do
    for pid <- pids, node(pid) != node() do
      send(pid, {:hello, node(), SoulMem.Cluster.weight(), state.known})
      # Separate messages, so that a node of an older release still reads the hello.
      for drained <- state.drained, do: send(pid, {:drained, drained})
    end

    update(state, Map.merge(state.known, Map.new(pids, &{node(&1), nil}), fn _n, w, _ -> w end))
  end

  # A node heard of only through :pg (its hello still on the way) has no
  # weight yet and is placed once it arrives.
  defp update(state, known), do: commit(state, %{state | known: known})

  # Publishes and saves a changed known or drained set.
  defp commit(state, state), do: state

  defp commit(_old, state) do
    publish(state)
    save(state)
    state
  end

  defp notify(state) do
    {done, waiting} =
      Enum.split_with(state.waiters, fn {_ref, _from, nodes} ->
        Enum.all?(nodes, &(is_integer(state.known[&1]) and live?(&1)))
      end)

    for {_ref, from, _nodes} <- done, do: GenServer.reply(from, :ok)
    %{state | waiters: waiting}
  end

  defp drop(state, node) when node == node(), do: state

  defp drop(state, node) do
    commit(state, %{
      state
      | known: Map.delete(state.known, node),
        drained: MapSet.delete(state.drained, node)
    })
  end

  # Drained is for good (until the node is forgotten): a set only grows.
  defp add_drained(state, nodes),
    do: commit(state, %{state | drained: MapSet.union(state.drained, MapSet.new(nodes))})

  defp publish(state) do
    weighted = for {node, w} <- state.known, is_integer(w), into: %{}, do: {node, w}
    :persistent_term.put(@drained_key, state.drained)
    :persistent_term.put(@known_key, weighted)
  end

  defp save(state) do
    doc = for {node, w} <- state.known, is_integer(w), into: %{}, do: {Atom.to_string(node), w}
    drained = Enum.map(state.drained, &Atom.to_string/1)
    json = SoulMem.JSON.encode!(%{"nodes" => doc, "drained" => drained})

    case SoulMem.JSON.write_file_atomic(state.file, json) do
      :ok -> :ok
      {:error, reason} -> Logger.warning("cluster: cannot save #{state.file}: #{inspect(reason)}")
    end
  end

  defp read_file(file) do
    with {:ok, json} <- File.read(file),
         {:ok, %{"nodes" => nodes} = doc} when is_map(nodes) <- SoulMem.JSON.decode(json) do
      known =
        for {name, w} <- nodes, is_integer(w) and w > 0, into: %{}, do: {String.to_atom(name), w}

      drained = for name <- List.wrap(doc["drained"]), is_binary(name), do: String.to_atom(name)
      {known, MapSet.new(drained)}
    else
      _ -> {%{}, MapSet.new()}
    end
  end

  @impl true
  def terminate(_reason, _state) do
    :persistent_term.erase(@down_key)
    :persistent_term.erase(@known_key)
    :persistent_term.erase(@drained_key)
    :ok
  end
end

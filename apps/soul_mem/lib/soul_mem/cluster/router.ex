defmodule SoulMem.Cluster.Router do
  @moduledoc """
  Runs an operation on a character's home node.

  Routing is `:erpc` to the node `SoulMem.Cluster.Placement` computes, not a
  cluster-wide registry (`:global`): the home follows from the id alone, so
  a request costs one round trip and no lookup, and nothing cluster-wide is
  locked when a character starts (`:global` takes a cluster lock for every
  registration, and resolves name clashes after a partition by killing a
  process — here the character that owns a store file). The operation runs
  on the home node as a whole (a recall's retrieval included): the graph is
  a NIF resource that cannot leave its node.

  A routed operation runs with a mark in its process that makes every
  routing decision inside it local, so two nodes that momentarily disagree
  about a home never bounce a request back and forth.

  A character being moved (`SoulMem.Cluster.Moves`) answers `{:error,
  :moving}`; `route/6` retries it, re-reading the placement, for up to
  `:move_wait_ms` (app env, 10 s) before returning that error — a request
  during a move waits instead of failing.

  `{:error, :home_node_down}` when the home node is not a live member (or
  the connection drops during the call), `{:error, :timeout}` when it does
  not answer within the operation's timeout plus a second.
  """

  alias SoulMem.Cluster.{Membership, Placement}

  @routed :soul_mem_routed
  @forwarded :soul_mem_forwarded
  @margin_ms 1_000

  @typedoc "Where an operation on a character runs."
  @type target :: :local | {:remote, node()} | :down

  @doc """
  Where an operation on `character` (an id, a pid, anything else) runs:
  `:local` (not clustered, already routed, or this node is home),
  `{:remote, node}` or `:down` (its home node is not live).
  """
  @spec target(term()) :: target()
  def target(character) do
    cond do
      Process.get(@routed) == true -> :local
      Membership.known() == nil -> :local
      is_pid(character) -> node_target(node(character))
      is_binary(character) -> node_target(Placement.home(character))
      true -> :local
    end
  end

  defp node_target(node) when node == node(), do: :local

  defp node_target(node) do
    if Membership.live?(node), do: {:remote, node}, else: :down
  end

  @doc """
  Runs `local` here when `character` lives here, else
  `apply(module, fun, args)` on its home node within `timeout` (+1 s).
  """
  @spec route(term(), module(), atom(), [term()], timeout(), (() -> result)) ::
          result | {:error, :home_node_down | :timeout | :moving}
        when result: term()
  def route(character, module, fun, args, timeout, local) do
    deadline = System.monotonic_time(:millisecond) + move_wait()
    route(character, module, fun, args, timeout, local, deadline, 5)
  end

  # Only the outermost call retries: inside a routed operation every
  # decision is local and would see the same mark again.
  defp route(character, module, fun, args, timeout, local, deadline, pause) do
    case route_once(character, module, fun, args, timeout, local) do
      {:error, :moving} = moving ->
        if Process.get(@routed) != true and System.monotonic_time(:millisecond) < deadline do
          # A move takes seconds: back off up to 100 ms between tries.
          Process.sleep(pause)
          route(character, module, fun, args, timeout, local, deadline, min(pause * 2, 100))
        else
          moving
        end

      result ->
        result
    end
  end

  defp move_wait, do: Application.get_env(:soul_mem, :move_wait_ms, 10_000)

  defp route_once(character, module, fun, args, timeout, local) do
    case target(character) do
      :local -> local.()
      :down -> {:error, :home_node_down}
      {:remote, node} -> remote(node, module, fun, args, timeout)
    end
  end

  @doc "Calls `apply(module, fun, args)` on `node` as a routed operation (see `route/6`)."
  @spec remote(node(), module(), atom(), [term()], timeout()) ::
          term() | {:error, :home_node_down | :timeout}
  def remote(node, module, fun, args, timeout),
    do: call_entry(node, :run_routed, [module, fun, args], timeout)

  defp call_entry(node, entry, args, timeout) do
    :erpc.call(node, __MODULE__, entry, args, erpc_timeout(timeout))
  catch
    :error, {:erpc, :noconnection} -> {:error, :home_node_down}
    :error, {:erpc, :timeout} -> {:error, :timeout}
  end

  @doc """
  Forwards an operation from a node that placement names but that does not
  hold the character (it moved, or is held elsewhere) to `node`, which
  does. A forwarded operation is not forwarded again: two nodes that
  momentarily each think the other holds it answer `{:error, :moving}`,
  which the caller's `route/6` retries, instead of bouncing it.
  """
  @spec forward(node(), module(), atom(), [term()], timeout()) ::
          term() | {:error, :home_node_down | :timeout | :moving}
  def forward(node, module, fun, args, timeout) do
    if Process.get(@forwarded) == true,
      do: {:error, :moving},
      else: call_entry(node, :run_forwarded, [module, fun, args], timeout)
  end

  @doc false
  @spec run_forwarded(module(), atom(), [term()]) :: term()
  def run_forwarded(module, fun, args) do
    Process.put(@forwarded, true)
    run_routed(module, fun, args)
  end

  @doc false
  # The entry point on the home node: everything inside runs locally.
  @spec run_routed(module(), atom(), [term()]) :: term()
  def run_routed(module, fun, args) do
    Process.put(@routed, true)
    apply(module, fun, args)
  end

  @doc """
  Runs `apply(module, fun, args)` on every live SoulMem node (this one too)
  within `timeout`; the results of the nodes that answered, as
  `{node, result}`, sorted by node.
  """
  @spec gather(module(), atom(), [term()], timeout()) :: [{node(), term()}]
  def gather(module, fun, args, timeout \\ 10_000) do
    nodes = Membership.live()

    nodes
    |> :erpc.multicall(__MODULE__, :run_routed, [module, fun, args], timeout)
    |> Enum.zip(nodes)
    |> Enum.flat_map(fn
      {{:ok, result}, node} -> [{node, result}]
      {_failed, _node} -> []
    end)
    |> Enum.sort_by(&elem(&1, 0))
  end

  defp erpc_timeout(:infinity), do: :infinity
  defp erpc_timeout(ms) when is_integer(ms), do: ms + @margin_ms
end

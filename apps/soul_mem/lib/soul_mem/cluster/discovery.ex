defmodule SoulMem.Cluster.Discovery do
  @moduledoc """
  Finds the other SoulMem nodes and connects to them with `Node.connect/1`
  (the shared cookie, or TLS distribution, authenticates the connection
  itself; discovery only says where to dial).

  A strategy implements this behaviour and runs inside one process of this
  module (started by `SoulMem.Cluster.children/0` for each `{strategy, opts}`
  of the `:discovery` setting): `c:init/1` once, then `c:handle_info/2` for
  every message the process gets (its own timers, UDP packets). Each
  callback returns the nodes it learnt of; this process connects to those
  that are not connected yet. Strategies: `SoulMem.Cluster.Discovery.Static`
  (a list, or `.hosts.erlang`) and `SoulMem.Cluster.Discovery.Gossip` (UDP
  multicast heartbeats authenticated with HMAC-SHA256).
  """

  use GenServer

  require Logger

  @doc "Sets the strategy up (sockets, timers); the nodes it knows at once."
  @callback init(opts :: keyword()) :: {:ok, [node()], state :: term()} | {:error, term()}

  @doc "Handles a message of the strategy's process; the nodes it learnt of."
  @callback handle_info(message :: term(), state :: term()) :: {:ok, [node()], state :: term()}

  @doc "Counters and settings for operators and tests."
  @callback stats(state :: term()) :: map()

  @doc "Starts the process of `strategy` with `opts`."
  @spec start_link({module(), keyword()}) :: GenServer.on_start()
  def start_link({strategy, opts}) when is_atom(strategy) and is_list(opts) do
    case Keyword.fetch(opts, :name) do
      {:ok, name} -> GenServer.start_link(__MODULE__, {strategy, opts}, name: name)
      :error -> GenServer.start_link(__MODULE__, {strategy, opts})
    end
  end

  @doc "The strategy's counters (`c:stats/1`), e.g. packets accepted and rejected."
  @spec stats(GenServer.server()) :: map()
  def stats(server), do: GenServer.call(server, :stats)

  @impl GenServer
  def init({strategy, opts}) do
    case strategy.init(opts) do
      {:ok, nodes, state} ->
        connect(nodes)
        {:ok, {strategy, state}}

      {:error, reason} ->
        {:stop, reason}
    end
  end

  @impl GenServer
  def handle_call(:stats, _from, {strategy, state} = s), do: {:reply, strategy.stats(state), s}

  @impl GenServer
  def handle_info(message, {strategy, state}) do
    {:ok, nodes, state} = strategy.handle_info(message, state)
    connect(nodes)
    {:noreply, {strategy, state}}
  end

  # Only nodes not connected yet are dialled: a heartbeat every second from
  # a connected node costs nothing.
  defp connect(nodes) do
    connected = MapSet.new(Node.list())

    for node <- nodes, node != node(), not MapSet.member?(connected, node) do
      case Node.connect(node) do
        true -> Logger.info("cluster: connected to #{node}")
        _ -> Logger.debug("cluster: #{node} did not answer")
      end
    end

    :ok
  end
end

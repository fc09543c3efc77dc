defmodule SoulMem.Cluster.Discovery.Gossip do
  @moduledoc """
  LAN discovery by UDP multicast heartbeats, after libcluster's Gossip
  strategy (same default group 233.252.1.32 and port 45892) but
  authenticated: every packet is a `SoulMem.Cluster.Heartbeat` — node name,
  time and nonce under an HMAC-SHA256 of the shared secret
  (`SOUL_MEM_CLUSTER_SECRET`). libcluster sends `term_to_binary` terms,
  optionally encrypted without a MAC, and decodes what arrives with
  `binary_to_term`; here a packet is MAC-checked in constant time before
  any field is read, decoded from a fixed layout, and refused when it is
  outside the time window or its nonce was seen (a replay). Refusals are
  counted (`SoulMem.Cluster.Discovery.stats/1`) and logged at most once per
  `:log_every_ms` per reason.

  Options: `:secret` (required, at least 16 bytes), `:group` (multicast
  address, default `{233, 252, 1, 32}`), `:port` (45892), `:ttl` (1: the
  local segment), `:interface` (the address to send from and join the group
  on, default `{0, 0, 0, 0}`), `:interval_ms` (1000, jittered ±25 %),
  `:window_ms` (30 000), `:log_every_ms` (10 000).
  """

  @behaviour SoulMem.Cluster.Discovery

  require Logger

  alias SoulMem.Cluster.Heartbeat
  alias SoulMem.Cluster.Heartbeat.Replay

  @impl true
  def init(opts) do
    secret = Keyword.get(opts, :secret)
    group = Keyword.get(opts, :group, {233, 252, 1, 32})
    port = Keyword.get(opts, :port, 45_892)
    interface = Keyword.get(opts, :interface, {0, 0, 0, 0})
    window = Keyword.get(opts, :window_ms, 30_000)

    socket_opts = [
      :binary,
      active: true,
      reuseaddr: true,
      ip: {0, 0, 0, 0},
      multicast_loop: true,
      multicast_ttl: Keyword.get(opts, :ttl, 1),
      multicast_if: interface,
      add_membership: {group, interface}
    ]

    with :ok <- check_secret(secret),
         {:ok, socket} <- :gen_udp.open(port, socket_opts) do
      state = %{
        socket: socket,
        secret: secret,
        group: group,
        port: port,
        interval: Keyword.get(opts, :interval_ms, 1_000),
        window: window,
        replay: Replay.new(window),
        log_every: Keyword.get(opts, :log_every_ms, 10_000),
        logged: %{},
        counts: %{sent: 0, accepted: 0},
        seen: MapSet.new()
      }

      send(self(), :beat)
      {:ok, [], state}
    end
  end

  @impl true
  def handle_info(:beat, state) do
    packet = Heartbeat.encode(node(), state.secret)
    _ = :gen_udp.send(state.socket, state.group, state.port, packet)
    jitter = div(state.interval, 4)
    Process.send_after(self(), :beat, state.interval - jitter + :rand.uniform(2 * jitter + 1))
    {:ok, [], count(state, :sent)}
  end

  def handle_info({:udp, socket, ip, port, packet}, %{socket: socket} = state) do
    case Heartbeat.verify(packet, state.secret, state.replay, window_ms: state.window) do
      {:ok, %{node: node}, replay} when node == node() ->
        {:ok, [], %{state | replay: replay}}

      {:ok, %{node: node}, replay} ->
        state = %{count(state, :accepted) | replay: replay, seen: MapSet.put(state.seen, node)}
        {:ok, [node], state}

      {:error, reason} ->
        {:ok, [], reject(state, reason, ip, port)}
    end
  end

  def handle_info(_other, state), do: {:ok, [], state}

  @impl true
  def stats(state) do
    Map.merge(state.counts, %{
      group: state.group,
      port: state.port,
      nodes: MapSet.to_list(state.seen),
      nonces: Replay.size(state.replay)
    })
  end

  defp check_secret(secret) when is_binary(secret) and byte_size(secret) >= 16, do: :ok
  defp check_secret(_), do: {:error, :cluster_secret_missing_or_shorter_than_16_bytes}

  defp count(state, key), do: %{state | counts: Map.update(state.counts, key, 1, &(&1 + 1))}

  # Anyone on the segment can send to the group: one line per reason and
  # period, with how many were refused since the last one, so a flood cannot
  # flood the log.
  defp reject(state, reason, ip, port) do
    state = count(state, {:rejected, reason})
    now = System.monotonic_time(:millisecond)
    {last, suppressed} = Map.get(state.logged, reason, {nil, 0})

    if last == nil or now - last >= state.log_every do
      Logger.warning(
        "cluster gossip: ignored a #{reason} packet from #{:inet.ntoa(ip)}:#{port}" <>
          if(suppressed > 0, do: " (#{suppressed} more since the last report)", else: "")
      )

      %{state | logged: Map.put(state.logged, reason, {now, 0})}
    else
      %{state | logged: Map.put(state.logged, reason, {last, suppressed + 1})}
    end
  end
end

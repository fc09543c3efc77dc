# Replication and failover (issue 19, item 4): three SoulMem nodes as OTP
# :peer nodes on loopback (static list), persisted characters.
#
#   1. the cost of replication on an acknowledged write: push p50/p99 of a
#      character homed on another node, with replicas 0 and with replicas 1
#      (the write is applied on the replica before the answer);
#   2. failover: the home VM is killed (kill -9); how long until a request
#      through another node is served again (by the replica), with the
#      failover timeout at its default of 5 s, and whether every
#      acknowledged write is there.
#
#   MIX_ENV=test mix run bench/failover.exs -- --writes 500
Code.require_file("../apps/soul_mem/test/support/cluster_support.ex", __DIR__)

{opts, _, _} = OptionParser.parse(System.argv(), strict: [writes: :integer])
writes = Keyword.get(opts, :writes, 500)

defmodule Bench do
  def start(tag, replicas, root) do
    names = for n <- [:a, :b, :c], do: :"fo_#{tag}_#{n}"
    nodes = for name <- names, do: :"#{name}@127.0.0.1"
    discovery = [{SoulMem.Cluster.Discovery.Static, nodes: nodes}]

    started =
      for name <- names do
        cluster = [enabled: true, weight: 1, discovery: discovery, replicas: replicas]
        {peer, node} = SoulMem.ClusterSupport.start_peer(name, cluster, root)
        :ok = :erpc.call(node, Application, :put_env, [:soul_mem, :persist, true])
        :ok = :erpc.call(node, Application, :put_env, [:soul_mem, :window, 100_000])
        {peer, node}
      end

    for node <- nodes, do: :ok = :erpc.call(node, SoulMem.Cluster.Membership, :await, [nodes])
    started
  end

  def message(text), do: %{role: :user, text: text, at: DateTime.utc_now()}

  # Pushes through `via` to `id`; the latency of each, sorted (µs).
  def pushes(via, id, n, prefix) do
    for(i <- 1..n) do
      {us, :ok} = :timer.tc(fn -> :erpc.call(via, SoulMem, :push, [id, message("#{prefix}#{i}")]) end)
      us
    end
    |> Enum.sort()
  end

  def pct(sorted, p), do: Enum.at(sorted, min(length(sorted) - 1, trunc(p * length(sorted))))
  def ms(us), do: Float.round(us / 1000, 2)

  def home_other_than(via, prefix) do
    Enum.find(for(i <- 1..100, do: "#{prefix}-#{i}"), &(:erpc.call(via, SoulMem.Cluster, :home, [&1]) != via))
  end

  def until_served(via, id, started) do
    case :erpc.call(via, SoulMem, :ensure_started, [id]) do
      {:ok, _} -> System.monotonic_time(:millisecond) - started
      {:error, _} -> Process.sleep(10) && until_served(via, id, started)
    end
  end
end

:ok = SoulMem.ClusterSupport.distribution()
:ok = :net_kernel.monitor_nodes(true)
root = Path.join(System.tmp_dir!(), "soul_mem_failover_#{System.unique_integer([:positive])}")

results =
  for replicas <- [0, 1] do
    started = Bench.start("r#{replicas}", replicas, root)
    [{_, via} | _] = started
    id = Bench.home_other_than(via, "writer")
    {:ok, pid} = :erpc.call(via, SoulMem, :ensure_started, [id])
    _warm = Bench.pushes(via, id, 50, "warm")
    latencies = Bench.pushes(via, id, writes, "m")
    {replicas, started, id, node(pid), latencies}
  end

for {replicas, _started, _id, _home, latencies} <- results do
  IO.puts(
    "replicas #{replicas}: #{length(latencies)} acknowledged pushes routed to another node: " <>
      "p50 #{Bench.ms(Bench.pct(latencies, 0.5))} ms, p99 #{Bench.ms(Bench.pct(latencies, 0.99))} ms"
  )
end

# Failover with replicas 1: kill -9 the home.
{1, started, id, home, _} = List.keyfind(results, 1, 0)
[{_, via} | _] = started
{peer, ^home} = List.keyfind(started, home, 1)
os_pid = :erpc.call(home, :os, :getpid, [])
Process.unlink(peer)
killed = System.monotonic_time(:millisecond)
{_, 0} = System.cmd("kill", ["-9", to_string(os_pid)])

receive do
  {:nodedown, ^home} -> :ok
after
  10_000 -> raise "the home did not go down"
end

served_after = Bench.until_served(via, id, killed)
{:ok, window} = :erpc.call(via, SoulMem.Character, :window, [id])
texts = window |> SoulMem.Window.visible() |> Enum.map(& &1.text)
expected = for(i <- 1..50, do: "warm#{i}") ++ for(i <- 1..writes, do: "m#{i}")

IO.puts("""
failover (replicas 1, failover_after_ms 5000): served again #{served_after} ms after kill -9 of the home
acknowledged writes present after failover: #{Enum.count(expected, &(&1 in texts))} of #{length(expected)} (#{if texts == expected, do: "identical, in order", else: "DIFFERENT"})
""")

File.rm_rf(root)

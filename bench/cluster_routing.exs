# What routing to the home node adds to a recall (issue 19): two SoulMem
# nodes as OTP :peer nodes on loopback (static list), the demo character
# homed on one of them; the same recall timed on its home node (local) and
# on the other node (routed over :erpc), interleaved, each measured inside
# the node that serves the request.
#
#   MIX_ENV=test mix run bench/cluster_routing.exs -- --recalls 500
Code.require_file("../apps/soul_mem/test/support/cluster_support.ex", __DIR__)

{opts, _, _} = OptionParser.parse(System.argv(), strict: [recalls: :integer])
recalls = Keyword.get(opts, :recalls, 500)

:ok = SoulMem.ClusterSupport.distribution()
root = Path.join(System.tmp_dir!(), "soul_mem_bench_#{System.unique_integer([:positive])}")
names = [:bench_a, :bench_b]
nodes = Enum.map(names, &:"#{&1}@127.0.0.1")
cluster = [enabled: true, weight: 1, discovery: [{SoulMem.Cluster.Discovery.Static, nodes: nodes}]]
[{_, a}, {_, b}] = Enum.map(names, &SoulMem.ClusterSupport.start_peer(&1, cluster, root))
for node <- nodes, do: :ok = :erpc.call(node, SoulMem.Cluster.Membership, :await, [nodes, 10_000])

id = "demo"
home = :erpc.call(a, SoulMem.Cluster, :home, [id])
away = if home == a, do: b, else: a
{:ok, _} = :erpc.call(away, SoulMem, :ensure_started, [id])

request = fn i -> %{text: "你还记得和小白吃麻辣烫那次吗？第#{i}次"} end

time = fn node, i ->
  {us, {:ok, _}} = :erpc.call(node, :timer, :tc, [SoulMem, :recall, [id, request.(i)]])
  us
end

# Warm both paths (code loading, connections, caches).
for i <- 1..20, do: {time.(home, i), time.(away, i)}

{local, routed} =
  1..recalls
  |> Enum.map(fn i -> {time.(home, i), time.(away, i)} end)
  |> Enum.unzip()

pct = fn list, p ->
  sorted = Enum.sort(list)
  Enum.at(sorted, min(length(sorted) - 1, round(p * (length(sorted) - 1)))) / 1000
end

IO.puts("recall of #{id} (home #{home}), #{recalls} each, interleaved")
IO.puts("| | p50 | p95 | p99 |")
IO.puts("|---|---|---|---|")

for {label, list} <- [{"on the home node", local}, {"routed from the other node", routed}] do
  IO.puts(
    "| #{label} | #{pct.(list, 0.5)} ms | #{pct.(list, 0.95)} ms | #{pct.(list, 0.99)} ms |"
  )
end

IO.puts("added by routing (p50): #{Float.round(pct.(routed, 0.5) - pct.(local, 0.5), 3)} ms")
File.rm_rf(root)

defmodule SoulMem.ClusterTest do
  # Three SoulMem nodes as OTP :peer nodes on loopback (SoulMem.ClusterSupport).
  # Tagged :cluster (mix test --exclude cluster leaves them out); they run in
  # the normal suite and are excluded with a message only where this VM cannot
  # be distributed (test_helper.exs).
  use ExUnit.Case, async: false

  import ExUnit.CaptureLog

  alias SoulMem.ClusterSupport
  alias SoulMem.Cluster.{Discovery, Heartbeat}

  @moduletag :cluster
  @moduletag timeout: 120_000

  @secret "cluster-test-secret-0123456789abcdef"

  setup do
    root = Path.join(System.tmp_dir!(), "soul_mem_cluster_#{System.unique_integer([:positive])}")
    on_exit(fn -> File.rm_rf(root) end)
    %{root: root, port: 40_000 + :rand.uniform(9_000)}
  end

  defp gossip(port),
    do: [
      {Discovery.Gossip,
       secret: @secret, port: port, interface: {127, 0, 0, 1}, interval_ms: 200, name: Gossip}
    ]

  defp cluster(discovery), do: [enabled: true, weight: 1, discovery: discovery]

  defp start_nodes(names, cluster_for, root) do
    for name <- names, do: ClusterSupport.start_peer(name, cluster_for.(name), root)
  end

  defp await(node, nodes),
    do: assert(:ok == :erpc.call(node, SoulMem.Cluster.Membership, :await, [nodes, 10_000]))

  test "two nodes find each other by authenticated gossip", %{root: root, port: port} do
    [{_, a}, {_, b}] =
      start_nodes([:gossip_a, :gossip_b], fn _ -> cluster(gossip(port)) end, root)

    await(a, [a, b])
    await(b, [a, b])
    assert b in :erpc.call(a, Node, :list, [])
    assert %{accepted: accepted} = :erpc.call(a, Discovery, :stats, [Gossip])
    assert accepted > 0
    assert :erpc.call(a, SoulMem.Cluster, :members, []) == Enum.sort([a, b])
  end

  test "a forged, a stale and a replayed heartbeat are ignored and logged", %{port: port} do
    opts = [secret: @secret, port: port, interface: {127, 0, 0, 1}, interval_ms: 60_000]
    pid = start_supervised!({Discovery, {Discovery.Gossip, opts}})
    {:ok, socket} = :gen_udp.open(0, [:binary])
    # Tracing the receives lets the test know each packet has arrived
    # before it asks for the counters (no sleeping).
    :erlang.trace(pid, true, [:receive])

    deliver = fn packet ->
      :ok = :gen_udp.send(socket, {127, 0, 0, 1}, port, packet)
      assert_receive {:trace, ^pid, :receive, {:udp, _, _, _, ^packet}}, 5_000
    end

    ghost = :"ghost@127.0.0.1"
    genuine = Heartbeat.encode(ghost, @secret)
    <<body::binary-size(byte_size(genuine) - 32), _mac::binary>> = genuine

    log =
      capture_log(fn ->
        deliver.(body <> :crypto.strong_rand_bytes(32))
        deliver.(Heartbeat.encode(ghost, "another secret of sixteen+ bytes"))
        deliver.(Heartbeat.encode(ghost, @secret, System.os_time(:millisecond) - 120_000))
        deliver.(genuine)
        deliver.(genuine)
        deliver.("not a heartbeat")
        assert %{} = Discovery.stats(pid)
      end)

    stats = Discovery.stats(pid)
    assert stats[{:rejected, :bad_mac}] == 2
    assert stats[{:rejected, :stale}] == 1
    assert stats[{:rejected, :replay}] == 1
    assert stats[{:rejected, :malformed}] == 1
    assert stats.accepted == 1
    refute ghost in Node.list()

    assert log =~ "ignored a bad_mac packet from 127.0.0.1"
    assert log =~ "ignored a stale packet"
    assert log =~ "ignored a replay packet"
    # Rate-limited: the second bad MAC within the period is not logged again.
    assert length(String.split(log, "ignored a bad_mac packet")) == 2
  end

  test "three nodes from a static list; characters spread, route and fail with their node",
       %{root: root} do
    names = [:list_a, :list_b, :list_c]
    [{_, a}, {_, b}, {peer_c, c}] = ClusterSupport.start_static(names, root)
    nodes = [a, b, c]

    # Rendezvous hashing places ids independently: over many characters the
    # spread is even (3000 ids: max/min 1.1), while a given 30 meet max/min
    # <= 1.5 only about 40 % of the time. This fixed set is one that does
    # (checked when the test was written, not a property of any 30 ids).
    ids = for i <- 1..30, do: "role-#{i}"

    homes =
      for node <- [a, b, c], do: Enum.map(ids, &:erpc.call(node, SoulMem.Cluster, :home, [&1]))

    # Every node computes the same home for every character.
    assert [same, same, same] = homes
    counts = same |> Enum.frequencies() |> Map.values()
    assert length(counts) == 3
    assert Enum.max(counts) / Enum.min(counts) <= 1.5

    known = :erpc.call(a, SoulMem.Cluster, :known, [])
    assert known == Map.new(nodes, &{&1, 1})
    many = for i <- 1..3000, do: SoulMem.Cluster.Placement.pick("id-#{i}", known)
    many_counts = many |> Enum.frequencies() |> Map.values()
    assert Enum.max(many_counts) / Enum.min(many_counts) <= 1.15

    # Started through node a, each character runs on its home node.
    for id <- ids, do: assert({:ok, _} = :erpc.call(a, SoulMem, :ensure_started, [id]))

    listed = :erpc.call(b, SoulMem.Admin, :list, [])
    assert Enum.map(listed, &{&1.id, &1.node}) == Enum.sort(Enum.zip(ids, same))

    # A request through any node reaches the character on its home node.
    {id, home} = Enum.find(Enum.zip(ids, same), fn {_id, home} -> home == c end)
    pid = :erpc.call(a, SoulMem, :whereis, [id])
    assert node(pid) == c
    message = %{role: :user, text: "今天放学去画画", at: DateTime.utc_now()}
    assert :ok = :erpc.call(a, SoulMem, :push, [id, message])
    assert {:ok, recall} = :erpc.call(b, SoulMem, :recall, [id, %{text: "画画"}])
    assert Enum.map(recall.window, & &1.text) == ["今天放学去画画"]
    assert {:ok, %{id: ^id}} = :erpc.call(home, SoulMem, :info, [id])

    # Its home node stops: it answers home_node_down through the others,
    # while the characters of the live nodes go on answering.
    ref = Process.monitor(peer_c)
    :peer.stop(peer_c)
    assert_receive {:DOWN, ^ref, :process, _, _}

    assert {:error, :home_node_down} = :erpc.call(a, SoulMem, :recall, [id, %{text: "画画"}])
    assert {:error, :home_node_down} = :erpc.call(b, SoulMem, :push, [id, message])
    assert nil == :erpc.call(a, SoulMem, :whereis, [id])

    {other, _} = Enum.find(Enum.zip(ids, same), fn {_id, home} -> home == b end)
    assert {:ok, _} = :erpc.call(a, SoulMem, :recall, [other, %{text: "画画"}])
  end

  test "drain moves a running character under acknowledged writes and a stored one with its file",
       %{root: root} do
    [{_, a}, {_, b}, {_, c}] = ClusterSupport.start_static([:drain_a, :drain_b, :drain_c], root)

    for node <- [a, b, c] do
      # Stores on, and a window that holds every message of the test.
      :ok = :erpc.call(node, Application, :put_env, [:soul_mem, :persist, true])
      :ok = :erpc.call(node, Application, :put_env, [:soul_mem, :window, 1_100])
    end

    [writer, stored] =
      for(i <- 1..100, do: "mover-#{i}")
      |> Enum.filter(&(:erpc.call(a, SoulMem.Cluster, :home, [&1]) == c))
      |> Enum.take(2)

    # A stored (not running) character on c.
    assert {:ok, pid} = :erpc.call(a, SoulMem, :ensure_started, [stored])
    assert node(pid) == c
    stored_message = %{role: :user, text: "stored", at: DateTime.utc_now()}
    assert :ok = :erpc.call(a, SoulMem, :push, [stored, stored_message])
    assert :ok = :erpc.call(a, SoulMem.Characters, :stop, [stored])

    stored_path =
      :erpc.call(c, SoulMem.Store, :path, [:erpc.call(c, SoulMem.Store, :data_dir, []), stored])

    assert :erpc.call(c, File, :regular?, [stored_path])

    # A running one, written to through a while c drains: every push is
    # acknowledged (those during the move wait and are retried).
    assert {:ok, pid} = :erpc.call(a, SoulMem, :ensure_started, [writer])
    assert node(pid) == c
    test = self()

    spawn_link(fn ->
      for i <- 1..1_000 do
        message = %{role: :user, text: "m#{i}", at: DateTime.utc_now()}
        send(test, {:ack, i, :erpc.call(a, SoulMem, :push, [writer, message])})
      end
    end)

    assert_receive {:ack, 20, :ok}, 30_000
    assert {:ok, moves} = :erpc.call(b, SoulMem.Cluster, :drain, [c], :infinity)
    for i <- 1..1_000, i != 20, do: assert_receive({:ack, ^i, :ok}, 30_000)

    assert {:ok, %{bytes: bytes, sha256: <<_::256>>}} = moves[writer]
    assert bytes > 0
    assert {:ok, %{bytes: stored_bytes}} = moves[stored]
    assert stored_bytes > 0

    # c is drained: it homes nothing, by its own placement and the others'.
    assert :erpc.call(c, SoulMem.Cluster, :drained, []) == [c]
    refute :erpc.call(c, SoulMem.Cluster, :home, [writer]) == c

    # Every acknowledged message is on the new home, once.
    pid = :erpc.call(a, SoulMem, :whereis, [writer])
    assert node(pid) in [a, b]
    assert {:ok, window} = :erpc.call(a, SoulMem.Character, :window, [writer])
    texts = window |> SoulMem.Window.visible() |> Enum.map(& &1.text)
    assert texts == for(i <- 1..1_000, do: "m#{i}")

    # The stored one moved with its file; c keeps a backup, not a store.
    assert {:ok, pid} = :erpc.call(b, SoulMem, :ensure_started, [stored])
    assert node(pid) in [a, b]
    assert {:ok, window} = :erpc.call(b, SoulMem.Character, :window, [stored])
    assert Enum.map(SoulMem.Window.visible(window), & &1.text) == ["stored"]
    refute :erpc.call(c, File, :exists?, [stored_path])
    assert :erpc.call(c, File, :regular?, [stored_path <> ".moved"])
    assert [] == :erpc.call(c, SoulMem.Characters, :list, [])
  end

  test "a request during a move waits, for a bounded time; a failed move leaves it serving",
       %{root: root} do
    [{_, a}, {_, b}] = ClusterSupport.start_static([:wait_a, :wait_b], root)

    for node <- [a, b],
        do: :ok = :erpc.call(node, Application, :put_env, [:soul_mem, :persist, true])

    id =
      Enum.find(
        for(i <- 1..50, do: "waiter-#{i}"),
        &(:erpc.call(a, SoulMem.Cluster, :home, [&1]) == b)
      )

    assert {:ok, pid} = :erpc.call(a, SoulMem, :ensure_started, [id])
    assert node(pid) == b
    message = fn text -> %{role: :user, text: text, at: DateTime.utc_now()} end
    mark = fn -> :erpc.call(b, :ets, :insert, [SoulMem.Cluster.Moves, {id, :moving}]) end
    unmark = fn -> :erpc.call(b, :ets, :delete, [SoulMem.Cluster.Moves, id]) end

    # Marked moving on b: a push through a waits, and succeeds once it is over.
    mark.()
    test = self()

    spawn_link(fn ->
      send(test, {:pushed, :erpc.call(a, SoulMem, :push, [id, message.("waited")])})
    end)

    refute_receive {:pushed, _}, 200
    unmark.()
    assert_receive {:pushed, :ok}, 5_000

    # The wait is bounded (:move_wait_ms).
    :ok = :erpc.call(a, Application, :put_env, [:soul_mem, :move_wait_ms, 50])
    mark.()
    assert {:error, :moving} = :erpc.call(a, SoulMem, :push, [id, message.("refused")])
    unmark.()

    # A move that fails (a store of that id is in the way on a) leaves it on
    # b, running and serving, and b not drained.
    in_the_way =
      :erpc.call(a, SoulMem.Store, :path, [:erpc.call(a, SoulMem.Store, :data_dir, []), id])

    :ok = :erpc.call(a, File, :write, [in_the_way, "not a store"])
    assert {:error, {:not_moved, %{^id => :exists}}} = :erpc.call(a, SoulMem.Cluster, :drain, [b])
    assert :erpc.call(b, SoulMem.Cluster, :drained, []) == []
    assert {:error, :not_a_member} = :erpc.call(a, SoulMem.Cluster, :drain, [:"nobody@127.0.0.1"])
    assert :ok = :erpc.call(a, SoulMem, :push, [id, message.("after")])
    assert node(:erpc.call(a, SoulMem, :whereis, [id])) == b
    assert {:ok, window} = :erpc.call(a, SoulMem.Character, :window, [id])
    assert Enum.map(SoulMem.Window.visible(window), & &1.text) == ["waited", "after"]
  end
end

defmodule SoulMem.ClusterReplicationTest do
  # Homes that change (a node joins), replication with failover (a home
  # killed with kill -9), and copies that meet again, on OTP :peer nodes
  # (SoulMem.ClusterSupport). Tagged :cluster like SoulMem.ClusterTest.
  use ExUnit.Case, async: false

  alias SoulMem.ClusterSupport
  alias SoulMem.Cluster.{Discovery, Placement}

  @moduletag :cluster
  @moduletag timeout: 180_000

  setup do
    root = Path.join(System.tmp_dir!(), "soul_mem_repl_#{System.unique_integer([:positive])}")
    on_exit(fn -> File.rm_rf(root) end)
    %{root: root}
  end

  defp node_name(name), do: :"#{name}@127.0.0.1"

  defp cluster(names, extra) do
    nodes = Enum.map(names, &node_name/1)
    [enabled: true, weight: 1, discovery: [{Discovery.Static, nodes: nodes}]] ++ extra
  end

  # Stores on, a window that holds every message of a test, and a short
  # Idle so that a character whose home changed moves soon.
  defp configure(node) do
    for {key, value} <- [persist: true, window: 400, idle_after_ms: 300],
        do: :ok = :erpc.call(node, Application, :put_env, [:soul_mem, key, value])

    node
  end

  defp start(name, names, root, extra \\ []) do
    {peer, node} = ClusterSupport.start_peer(name, cluster(names, extra), root)
    {peer, configure(node)}
  end

  defp await(nodes) do
    for node <- nodes,
        do: assert(:ok == :erpc.call(node, SoulMem.Cluster.Membership, :await, [nodes, 10_000]))
  end

  defp message(text), do: %{role: :user, text: text, at: DateTime.utc_now()}

  # A push as a client makes it (the endpoint does the same): started, then
  # pushed. A character may move in between (its home changed and it is
  # Idle): started again then.
  defp push(via, id, text) do
    {result, _waited} =
      until_ok(
        fn ->
          with {:ok, _} <- :erpc.call(via, SoulMem, :ensure_started, [id]),
               do: :erpc.call(via, SoulMem, :push, [id, message(text)])
        end,
        10_000
      )

    result
  end

  # The window as a client reads it: started through `via`, then read. The
  # character may move between the two (its home changed and it went Idle):
  # read again then.
  defp texts(via, id) do
    read = fn ->
      with {:ok, _} <- :erpc.call(via, SoulMem, :ensure_started, [id]),
           do: :erpc.call(via, SoulMem.Character, :window, [id])
    end

    assert {{:ok, window}, _waited} = until_ok(read, 10_000)
    window |> SoulMem.Window.visible() |> Enum.map(& &1.text)
  end

  # The ids of `prefix`-N whose home over `weights` is `node`.
  defp homed(prefix, weights, node, n) do
    for(i <- 1..500, do: "#{prefix}-#{i}")
    |> Enum.filter(&(Placement.pick(&1, weights) == node))
    |> Enum.take(n)
  end

  # Waiting for a timeout that is the behaviour under test (the failover
  # delay): retry `fun` until it returns a non-error, bounded.
  defp until_ok(fun, deadline_ms) do
    started = System.monotonic_time(:millisecond)

    Stream.repeatedly(fn ->
      result = fun.()
      if match?({:error, _}, result), do: :timer.sleep(20)
      result
    end)
    |> Enum.find(fn result ->
      not match?({:error, _}, result) or
        System.monotonic_time(:millisecond) - started > deadline_ms
    end)
    |> then(&{&1, System.monotonic_time(:millisecond) - started})
  end

  test "a node that joins: stored characters move to it at once, a running one at its next Idle",
       %{root: root} do
    names = [:join_a, :join_b, :join_c]
    [a, b, c] = Enum.map(names, &node_name/1)
    {_, ^a} = start(:join_a, names, root)
    {_, ^b} = start(:join_b, names, root)
    await([a, b])

    three = %{a => 1, b => 1, c => 1}
    [stored, writer] = homed("joiner", three, c, 2)

    # Both live on a or b while c is away.
    assert {:ok, _} = :erpc.call(a, SoulMem, :ensure_started, [stored])
    assert :ok = :erpc.call(a, SoulMem, :push, [stored, message("stored")])
    assert :ok = :erpc.call(a, SoulMem.Characters, :stop, [stored])
    assert {:ok, pid} = :erpc.call(a, SoulMem, :ensure_started, [writer])
    old_home = node(pid)
    assert old_home in [a, b]
    for i <- 1..50, do: assert(:ok = :erpc.call(b, SoulMem, :push, [writer, message("m#{i}")]))

    # c joins. The writer keeps running where it is (it is busy) and is
    # written to through every node meanwhile.
    ref = Process.monitor(pid)
    {_, ^c} = start(:join_c, names, root)
    await([a, b, c])
    assert :erpc.call(a, SoulMem.Cluster, :home, [writer]) == c

    for i <- 51..100 do
      via = Enum.at([a, b, c], rem(i, 3))
      assert :ok = push(via, writer, "m#{i}")
    end

    # The stored one has moved with its file (the rebalance c's arrival
    # started; rebalance/0 returns once it is over).
    for node <- [a, b], do: :ok = :erpc.call(node, SoulMem.Cluster, :rebalance, [])

    stored_path =
      :erpc.call(c, SoulMem.Store, :path, [:erpc.call(c, SoulMem.Store, :data_dir, []), stored])

    assert :erpc.call(c, File, :regular?, [stored_path])
    assert {:ok, stored_pid} = :erpc.call(a, SoulMem, :ensure_started, [stored])
    assert node(stored_pid) == c
    assert texts(b, stored) == ["stored"]

    # Idle: the writer is written back, stopped, and runs on c from its file.
    assert_receive {:DOWN, ^ref, :process, ^pid, _}, 30_000
    assert {:ok, _} = :erpc.call(a, SoulMem, :ensure_started, [writer])
    assert :ok = :erpc.call(a, SoulMem, :push, [writer, message("m101")])
    assert node(:erpc.call(b, SoulMem, :whereis, [writer])) == c
    assert texts(a, writer) == for(i <- 1..101, do: "m#{i}")
  end

  test "replicas 1: a home killed with kill -9 is replaced by its replica with every acknowledged write; back, it takes the newer copy",
       %{root: root} do
    names = [:repl_a, :repl_b, :repl_c]
    [a, b, c] = Enum.map(names, &node_name/1)
    extra = [replicas: 1, failover_after_ms: 1_000]
    started = for name <- names, do: start(name, names, root, extra)
    await([a, b, c])
    [id] = homed("replicated", %{a => 1, b => 1, c => 1}, c, 1)
    assert {:ok, pid} = :erpc.call(a, SoulMem, :ensure_started, [id])
    assert node(pid) == c

    for i <- 1..150, do: assert(:ok = :erpc.call(a, SoulMem, :push, [id, message("m#{i}")]))
    assert {:ok, _} = :erpc.call(b, SoulMem, :recall, [id, %{text: "m1"}])

    # kill -9 of c's VM.
    {peer_c, ^c} = List.keyfind(started, c, 1)
    os_pid = :erpc.call(c, :os, :getpid, [])
    Process.unlink(peer_c)
    :ok = :net_kernel.monitor_nodes(true)
    {_, 0} = System.cmd("kill", ["-9", to_string(os_pid)])
    assert_receive {:nodedown, ^c}, 10_000

    # 503 first, then the replica serves every acknowledged write.
    assert {:error, :home_node_down} = :erpc.call(a, SoulMem, :push, [id, message("refused")])
    {started, waited} = until_ok(fn -> :erpc.call(a, SoulMem, :ensure_started, [id]) end, 15_000)
    assert {:ok, _pid} = started
    assert {:ok, window} = :erpc.call(a, SoulMem.Character, :window, [id])
    assert waited < 10_000
    assert Enum.map(SoulMem.Window.visible(window), & &1.text) == for(i <- 1..150, do: "m#{i}")

    for i <- 151..170, do: assert(:ok = :erpc.call(b, SoulMem, :push, [id, message("m#{i}")]))
    new_home = node(:erpc.call(a, SoulMem, :whereis, [id]))
    assert new_home in [a, b]

    # c comes back with its old copy: the newer one wins, c's copy is set
    # aside (reported), and the character moves home to c at its next Idle.
    {_, ^c} = start(:repl_c, names, root, extra)
    await([a, b, c])
    assert {:ok, _} = :erpc.call(c, SoulMem, :ensure_started, [id])
    expected = for(i <- 1..170, do: "m#{i}")
    got = texts(c, id)

    assert got == expected,
           "extra #{inspect(got -- expected)}, missing #{inspect(expected -- got)}"

    assert [%{"id" => ^id, "epoch" => 0, "winner_epoch" => 1}] =
             :erpc.call(c, SoulMem.Cluster, :conflicts, [])

    # Not running on new_home (moved at once), or running: moves at its Idle.
    :ok = :erpc.call(new_home, SoulMem.Cluster, :rebalance, [])

    case List.keyfind(:erpc.call(new_home, SoulMem.Characters, :list, []), id, 0) do
      {^id, pid} ->
        ref = Process.monitor(pid)
        assert_receive {:DOWN, ^ref, _, _, _}, 30_000

      nil ->
        :ok
    end

    assert {:ok, _} = :erpc.call(a, SoulMem, :ensure_started, [id])
    assert :ok = :erpc.call(a, SoulMem, :push, [id, message("m171")])
    assert node(:erpc.call(a, SoulMem, :whereis, [id])) == c
    assert texts(b, id) == for(i <- 1..171, do: "m#{i}")
  end

  # A split: c stops trusting a and b (another cookie for them), so neither
  # side can reconnect until the cookies agree again.
  defp split(c, others) do
    for other <- others do
      true = :erpc.call(c, :erlang, :set_cookie, [other, :split_brain])
      _ = :erpc.call(c, :erlang, :disconnect_node, [other])
    end
  end

  defp heal(c, others) do
    for other <- others do
      true = :erpc.call(c, :erlang, :set_cookie, [other, Node.get_cookie()])
      true = :erpc.call(c, Node, :connect, [other])
    end
  end

  test "a healed split: the copy that took over wins, the other side's acknowledged writes are kept and reported",
       %{root: root} do
    names = [:split_a, :split_b, :split_c]
    [a, b, c] = Enum.map(names, &node_name/1)
    extra = [replicas: 1, failover_after_ms: 500]
    for name <- names, do: start(name, names, root, extra)
    await([a, b, c])
    [id] = homed("split", %{a => 1, b => 1, c => 1}, c, 1)
    assert {:ok, _} = :erpc.call(a, SoulMem, :ensure_started, [id])
    for i <- 1..20, do: assert(:ok = :erpc.call(a, SoulMem, :push, [id, message("both #{i}")]))

    split(c, [a, b])
    # c, alone, keeps serving (no replica: degraded); a and b take over
    # after the failover timeout.
    for i <- 1..5, do: assert(:ok = :erpc.call(c, SoulMem, :push, [id, message("c side #{i}")]))
    {started, _waited} = until_ok(fn -> :erpc.call(a, SoulMem, :ensure_started, [id]) end, 15_000)
    assert {:ok, pid} = started
    assert node(pid) in [a, b]
    for i <- 1..5, do: assert(:ok = :erpc.call(b, SoulMem, :push, [id, message("ab side #{i}")]))

    heal(c, [a, b])
    await([a, b, c])
    for node <- [a, b, c], do: :ok = :erpc.call(node, SoulMem.Cluster, :rebalance, [])

    # One copy serves: the one that took over (epoch 1), on every node.
    expected = for(i <- 1..20, do: "both #{i}") ++ for(i <- 1..5, do: "ab side #{i}")

    for via <- [a, b, c] do
      assert {:ok, _} = :erpc.call(via, SoulMem, :ensure_started, [id])
      assert texts(via, id) == expected
    end

    # c's copy, with the writes it acknowledged alone, is kept and reported.
    assert [
             %{"id" => ^id, "epoch" => 0, "winner_epoch" => 1, "window" => 25, "kept" => kept} =
               report
           ] = :erpc.call(c, SoulMem.Cluster, :conflicts, [])

    # The report lists them.
    assert Enum.map(report["window_tail"], & &1["text"]) ==
             for(i <- 1..20, do: "both #{i}") ++ for(i <- 1..5, do: "c side #{i}")

    assert :erpc.call(c, File, :regular?, [kept])
  end
end

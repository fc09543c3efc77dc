defmodule SoulMem.ClusterSupport do
  @moduledoc false

  # SoulMem nodes as OTP :peer nodes on loopback, for the cluster tests and
  # bench/cluster_routing.exs: the code paths and :soul_mem app env of this
  # VM, a temporary data dir each, connected to this VM (the controller,
  # which runs no cluster membership) by distribution but not to each other
  # (-connect_all false: only discovery connects them).

  @host ~c"127.0.0.1"

  # Makes this VM a distributed node (starting epmd first if needed);
  # {:error, reason} when distribution cannot start here.
  def distribution do
    if Node.alive?() do
      :ok
    else
      # Loopback only, like a release's epmd (test/release_test.sh checks that
      # nothing of the distribution listens beyond loopback).
      _ = System.cmd("epmd", ["-daemon", "-address", "127.0.0.1"], stderr_to_stdout: true)
      name = :"soul_mem_test_#{System.unique_integer([:positive])}@127.0.0.1"

      start_distribution(name, 20)
    end
  rescue
    error -> {:error, error}
  end

  # `epmd -daemon` returns before epmd listens: a fresh one may need a
  # moment (environment setup, not a test's wait).
  defp start_distribution(name, attempts) do
    case :net_kernel.start([name, :longnames]) do
      {:ok, _} ->
        :ok

      {:error, _reason} when attempts > 1 ->
        Process.sleep(100)
        start_distribution(name, attempts - 1)

      {:error, reason} ->
        {:error, reason}
    end
  end

  # Starts peer `name` with `cluster` settings and the soul_mem app running;
  # returns {peer_pid, node}.
  def start_peer(name, cluster, data_root) do
    paths = Enum.flat_map(:code.get_path(), &[~c"-pa", &1])
    cookie = Atom.to_charlist(Node.get_cookie())

    {:ok, peer, node} =
      :peer.start_link(%{
        name: name,
        host: @host,
        longnames: true,
        args: [~c"-setcookie", cookie, ~c"-connect_all", ~c"false" | paths]
      })

    data_dir = Path.join(data_root, Atom.to_string(name))
    File.mkdir_p!(data_dir)
    env = Application.get_all_env(:soul_mem)

    :ok = :erpc.call(node, Application, :load, [:soul_mem])
    :ok = :erpc.call(node, Application, :put_all_env, [[soul_mem: env]])

    :ok =
      :erpc.call(node, Application, :put_all_env, [
        [soul_mem: [data_dir: data_dir, cluster: cluster], logger: [level: :error]]
      ])

    {:ok, _} = :erpc.call(node, Application, :ensure_all_started, [:soul_mem])
    :ok = :erpc.call(node, Logger, :configure, [[level: :error]])
    {peer, node}
  end

  # Peers `names` (weight 1 each) that know each other from a static list,
  # returned once every one of them knows them all: [{peer_pid, node}].
  def start_static(names, root) do
    nodes = Enum.map(names, &:"#{&1}@#{@host}")
    discovery = [{SoulMem.Cluster.Discovery.Static, nodes: nodes}]

    started =
      for name <- names,
          do: start_peer(name, [enabled: true, weight: 1, discovery: discovery], root)

    for node <- nodes,
        do: :ok = :erpc.call(node, SoulMem.Cluster.Membership, :await, [nodes, 10_000])

    started
  end
end

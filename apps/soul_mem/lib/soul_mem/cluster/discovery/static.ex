defmodule SoulMem.Cluster.Discovery.Static do
  @moduledoc """
  Discovery from a fixed list: option `:nodes` (the `SOUL_MEM_CLUSTER_NODES`
  list), else every node named like this one (`soul_mem@…`, option
  `:basename`) that epmd reports on the hosts of `.hosts.erlang`
  (`:net_adm.host_file/0`). Dialled at start and every `:interval_ms`
  (default 5 s), so a node that restarts, or a healed partition, is joined
  again.
  """

  @behaviour SoulMem.Cluster.Discovery

  @impl true
  def init(opts) do
    state = %{
      nodes: Enum.map(Keyword.get(opts, :nodes, []), &to_node/1),
      basename: Keyword.get(opts, :basename),
      interval: Keyword.get(opts, :interval_ms, 5_000),
      polls: 0
    }

    schedule(state)
    {:ok, targets(state), state}
  end

  @impl true
  def handle_info(:poll, state) do
    schedule(state)
    state = %{state | polls: state.polls + 1}
    {:ok, targets(state), state}
  end

  def handle_info(_other, state), do: {:ok, [], state}

  @impl true
  def stats(state), do: %{nodes: targets(state), polls: state.polls}

  defp schedule(state), do: Process.send_after(self(), :poll, state.interval)

  defp targets(%{nodes: [_ | _] = nodes}), do: nodes
  defp targets(state), do: hosts_file_nodes(state.basename || basename())

  # .hosts.erlang names hosts, not nodes: ask each host's epmd which nodes
  # run there and keep those with our base name.
  defp hosts_file_nodes(basename) do
    hosts =
      case :net_adm.host_file() do
        hosts when is_list(hosts) -> hosts
        {:error, _} -> []
      end

    for host <- hosts,
        {:ok, names} <- [:net_adm.names(host)],
        {name, _port} <- names,
        List.to_string(name) == basename,
        do: :"#{name}@#{host}"
  end

  defp basename, do: node() |> Atom.to_string() |> String.split("@") |> hd()

  defp to_node(node) when is_atom(node), do: node
  defp to_node(node) when is_binary(node), do: String.to_atom(String.trim(node))
end

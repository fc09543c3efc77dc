defmodule SoulMem.Admin do
  @moduledoc """
  Operator views for a remote shell (`iex --remsh`) that the façade
  `SoulMem` has no place for: the running characters at a glance, a
  window, a summary, a backup file. Everything else (notes, maintenance
  and write-back with `SoulMem.force/2`, push, recall) is `SoulMem`. Every function returns
  data; nothing prints.
  """

  alias SoulMem.{Character, Characters, Window}

  @doc """
  The running characters with their state (`:working`/`:idle`), window size,
  pending messages, summary jobs, summary length, graph node counts
  (`SoulMem.Memory.stats/1`) and the `:node` they run on — of every live
  node in a cluster (a node that does not answer within 10 s is left out).
  Characters that stop while being listed are left out.
  """
  @spec list() :: [map()]
  def list do
    if SoulMem.Cluster.Membership.known() do
      SoulMem.Cluster.Router.gather(__MODULE__, :local_list, [])
      |> Enum.flat_map(&elem(&1, 1))
      |> Enum.sort_by(& &1.id)
    else
      local_list()
    end
  end

  @doc "The running characters of this node (`list/0` of this node only)."
  @spec local_list() :: [map()]
  def local_list do
    for {_id, pid} <- Characters.list(),
        {:ok, info} <- [Character.info(pid)],
        do: Map.put(info, :node, node())
  end

  @doc "The messages visible to recall (pending + window), oldest first."
  @spec window(String.t() | pid()) :: {:ok, [Window.message()]} | {:error, term()}
  def window(character) do
    with {:ok, window} <- Character.window(character), do: {:ok, Window.visible(window)}
  end

  @doc "The cumulative summary."
  @spec summary(String.t() | pid()) :: {:ok, String.t()} | {:error, term()}
  def summary(character), do: Character.summary(character)

  @doc """
  Writes the character's export document (`SoulMem.Character.export/2`: the
  graph with archived notes, window, summary, records, feedback, forgetting
  state) to `path` — via a temporary file and a rename, so `path` never holds
  a half-written backup. `SoulMem.import/3` restores it.
  """
  @spec export(String.t() | pid(), Path.t()) :: :ok | {:error, term()}
  def export(character, path) do
    with {:ok, json} <- Character.export(character),
         do: SoulMem.JSON.write_file_atomic(path, json)
  end
end

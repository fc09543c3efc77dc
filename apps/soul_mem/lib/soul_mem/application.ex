defmodule SoulMem.Application do
  @moduledoc false

  use Application

  @impl true
  def start(_type, _args) do
    children =
      [
        {Registry, keys: :unique, name: SoulMem.Registry},
        {Task.Supervisor, name: SoulMem.TaskSupervisor},
        SoulMem.LLM.Profile,
        {DynamicSupervisor, name: SoulMem.CharacterSupervisor, strategy: :one_for_one}
        # The cluster last: a node joins the group (and is sent requests)
        # only once it can start characters.
      ] ++ SoulMem.Cluster.children()

    Supervisor.start_link(children, strategy: :one_for_one, name: SoulMem.Supervisor)
  end
end

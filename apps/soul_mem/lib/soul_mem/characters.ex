defmodule SoulMem.Characters do
  @moduledoc """
  The running characters: start (idempotently), look up, list and stop
  `SoulMem.Character` processes under `SoulMem.CharacterSupervisor`.
  """

  alias SoulMem.Character

  @supervisor SoulMem.CharacterSupervisor

  @doc """
  Returns the running character `character_id`, starting it with `opts` (see
  `SoulMem.Character.start_link/1`: `graph: path` or `memory:
  %SoulMem.Memory{}`, `window:`, `idle_after:` …) when it is not running.
  Idempotent: when it already runs, `opts` are ignored and its pid is
  returned. A character with a store under the data directory comes back
  from it (graph, window, summary, records, feedback); `:graph` only seeds a
  new one. A graph file that does not exist fails with
  `{:error, {:graph_not_found, path}}`.
  """
  @spec ensure_started(String.t(), keyword()) :: {:ok, pid()} | {:error, term()}
  def ensure_started(character_id, opts \\ []) when is_binary(character_id) do
    case whereis(character_id) do
      pid when is_pid(pid) ->
        {:ok, pid}

      nil ->
        spec = {Character, Keyword.put(opts, :id, character_id)}

        case DynamicSupervisor.start_child(@supervisor, spec) do
          {:ok, pid} -> {:ok, pid}
          {:error, {:already_started, pid}} -> {:ok, pid}
          {:error, _} = error -> error
        end
    end
  end

  @doc "The pid of the running character `character_id`, or `nil`."
  @spec whereis(String.t()) :: pid() | nil
  def whereis(character_id) when is_binary(character_id) do
    # The Registry unregisters a dead process asynchronously: skip it.
    case Registry.lookup(SoulMem.Registry, character_id) do
      [{pid, _}] -> if Process.alive?(pid), do: pid
      [] -> nil
    end
  end

  @doc "The ids and pids of the running characters, sorted by id."
  @spec list() :: [{String.t(), pid()}]
  def list do
    SoulMem.Registry
    |> Registry.select([{{:"$1", :"$2", :_}, [], [{{:"$1", :"$2"}}]}])
    |> Enum.filter(fn {_id, pid} -> Process.alive?(pid) end)
    |> Enum.sort()
  end

  @doc """
  Stops the character gracefully: a persisted character writes its graph,
  window and summary back to its store first (see `SoulMem.Character`).
  `{:error, :not_running}` when it does not run.
  """
  @spec stop(String.t() | pid()) :: :ok | {:error, :not_running}
  def stop(character) do
    pid = if is_pid(character), do: character, else: whereis(character)

    case pid && DynamicSupervisor.terminate_child(@supervisor, pid) do
      :ok -> :ok
      _ -> {:error, :not_running}
    end
  end
end

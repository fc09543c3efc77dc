defmodule SoulMem.Characters do
  @moduledoc """
  The running characters: start (idempotently), look up, list and stop
  `SoulMem.Character` processes under `SoulMem.CharacterSupervisor`.
  """

  alias SoulMem.{Character, Store}
  alias SoulMem.Cluster.{Moves, Replication, Router}

  @supervisor SoulMem.CharacterSupervisor
  @start_timeout 60_000

  @doc """
  Returns the running character `character_id`, starting it with `opts` (see
  `SoulMem.Character.start_link/1`: `graph: path` or `memory:
  %SoulMem.Memory{}`, `window:`, `idle_after:` …) when it is not running.
  Idempotent: when it already runs, `opts` are ignored and its pid is
  returned. A character with a store under the data directory comes back
  from it (graph, window, summary, records, feedback); `:graph` only seeds a
  new one. A graph file that does not exist fails with
  `{:error, {:graph_not_found, path}}`. Without `:graph` or `:memory`, a new
  character is seeded from its configured seed file (`seed/1`), so the demo
  always starts with its memories.

  In a cluster (`SoulMem.Cluster`) the character starts on its home node and
  the pid returned is there; `{:error, :home_node_down}` when that node is
  down. Paths in `opts` are read on the home node, and a `:memory` (a NIF
  resource) cannot cross nodes: give such a character's id a home here or
  use `SoulMem.create/3`, which runs whole on the home node.
  """
  @spec ensure_started(String.t(), keyword()) :: {:ok, pid()} | {:error, term()}
  def ensure_started(character_id, opts \\ []) when is_binary(character_id) do
    Router.route(
      character_id,
      __MODULE__,
      :ensure_started,
      [character_id, opts],
      @start_timeout,
      fn ->
        here(character_id, :ensure_started, [character_id, opts], @start_timeout, fn ->
          start_local(character_id, opts)
        end)
      end
    )
  end

  # A character moved off this node (SoulMem.Cluster.Moves) is forwarded to
  # its new node; one moving right now answers :moving (the router retries).
  defp here(id, fun, args, timeout, local) when is_binary(id) do
    case Moves.where(id) do
      :here -> local.()
      :moving -> {:error, :moving}
      {:moved, node} -> Router.forward(node, __MODULE__, fun, args, timeout)
    end
  end

  defp here(_pid, _fun, _args, _timeout, local), do: local.()

  defp start_local(character_id, opts) do
    case whereis(character_id) do
      pid when is_pid(pid) ->
        {:ok, pid}

      nil ->
        with :ok <- stand_in(character_id), do: start_new(character_id, opts)
    end
  end

  # The home down past the failover timeout: its replica here takes over; a
  # stand-in without a replica (the character never replicated) answers as
  # its home would, rather than starting it empty.
  defp stand_in(id) do
    cond do
      not Replication.enabled?() -> :ok
      Store.exists?(Store.data_dir(), id) -> :ok
      match?({:ok, _}, Replication.adopt(id)) -> :ok
      Replication.standing_in?(id) -> {:error, :home_node_down}
      true -> :ok
    end
  end

  defp start_new(character_id, opts) do
    opts =
      case {opts[:graph], opts[:memory], seed(character_id)} do
        {nil, nil, path} when is_binary(path) -> Keyword.put(opts, :graph, path)
        _ -> opts
      end

    case DynamicSupervisor.start_child(
           @supervisor,
           {Character, Keyword.put(opts, :id, character_id)}
         ) do
      {:ok, pid} -> {:ok, pid}
      {:error, {:already_started, pid}} -> {:ok, pid}
      {:error, _} = error -> error
    end
  end

  # The demo's graph: the copy a release ships in soul_mem's priv, else the
  # umbrella's fixture (found from this source file, as in a checkout).
  @demo_fixture Path.expand("../../../../fixtures/characters/demo.json", __DIR__)

  @doc """
  The seed file of a new character `character_id`: `config :soul_mem,
  :seeds` (`%{id => graph path}`), where `"demo"` defaults to the shipped
  demo graph; `nil` for others. A seed only fills an empty store: a stored
  graph is never replaced.
  """
  @spec seed(String.t()) :: Path.t() | nil
  def seed(character_id) do
    case Application.get_env(:soul_mem, :seeds, %{}) do
      %{^character_id => path} -> path
      _ when character_id == "demo" -> demo_graph()
      _ -> nil
    end
  end

  defp demo_graph do
    shipped = Application.app_dir(:soul_mem, "priv/characters/demo.json")
    if File.regular?(shipped), do: shipped, else: @demo_fixture
  end

  @doc """
  The pid of the running character `character_id`, or `nil` — in a cluster
  on its home node (`nil` as well when that node is down).
  """
  @spec whereis(String.t()) :: pid() | nil
  def whereis(character_id) when is_binary(character_id) do
    case Router.route(character_id, __MODULE__, :whereis, [character_id], 5_000, fn ->
           here(character_id, :whereis, [character_id], 5_000, fn ->
             local_whereis(character_id)
           end)
         end) do
      pid when is_pid(pid) -> pid
      _ -> nil
    end
  end

  defp local_whereis(character_id) do
    # The Registry unregisters a dead process asynchronously: skip it.
    case Registry.lookup(SoulMem.Registry, character_id) do
      [{pid, _}] -> if Process.alive?(pid), do: pid
      [] -> nil
    end
  end

  @doc "The ids and pids of the characters running on this node, sorted by id."
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
  `{:error, :not_running}` when it does not run, `{:error, :home_node_down}`
  when its home node is down.
  """
  @spec stop(String.t() | pid()) :: :ok | {:error, :not_running | :home_node_down}
  def stop(character) do
    Router.route(character, __MODULE__, :stop, [character], 35_000, fn ->
      here(character, :stop, [character], 35_000, fn -> stop_local(character) end)
    end)
  end

  defp stop_local(character) do
    pid = if is_pid(character), do: character, else: local_whereis(character)

    case pid && DynamicSupervisor.terminate_child(@supervisor, pid) do
      :ok -> :ok
      _ -> {:error, :not_running}
    end
  end

  # A request carries its deadline: one that waited past it in the mailbox
  # (its caller gave up) is answered without being applied, so a message a
  # client saw fail is never stored later. While the character loads, a
  # request waits for it up to the load timeout.
  @doc """
  Calls the running `character` (id or pid) with `message`: `{:error,
  :not_running}` when none runs, `{:error, :timeout}` when it does not answer
  in time, `{:error, :loading}` when it is still loading past the load
  timeout (app env `:load_timeout_ms`, 60 s), which a loading character is
  given in any case. In a cluster the call is made on the character's home
  node (`SoulMem.Cluster.Router`): `{:error, :home_node_down}` when that
  node is down.
  """
  @spec call(String.t() | pid(), term(), timeout()) :: term()
  def call(character, message, timeout) do
    # A loading character is waited for up to the load timeout on its node.
    remote_timeout = max_timeout(timeout, load_timeout())

    Router.route(
      character,
      __MODULE__,
      :call,
      [character, message, timeout],
      remote_timeout,
      fn ->
        here(character, :call, [character, message, timeout], remote_timeout, fn ->
          call_local(character, message, timeout)
        end)
      end
    )
  end

  defp call_local(character, message, timeout) do
    case resolve_local(character) do
      nil ->
        {:error, :not_running}

      pid ->
        timeout = if loading?(pid), do: max_timeout(timeout, load_timeout()), else: timeout

        try do
          GenServer.call(pid, {:before, deadline(timeout), message}, timeout)
        catch
          :exit, {:timeout, _} -> {:error, if(loading?(pid), do: :loading, else: :timeout)}
          :exit, _ -> {:error, if(moving?(character), do: :moving, else: :not_running)}
        end
    end
  end

  # A character stopped by its move answers :moving, retried by the router.
  defp moving?(id) when is_binary(id), do: Moves.moving?(id)
  defp moving?(_pid), do: false

  defp deadline(:infinity), do: :infinity
  defp deadline(ms), do: System.monotonic_time(:millisecond) + ms

  defp max_timeout(:infinity, _), do: :infinity
  defp max_timeout(a, b), do: max(a, b)

  defp load_timeout, do: Application.get_env(:soul_mem, :load_timeout_ms, 60_000)

  # The Registry value of a character is :ready once it has loaded.
  defp loading?(pid) do
    case Registry.keys(SoulMem.Registry, pid) do
      [id | _] -> Registry.values(SoulMem.Registry, id, pid) != [:ready]
      [] -> false
    end
  end

  @doc "The pid of `character` (an id or a pid, in a cluster on its home node), or `nil`."
  @spec resolve(term()) :: pid() | nil
  def resolve(pid) when is_pid(pid), do: pid
  def resolve(id) when is_binary(id), do: whereis(id)
  def resolve(_), do: nil

  defp resolve_local(id) when is_binary(id), do: local_whereis(id)
  defp resolve_local(other), do: resolve(other)
end

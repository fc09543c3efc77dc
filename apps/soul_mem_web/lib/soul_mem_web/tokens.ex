defmodule SoulMemWeb.Tokens do
  @moduledoc """
  Per-character access tokens of the chat endpoint.

  An operator creates a token for a character with `create/1` (in a remote
  shell, or offline with `mix soul.token CHARACTER`); the plain token is
  returned once and only its SHA-256 is kept, in
  `<data_dir>/web_tokens.json` (written atomically: temporary file, then
  rename). A token opens exactly one character: `verify/2` checks the token
  against that character's hashes, in constant time.

  Tokens given in configuration (the demo character's
  `config :soul_mem, :demo_token`) are registered with `put_configured/2`:
  held in memory only, so changing the environment variable retires the old
  one.

  Lookups read a protected ETS table (no process in the way of 200 sockets
  joining at once); writes go through this process, which also reloads the
  file when another VM (`mix soul.token`) changed it (checked every second)
  and tells subscribers (`subscribe/0`: the sockets) after every change, so
  a revoke closes joined channels at once.

  In a cluster (`SoulMem.Cluster.enabled?/0`) every node keeps its own file
  and the files converge: after each change, and to every node that comes
  up, this process sends its token data to the other nodes' token stores,
  which merge it. The merge is a two-phase set per hash — a revoke keeps
  the SHA-256 of each revoked hash (`"revoked"` in the file), and a revoked
  hash never comes back — so the order in which nodes hear of changes does not
  matter, and a node that was away catches up when it rejoins. A token
  created on one node while another was cut off is valid there once they
  meet again; a revoke on one side does not reach tokens it never saw.
  """

  use GenServer

  @table __MODULE__
  @file_name "web_tokens.json"
  @token_bytes 32
  @max_token_bytes 512
  @check_file_ms 1_000

  defguardp is_token(token)
            when is_binary(token) and token != "" and byte_size(token) <= @max_token_bytes

  @typedoc "A character id."
  @type character :: String.t()

  ## Client API

  @doc """
  Starts the token store. Options: `:data_dir` (default: app env
  `:soul_mem, :data_dir`), `:configured` (`%{character_id => token}` held in
  memory only, see `put_configured/2`), `:operator` (an operator token held
  in memory only, e.g. from `SOUL_MEM_OPERATOR_TOKEN`).
  """
  @spec start_link(keyword()) :: GenServer.on_start()
  def start_link(opts \\ []) do
    opts = Keyword.validate!(opts, [:data_dir, :operator, configured: %{}])
    GenServer.start_link(__MODULE__, opts, name: __MODULE__)
  end

  @doc """
  Creates a new token for `character_id` and returns it in plain text: the
  only time it is seen (only its hash is stored). Earlier tokens of the
  character stay valid until `revoke/1`.
  """
  @spec create(character()) :: {:ok, String.t()} | {:error, :invalid_character | term()}
  def create(character_id) do
    if valid_character?(character_id) do
      token = new_token()

      with :ok <- GenServer.call(__MODULE__, {:add, character_id, digest(token)}),
           do: {:ok, token}
    else
      {:error, :invalid_character}
    end
  end

  @doc "Revokes every stored token of `character_id` (configured tokens stay)."
  @spec revoke(character()) :: :ok | {:error, term()}
  def revoke(character_id) when is_binary(character_id),
    do: GenServer.call(__MODULE__, {:revoke, character_id})

  @doc """
  Registers a token from configuration for `character_id`, in memory only.
  Replaces the character's earlier configured token.
  """
  @spec put_configured(character(), String.t()) ::
          :ok | {:error, :invalid_character | :invalid_token}
  def put_configured(character_id, token) do
    cond do
      not valid_character?(character_id) ->
        {:error, :invalid_character}

      not is_token(token) ->
        {:error, :invalid_token}

      true ->
        GenServer.call(__MODULE__, {:configured, character_id, digest(token)})
    end
  end

  @doc """
  Whether `token` opens `character_id`. Never raises: anything that is not
  a binary token fails.
  """
  @spec verify(character(), term()) :: boolean()
  def verify(character_id, token) when is_binary(character_id) and is_token(token) do
    digest = digest(token)

    valid_character?(character_id) and found_or_reloaded(fn -> matches?(character_id, digest) end)
  end

  def verify(_character_id, _token), do: false

  @doc """
  Whether `token` opens any character (the socket's connect check; each
  join is then checked with `verify/2`).
  """
  @spec known?(term()) :: boolean()
  def known?(token) when is_token(token) do
    digest = digest(token)

    found_or_reloaded(fn ->
      :ets.foldl(
        fn
          {id, hashes}, acc when is_binary(id) -> acc or has?(hashes, digest)
          _operators, acc -> acc
        end,
        false,
        @table
      )
    end)
  end

  def known?(_token), do: false

  @doc """
  Subscribes the calling process to token changes: after every change (a
  create, a revoke, the file changed by another VM) it receives
  `{SoulMemWeb.Tokens, :changed}` and re-checks what it holds (sockets
  close the channels whose token no longer opens their character).
  """
  @spec subscribe() :: :ok
  def subscribe do
    {:ok, _} = Registry.register(SoulMemWeb.Tokens.Subscribers, :changed, nil)
    :ok
  end

  @doc """
  Creates an operator token (the page's operator view and `/api/operator`:
  list characters, create and revoke their tokens). Returned once; only its
  hash is stored. An operator token opens no character.
  """
  @spec create_operator() :: {:ok, String.t()} | {:error, term()}
  def create_operator do
    token = new_token()
    with :ok <- GenServer.call(__MODULE__, {:add_operator, digest(token)}), do: {:ok, token}
  end

  @doc "Revokes every stored operator token (a configured one stays)."
  @spec revoke_operators() :: :ok | {:error, term()}
  def revoke_operators, do: GenServer.call(__MODULE__, :revoke_operators)

  @doc "Whether `token` is an operator token. Constant time per stored hash."
  @spec operator?(term()) :: boolean()
  def operator?(token) when is_token(token) do
    digest = digest(token)
    found_or_reloaded(fn -> matches?(:operators, digest) end)
  end

  def operator?(_token), do: false

  @doc "Whether any operator token exists (stored or configured)."
  @spec operators?() :: boolean()
  def operators? do
    match?([{_, [_ | _]}], :ets.lookup(@table, :operators))
  end

  @doc "Each character with tokens and how many it has (stored and configured), sorted."
  @spec counts() :: [{character(), pos_integer()}]
  def counts do
    @table
    |> :ets.tab2list()
    |> Enum.filter(fn {id, h} -> is_binary(id) and h != [] end)
    |> Enum.map(fn {id, h} -> {id, length(h)} end)
    |> Enum.sort()
  end

  @doc "The characters that have at least one token, sorted."
  @spec characters() :: [character()]
  def characters, do: Enum.map(counts(), &elem(&1, 0))

  @doc "The file the stored tokens live in, for `data_dir`."
  @spec path(Path.t()) :: Path.t()
  def path(data_dir), do: Path.join(data_dir, @file_name)

  @doc """
  Removes every stored token of `character_id` straight from the file under
  `data_dir` (`mix soul.token --revoke`): a node serving from that data dir
  notices within a second and closes the character's joined channels.
  """
  @spec revoke_offline(Path.t(), character()) :: :ok | {:error, term()}
  def revoke_offline(data_dir, character_id) when is_binary(character_id) do
    with {:ok, _} <- update_file(path(data_dir), &delete_character(&1, character_id)), do: :ok
  end

  @doc """
  Adds a token for `character_id` straight to the file under `data_dir`
  (`mix soul.token`, with no endpoint running); returns the plain token.
  """
  @spec create_offline(Path.t(), character()) :: {:ok, String.t()} | {:error, term()}
  def create_offline(data_dir, character_id) do
    if valid_character?(character_id) do
      token = new_token()

      with {:ok, _} <- update_file(path(data_dir), &add_hash(&1, character_id, digest(token))),
           do: {:ok, token}
    else
      {:error, :invalid_character}
    end
  end

  @doc """
  Adds an operator token straight to the file under `data_dir` (`mix
  soul.token --admin`); returns the plain token. A node serving from that
  data dir accepts it within a second.
  """
  @spec create_operator_offline(Path.t()) :: {:ok, String.t()} | {:error, term()}
  def create_operator_offline(data_dir) do
    token = new_token()

    with {:ok, _} <- update_file(path(data_dir), &add_operator(&1, digest(token))),
         do: {:ok, token}
  end

  ## Server

  @impl true
  def init(opts) do
    data_dir = opts[:data_dir] || Application.get_env(:soul_mem, :data_dir) || "data"
    file = path(data_dir)

    :ets.new(@table, [:named_table, :protected, read_concurrency: true])
    if SoulMem.Cluster.enabled?(), do: :ok = :net_kernel.monitor_nodes(true)

    case read_file(file) do
      {:ok, data} ->
        configured = Map.new(opts[:configured], fn {id, token} -> {id, digest(token)} end)

        state = %{
          file: file,
          data: data,
          configured: configured,
          configured_operator: opts[:operator] && digest(opts[:operator]),
          mtime: mtime(file)
        }

        publish(state)
        schedule_check()
        {:ok, state}

      {:error, reason} ->
        {:stop, {:bad_token_file, file, reason}}
    end
  end

  @impl true
  def handle_call({:add, id, digest}, _from, state),
    do: save(state, &add_hash(&1, id, digest))

  def handle_call({:revoke, id}, _from, state), do: save(state, &delete_character(&1, id))

  def handle_call({:add_operator, digest}, _from, state),
    do: save(state, &add_operator(&1, digest))

  def handle_call(:revoke_operators, _from, state),
    do: save(state, &%{&1 | operators: [], revoked: tombstones(&1.operators) ++ &1.revoked})

  def handle_call({:configured, id, digest}, _from, state) do
    state = %{state | configured: Map.put(state.configured, id, digest)}
    publish(state)
    {:reply, :ok, state}
  end

  def handle_call(:reload_if_changed, _from, state) do
    {result, state} = reload_if_changed(state)
    {:reply, result, state}
  end

  # The file is the source of truth shared with other VMs (`mix soul.token`):
  # a change there (a revoke) takes effect within a second.
  @impl true
  def handle_info(:check_file, state) do
    {_, state} = reload_if_changed(state)
    schedule_check()
    {:noreply, state}
  end

  # Another node's token data: merged into this node's file; when that
  # changed anything, the others hear of the result (which ends when no
  # node learns anything new).
  def handle_info({__MODULE__, :merge, %{tokens: t, operators: o, revoked: r} = data}, state)
      when is_map(t) and is_list(o) and is_list(r) do
    case update_file(state.file, &merge(&1, data)) do
      {:ok, merged} when merged != state.data ->
        state = %{state | data: merged, mtime: mtime(state.file)}
        publish(state)
        {:noreply, state}

      _unchanged_or_failed ->
        {:noreply, state}
    end
  end

  def handle_info({:nodeup, node}, state) do
    send({__MODULE__, node}, {__MODULE__, :merge, state.data})
    {:noreply, state}
  end

  def handle_info(_other, state), do: {:noreply, state}

  defp merge(mine, theirs) do
    revoked = Enum.uniq(mine.revoked ++ theirs.revoked)
    gone = MapSet.new(revoked)
    keep = fn hashes -> hashes |> Enum.uniq() |> Enum.reject(&(tombstone(&1) in gone)) end

    tokens =
      mine.tokens
      |> Map.merge(theirs.tokens, fn _id, a, b -> a ++ b end)
      |> Map.new(fn {id, hashes} -> {id, keep.(hashes)} end)
      |> Map.reject(fn {_id, hashes} -> hashes == [] end)

    %{tokens: tokens, operators: keep.(mine.operators ++ theirs.operators), revoked: revoked}
  end

  defp reload_if_changed(state) do
    mtime = mtime(state.file)

    with true <- mtime != state.mtime,
         {:ok, data} <- read_file(state.file) do
      state = %{state | data: data, mtime: mtime}
      publish(state)
      {:reloaded, state}
    else
      _ -> {:unchanged, state}
    end
  end

  defp schedule_check, do: Process.send_after(self(), :check_file, @check_file_ms)

  # A change is applied to the file as it is now, not to this process's copy:
  # another VM's write in the last second (a revoke) is kept.
  defp save(state, change) do
    case update_file(state.file, change) do
      {:ok, data} ->
        state = %{state | data: data, mtime: mtime(state.file)}
        publish(state)
        {:reply, :ok, state}

      {:error, _} = error ->
        {:reply, error, state}
    end
  end

  # The file's data: %{tokens: %{character => [digest]}, operators: [digest]}.
  defp add_hash(data, id, digest),
    do: %{data | tokens: Map.update(data.tokens, id, [digest], &[digest | &1])}

  # A revoked hash is remembered by its own SHA-256: the file keeps no hash
  # of a token that no longer opens anything.
  defp tombstone(digest), do: :crypto.hash(:sha256, digest)
  defp tombstones(digests), do: Enum.map(digests, &tombstone/1)

  defp delete_character(data, id) do
    revoked = tombstones(Map.get(data.tokens, id, [])) ++ data.revoked
    %{data | tokens: Map.delete(data.tokens, id), revoked: revoked}
  end

  defp add_operator(data, digest), do: %{data | operators: [digest | data.operators]}

  # Read, change, write the file under a lock file that every writer (this
  # node, `mix soul.token` in another VM) takes: two writers never lose each
  # other's change. A lock left by a crashed writer is broken after 10 s.
  defp update_file(file, change) do
    File.mkdir_p(Path.dirname(file))

    with_lock(file <> ".lock", fn ->
      with {:ok, data} <- read_file(file),
           data = change.(data),
           :ok <- write_file(file, data),
           do: {:ok, data}
    end)
  end

  @lock_wait_ms 5_000
  @stale_lock_s 10

  defp with_lock(lock, fun, waited \\ 0) do
    case File.open(lock, [:write, :exclusive]) do
      {:ok, io} ->
        File.close(io)

        try do
          fun.()
        after
          File.rm(lock)
        end

      {:error, :eexist} when waited < @lock_wait_ms ->
        with {:ok, %{mtime: at}} <- File.stat(lock, time: :posix),
             true <- System.os_time(:second) - at > @stale_lock_s,
             do: File.rm(lock)

        Process.sleep(10)
        with_lock(lock, fun, waited + 10)

      {:error, :eexist} ->
        {:error, :token_file_locked}

      {:error, reason} ->
        {:error, reason}
    end
  end

  defp publish(state) do
    rows =
      Map.merge(
        state.data.tokens,
        Map.new(state.configured, fn {id, d} -> {id, [d]} end),
        fn _id, stored, configured -> configured ++ stored end
      )

    operators = List.wrap(state.configured_operator) ++ state.data.operators
    :ets.delete_all_objects(@table)
    # The operators' row has an atom key: no character id (a binary) reaches it.
    :ets.insert(@table, [{:operators, operators} | Enum.to_list(rows)])

    if SoulMem.Cluster.enabled?() do
      for node <- Node.list(), do: send({__MODULE__, node}, {__MODULE__, :merge, state.data})
    end

    Registry.dispatch(SoulMemWeb.Tokens.Subscribers, :changed, fn entries ->
      for {pid, _} <- entries, do: send(pid, {__MODULE__, :changed})
    end)
  end

  ## Helpers

  defp matches?(character_id, digest) do
    case :ets.lookup(@table, character_id) do
      [{_, hashes}] -> has?(hashes, digest)
      [] -> false
    end
  end

  # Every stored hash is compared in full (constant time per hash), so the
  # answer's timing says nothing about how much of a hash matched.
  defp has?(hashes, digest),
    do: Enum.reduce(hashes, false, fn h, acc -> :crypto.hash_equals(h, digest) or acc end)

  @doc """
  The SHA-256 a token is known by: what is stored, and the key rate limits
  and socket counts use, so no table holds a token itself.
  """
  @spec digest(String.t()) :: binary()
  def digest(token) when is_binary(token), do: :crypto.hash(:sha256, token)

  defp new_token,
    do: @token_bytes |> :crypto.strong_rand_bytes() |> Base.url_encode64(padding: false)

  # A lookup that fails may be one the file already answers (another VM
  # wrote it within the last second): reload if it changed and look again.
  defp found_or_reloaded(found?),
    do: found?.() or (GenServer.call(__MODULE__, :reload_if_changed) == :reloaded and found?.())

  # A name a person can read back: not blank, no control characters (a
  # whitespace-only id got a token once and then failed every call).
  defp valid_character?(id) do
    is_binary(id) and byte_size(id) <= 128 and String.valid?(id) and String.trim(id) != "" and
      not String.match?(id, ~r/[[:cntrl:]]/u)
  end

  defp mtime(file) do
    case File.stat(file, time: :posix) do
      {:ok, %{mtime: mtime, size: size}} -> {mtime, size}
      {:error, _} -> nil
    end
  end

  # The file: {"version": 1, "tokens": {"<character>": ["<sha256 hex>", ...]},
  # "operators": ["<sha256 hex>", ...], "revoked": ["<sha256 hex>", ...]}
  # ("operators" and "revoked" optional; "revoked" holds the SHA-256 of each
  # revoked hash, so another node's older copy cannot undo a revoke, see the
  # moduledoc).
  defp read_file(file) do
    case File.read(file) do
      {:ok, json} ->
        with {:ok, %{"version" => 1, "tokens" => tokens} = doc} when is_map(tokens) <-
               SoulMem.JSON.decode(json),
             {:ok, stored} <- decode_hashes(tokens),
             {:ok, %{"operators" => operators, "revoked" => revoked}} <-
               decode_hashes(%{
                 "operators" => Map.get(doc, "operators", []),
                 "revoked" => Map.get(doc, "revoked", [])
               }) do
          {:ok, %{tokens: stored, operators: operators, revoked: revoked}}
        else
          _ -> {:error, :malformed}
        end

      {:error, :enoent} ->
        {:ok, %{tokens: %{}, operators: [], revoked: []}}

      {:error, reason} ->
        {:error, reason}
    end
  end

  defp decode_hashes(tokens) do
    Enum.reduce_while(tokens, {:ok, %{}}, fn {id, hexes}, {:ok, acc} ->
      decoded = if is_list(hexes), do: Enum.map(hexes, &decode_hex/1), else: [:error]

      if Enum.all?(decoded, &is_binary/1),
        do: {:cont, {:ok, Map.put(acc, id, decoded)}},
        else: {:halt, :error}
    end)
  end

  defp decode_hex(hex) when is_binary(hex) do
    case Base.decode16(hex, case: :lower) do
      {:ok, <<_::256>> = digest} -> digest
      _ -> :error
    end
  end

  defp decode_hex(_), do: :error

  defp write_file(file, %{tokens: stored, operators: operators, revoked: revoked}) do
    hex = fn hashes -> Enum.map(hashes, &Base.encode16(&1, case: :lower)) end
    tokens = Map.new(stored, fn {id, hashes} -> {id, hex.(hashes)} end)

    json =
      SoulMem.JSON.encode!(%{
        "version" => 1,
        "tokens" => tokens,
        "operators" => hex.(operators),
        "revoked" => hex.(revoked)
      })

    SoulMem.JSON.write_file_atomic(file, json, mode: 0o600)
  end
end

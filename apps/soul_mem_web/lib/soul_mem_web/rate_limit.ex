defmodule SoulMemWeb.RateLimit do
  @moduledoc """
  Request rate limits per key (a client address, a token), as the generic
  cell rate algorithm (GCRA, the token bucket expressed as one timestamp per
  key): a key may send `burst` requests at once, then one every
  `1/rate` seconds.

  The table is public ETS owned by this process; `check/3` runs in the
  caller and updates a key with compare-and-swap (`:ets.select_replace/2`),
  so concurrent requests of one key never both spend the same allowance and
  no request waits on a process. Idle keys are swept once a minute.

  Limits come from `config :soul_mem_web, :rate_limits` (per kind:
  `{rate_per_second, burst}`); see `limits/0`.
  """

  use GenServer

  @table __MODULE__
  @sweep_ms 60_000
  @defaults %{ip: {100, 400}, token: {50, 200}, frame: {50, 200}}

  @doc false
  @spec start_link(keyword()) :: GenServer.on_start()
  def start_link(_opts), do: GenServer.start_link(__MODULE__, :ok, name: __MODULE__)

  @doc """
  The configured limits: `%{kind => {rate_per_second, burst}}` for `:ip`
  (every HTTP request and socket upgrade, before authentication), `:token`
  (authenticated HTTP requests) and `:frame` (channel events of one
  socket's token).
  """
  @spec limits() :: %{atom() => {number(), pos_integer()}}
  def limits,
    do: Map.merge(@defaults, Map.new(Application.get_env(:soul_mem_web, :rate_limits, %{})))

  @doc """
  Spends one request of `key` under the limit of `kind`. Returns `:ok`, or
  `{:error, retry_after_seconds}` when the key must wait. Without a running
  limiter (tests of other modules) every request passes.
  """
  @spec check(atom(), term(), integer()) :: :ok | {:error, pos_integer()}
  def check(kind, key, now_us \\ System.monotonic_time(:microsecond)) do
    {rate, burst} = Map.fetch!(limits(), kind)
    interval = round(1_000_000 / rate)

    if :ets.whereis(@table) == :undefined,
      do: :ok,
      else: spend({kind, key}, interval, interval * burst, now_us)
  end

  # GCRA: `tat` is the theoretical arrival time of the next request. A
  # request is allowed when tat - now <= burst tolerance; it moves tat by one
  # interval. Compare-and-swap retries when another process moved tat first.
  defp spend(key, interval, tolerance, now) do
    {old, tat} =
      case :ets.lookup(@table, key) do
        [{^key, tat}] -> {tat, max(tat, now)}
        [] -> {nil, now}
      end

    cond do
      tat + interval - now > tolerance ->
        {:error, max(1, ceil_div(tat + interval - now - tolerance, 1_000_000))}

      old == nil ->
        if :ets.insert_new(@table, {key, tat + interval}),
          do: :ok,
          else: spend(key, interval, tolerance, now)

      :ets.select_replace(@table, [{{key, old}, [], [{{{:const, key}, tat + interval}}]}]) == 1 ->
        :ok

      true ->
        spend(key, interval, tolerance, now)
    end
  end

  defp ceil_div(a, b), do: div(a + b - 1, b)

  @impl true
  def init(:ok) do
    :ets.new(@table, [:named_table, :public, :set, write_concurrency: true])
    Process.send_after(self(), :sweep, @sweep_ms)
    {:ok, nil}
  end

  @impl true
  def handle_info(:sweep, state) do
    # A key whose tat has passed is back at a full bucket: dropping it
    # changes nothing.
    now = System.monotonic_time(:microsecond)
    :ets.select_delete(@table, [{{:_, :"$1"}, [{:<, :"$1", now}], [true]}])
    Process.send_after(self(), :sweep, @sweep_ms)
    {:noreply, state}
  end
end

defmodule SoulMem.Cluster.Heartbeat.Replay do
  @moduledoc """
  The nonces of the heartbeats accepted lately, so that a captured packet
  sent again within the time window is refused. Bounded: entries older than
  the window are dropped (such a packet fails the time check anyway), and
  past `max` entries the oldest go first — `max` is sized so that a LAN of
  nodes beating once a second stays far below it within one window.
  """

  @enforce_keys [:seen, :order, :window_ms, :max]
  defstruct [:seen, :order, :window_ms, :max]

  @type t :: %__MODULE__{
          seen: %{binary() => integer()},
          order: :queue.queue({integer(), binary()}),
          window_ms: pos_integer(),
          max: pos_integer()
        }

  @doc "An empty cache for packets up to `window_ms` off, holding at most `max` nonces."
  @spec new(pos_integer(), pos_integer()) :: t()
  def new(window_ms \\ 30_000, max \\ 8_192),
    do: %__MODULE__{seen: %{}, order: :queue.new(), window_ms: window_ms, max: max}

  @doc "Remembers `nonce` seen at `now_ms`; `{:error, :replay}` when it was seen already."
  @spec check(t(), binary(), integer()) :: {:ok, t()} | {:error, :replay}
  def check(%__MODULE__{} = cache, nonce, now_ms) do
    cache = expire(cache, now_ms)

    if Map.has_key?(cache.seen, nonce) do
      {:error, :replay}
    else
      cache = %{
        cache
        | seen: Map.put(cache.seen, nonce, now_ms),
          order: :queue.in({now_ms, nonce}, cache.order)
      }

      {:ok, trim(cache)}
    end
  end

  @doc "How many nonces the cache holds."
  @spec size(t()) :: non_neg_integer()
  def size(%__MODULE__{seen: seen}), do: map_size(seen)

  # A packet is accepted up to window_ms off either way, so a nonce must be
  # kept for twice the window after it was seen.
  defp expire(cache, now) do
    case :queue.peek(cache.order) do
      {:value, {at, nonce}} when now - at > 2 * cache.window_ms ->
        expire(drop(cache, nonce), now)

      _ ->
        cache
    end
  end

  defp trim(%{seen: seen, max: max} = cache) when map_size(seen) <= max, do: cache

  defp trim(cache) do
    {:value, {_at, nonce}} = :queue.peek(cache.order)
    trim(drop(cache, nonce))
  end

  defp drop(cache, nonce),
    do: %{cache | seen: Map.delete(cache.seen, nonce), order: :queue.drop(cache.order)}
end

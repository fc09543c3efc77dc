defmodule SoulMem.Cluster.Heartbeat do
  @moduledoc """
  The gossip heartbeat packet: who sends it, when, and a MAC over both.

  Fixed layout, big-endian, never `binary_to_term`:

      "SMHB" | version 1 (1 byte) | sent_at ms since the epoch (8) |
      nonce (16 random bytes) | name length n (1) | node name (n bytes) |
      HMAC-SHA256(secret, everything before) (32)

  `verify/4` checks the MAC in constant time (`:crypto.hash_equals/2`)
  before it reads a single field, then the layout, the time window and the
  nonce cache (`SoulMem.Cluster.Heartbeat.Replay`). A packet someone without
  the secret made, or one captured and sent again, is refused with a reason.
  """

  @magic "SMHB"
  @version 1
  @mac_bytes 32
  @nonce_bytes 16
  # magic + version + time + nonce + length + a name of at least "a@b" + MAC
  @min_bytes 4 + 1 + 8 + @nonce_bytes + 1 + 3 + @mac_bytes
  @max_bytes 4 + 1 + 8 + @nonce_bytes + 1 + 255 + @mac_bytes

  @typedoc "Why a packet was refused."
  @type reject :: :malformed | :bad_mac | :stale | :replay | :bad_name

  @typedoc "A heartbeat that passed every check."
  @type t :: %{node: node(), sent_at: integer(), nonce: binary()}

  @doc "A heartbeat from `node` at `now_ms`, with a fresh nonce, MAC'd with `secret`."
  @spec encode(node(), binary(), integer()) :: binary()
  def encode(node, secret, now_ms \\ System.os_time(:millisecond))
      when is_atom(node) and is_binary(secret) do
    name = Atom.to_string(node)

    body =
      <<@magic, @version, now_ms::64-signed, :crypto.strong_rand_bytes(@nonce_bytes)::binary,
        byte_size(name)::8, name::binary>>

    body <> mac(secret, body)
  end

  @doc """
  Checks `packet` against `secret`, the clock `now_ms` (a sender's time may
  be `window_ms` off either way) and the nonces already seen (`replay`).
  Returns the heartbeat and the updated nonce cache, or the reason it was
  refused (the cache unchanged).
  """
  @spec verify(binary(), binary(), SoulMem.Cluster.Heartbeat.Replay.t(), keyword()) ::
          {:ok, t(), SoulMem.Cluster.Heartbeat.Replay.t()} | {:error, reject()}
  def verify(packet, secret, replay, opts \\ []) do
    now = Keyword.get(opts, :now_ms, System.os_time(:millisecond))
    window = Keyword.get(opts, :window_ms, 30_000)

    with {:ok, body} <- authentic(packet, secret),
         {:ok, beat} <- decode(body),
         :ok <- fresh(beat, now, window),
         {:ok, replay} <- SoulMem.Cluster.Heartbeat.Replay.check(replay, beat.nonce, now) do
      {:ok, beat, replay}
    end
  end

  # The MAC is checked over the raw bytes first: nothing from an
  # unauthenticated sender is parsed, nor becomes an atom.
  defp authentic(packet, secret)
       when is_binary(packet) and byte_size(packet) >= @min_bytes and
              byte_size(packet) <= @max_bytes do
    body_size = byte_size(packet) - @mac_bytes
    <<body::binary-size(body_size), tag::binary-size(@mac_bytes)>> = packet

    if :crypto.hash_equals(mac(secret, body), tag), do: {:ok, body}, else: {:error, :bad_mac}
  end

  defp authentic(_packet, _secret), do: {:error, :malformed}

  defp decode(
         <<@magic, @version, sent_at::64-signed, nonce::binary-size(@nonce_bytes), n::8,
           name::binary-size(n)>>
       ) do
    if node_name?(name),
      do: {:ok, %{node: String.to_atom(name), sent_at: sent_at, nonce: nonce}},
      else: {:error, :bad_name}
  end

  defp decode(_body), do: {:error, :malformed}

  defp fresh(%{sent_at: at}, now, window) when abs(now - at) <= window, do: :ok
  defp fresh(_beat, _now, _window), do: {:error, :stale}

  # name@host with the characters node names use; anything else is refused
  # even from a holder of the secret.
  defp node_name?(name), do: name =~ ~r/\A[A-Za-z0-9_\-]+@[A-Za-z0-9_\-.:]+\z/

  defp mac(secret, body), do: :crypto.mac(:hmac, :sha256, secret, body)
end

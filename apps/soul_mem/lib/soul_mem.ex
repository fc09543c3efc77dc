defmodule SoulMem do
  @moduledoc """
  SoulMem: long-term memory for role-play characters.

  The runtime app. Its public API:

    * `SoulMem.Memory` — a character's memory graph (import, stats, notes,
      export), held by the Rust core;
    * `SoulMem.JSON` — JSON encoding and decoding;
    * `SoulMem.Error` — the error of every failing operation.

  `SoulMem.Native` holds the NIF stubs and is private to this app.
  """

  @doc """
  The version of the `:soul_mem` application.
  """
  @spec version() :: String.t()
  def version do
    case Application.spec(:soul_mem, :vsn) do
      nil -> "0.0.0"
      vsn -> List.to_string(vsn)
    end
  end
end

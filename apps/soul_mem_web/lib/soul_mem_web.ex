defmodule SoulMemWeb do
  @moduledoc """
  The chat endpoint of SoulMem (HTTP, to be served by Debian's yaws).

  A skeleton for now: the application, its supervisor and `SoulMemWeb.Health`.
  It talks to the memory only through the `:soul_mem` app's public API, never
  to the NIF.
  """
end

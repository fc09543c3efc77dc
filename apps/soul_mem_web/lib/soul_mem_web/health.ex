defmodule SoulMemWeb.Health do
  @moduledoc """
  The payload of the future health endpoint.
  """

  @typedoc "What the health endpoint reports."
  @type report :: %{status: :ok, soul_mem: String.t(), port: :inet.port_number() | nil}

  @doc """
  Reports that the web app is up, with the runtime's version and the
  configured HTTP port.
  """
  @spec check() :: report()
  def check do
    %{status: :ok, soul_mem: SoulMem.version(), port: Application.get_env(:soul_mem, :port)}
  end
end

defmodule SoulMemWeb.Health do
  @moduledoc """
  The payload of `GET /health`.
  """

  @typedoc "What the health endpoint reports."
  @type report :: %{status: :ok, soul_mem: String.t(), port: :inet.port_number() | nil}

  @doc """
  Reports that the web app is up, with the runtime's version and the HTTP
  port: the bound one while the endpoint runs, else the configured one.
  """
  @spec check() :: report()
  def check do
    port =
      if Process.whereis(SoulMemWeb.Endpoint.Listener),
        do: SoulMemWeb.Endpoint.port(),
        else: Application.get_env(:soul_mem, :port)

    %{status: :ok, soul_mem: SoulMem.version(), port: port}
  end
end

defmodule SoulMemWeb.Endpoint.Listener do
  @moduledoc """
  Hands the configuration to the embedded yaws once its processes run
  (`:yaws_api.setconf/2` binds the port) and remembers the bound port.
  """

  use GenServer

  @doc "Starts the listener: `gc:`, `sc_list:` from `:yaws_api.embedded_start_conf/4`, `host:`."
  @spec start_link(keyword()) :: GenServer.on_start()
  def start_link(opts) do
    opts = Keyword.validate!(opts, [:gc, :sc_list, :host])
    GenServer.start_link(__MODULE__, opts, name: __MODULE__)
  end

  @doc "The bound port."
  @spec port() :: :inet.port_number()
  def port, do: GenServer.call(__MODULE__, :port)

  @doc "The bound host."
  @spec host() :: String.t()
  def host, do: GenServer.call(__MODULE__, :host)

  @impl true
  def init(opts) do
    :ok = :yaws_api.setconf(opts[:gc], opts[:sc_list])
    {:ok, _gc, [[sc | _] | _]} = :yaws_api.getconf()
    port = :yaws_api.get_listen_port(sc)
    {:ok, %{port: port, host: opts[:host]}}
  end

  @impl true
  def handle_call(:port, _from, state), do: {:reply, state.port, state}
  def handle_call(:host, _from, state), do: {:reply, state.host, state}
end

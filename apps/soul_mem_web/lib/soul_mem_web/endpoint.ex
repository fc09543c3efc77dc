defmodule SoulMemWeb.Endpoint do
  @moduledoc """
  The HTTP/WebSocket endpoint: Debian's yaws, embedded under this
  supervisor (yaws is an included application of `:soul_mem_web`, never
  started as an OTP application: that would read /etc/yaws.conf).

  Every request goes to the appmod `SoulMemWeb.Router`; sockets run
  `SoulMemWeb.Socket`. One endpoint per VM (yaws registers its processes
  by name).

  Options (each defaults to the application env):

    * `:host` — the address to bind, default `"127.0.0.1"`
      (`config :soul_mem_web, host:`); binding anything but loopback must be
      configured explicitly;
    * `:port` — default `config :soul_mem, :port` (env `PORT`, 4000); `0`
      picks a free port, see `port/0`.
  """

  use Supervisor

  alias SoulMemWeb.Router

  @id ~c"soul_mem_web"

  @doc "Starts the endpoint (see the moduledoc for options)."
  @spec start_link(keyword()) :: Supervisor.on_start()
  def start_link(opts \\ []) do
    opts = Keyword.validate!(opts, [:host, :port])
    Supervisor.start_link(__MODULE__, opts, name: __MODULE__)
  end

  @doc "The port the endpoint listens on (the real one when started with port 0)."
  @spec port() :: :inet.port_number()
  def port, do: SoulMemWeb.Endpoint.Listener.port()

  @doc "The base URL of the running endpoint, e.g. `http://127.0.0.1:4000`."
  @spec url() :: String.t()
  def url, do: "http://#{SoulMemWeb.Endpoint.Listener.host()}:#{port()}"

  @impl true
  def init(opts) do
    host = opts[:host] || Application.get_env(:soul_mem_web, :host, "127.0.0.1")
    port = opts[:port] || Application.get_env(:soul_mem, :port, 4000)

    ip =
      case :inet.parse_address(to_charlist(host)) do
        {:ok, ip} ->
          ip

        {:error, _} ->
          raise ArgumentError, "invalid :host #{inspect(host)}: expected an IP address"
      end

    unless is_integer(port) and port in 0..65_535,
      do: raise(ArgumentError, "invalid :port #{inspect(port)}")

    docroot = :code.priv_dir(:soul_mem_web) |> Path.join("static") |> to_charlist()
    logdir = Path.join(System.tmp_dir!(), "soul_mem_web_yaws")
    File.mkdir_p!(logdir)

    gconf = [
      id: @id,
      logdir: to_charlist(logdir),
      ebin_dir: [],
      include_dir: [],
      keepalive_timeout: 30_000,
      # Connections past this are refused by yaws at accept.
      max_connections: Router.limit(:max_connections),
      flags: [copy_errlog: false, fail_on_bind_err: true]
    ]

    sconf = [
      port: port,
      listen: ip,
      servername: ~c"soul_mem",
      appmods: [{~c"/", Router}],
      # yaws reads this much of a body before the router sees the request;
      # the router checks route, token and rate before reading on in pieces
      # of this size, up to the route's limit (413 beyond).
      partial_post_size: Router.limit(:body_chunk_bytes),
      arg_rewrite_mod: Router,
      errormod_crash: Router,
      errormod_404: Router,
      # Without nodelay a reply followed by a push stalls ~40 ms (Nagle +
      # delayed ACK).
      soptions: [listen_opts: [backlog: 1024, nodelay: true]],
      flags: [access_log: false, auth_log: false, dir_listings: false]
    ]

    {:ok, sc_list, gc, yaws_children} = :yaws_api.embedded_start_conf(docroot, sconf, gconf, @id)

    children =
      yaws_children ++ [{SoulMemWeb.Endpoint.Listener, gc: gc, sc_list: sc_list, host: host}]

    Supervisor.init(children, strategy: :rest_for_one, max_restarts: 3, max_seconds: 5)
  end
end

defmodule SoulMemWeb.DataPlane do
  @moduledoc """
  The MessagePack data plane: the endpoint's operations over plain TCP, for
  services that are not on the BEAM (issue 19).

  Frames are `:gen_tcp`'s `{packet, 4}`: a 4-byte big-endian length, then
  that many bytes of MessagePack (`SoulMem.MsgPack`). A request is a map

      {"op": "recall", "ref": 7, "character": "demo", "token": "…", "args": {"text": "…"}}

  (`args` may be left out: `{}`); the reply carries the request's `ref`:

      {"ref": 7, "ok": true, "result": {…}}
      {"ref": 7, "ok": false, "error": {"code": "forbidden", "message": "…"}}

  The operations are those of the HTTP API and the channel
  (`SoulMemWeb.Operations`: message, recall, turn, history, graph, feedback,
  control, notes, note:get, note:put, note:delete, export, import) plus
  `subscribe` / `unsubscribe`, after which the character's events arrive as
  `{"push": "summary_updated" | "consolidated", "character": id, "payload":
  {…}}` frames. A subscription whose token is revoked ends with a
  `{"push": "unsubscribed", "character": id, "payload": {"reason":
  "unauthorized"}}` frame; one whose character stopped (idle, crash) is
  renewed by the connection's next request for that character.

  Every request's token must open its character (`SoulMemWeb.Tokens`); each
  request is charged to the client address and then the token, with the
  HTTP API's limits (`SoulMemWeb.RateLimit`). Error codes are the
  endpoint's (`SoulMemWeb.Error`) plus `invalid_frame`: a frame that is not
  MessagePack is answered with it (`ref` nil) and the connection closed; a
  frame that decodes but is not a request map is answered and the connection
  kept. A frame longer than `:max_frame` gets a `too_large` error frame and
  the connection is closed; so does a connection past `:max_connections`
  (`too_many_connections`).

  One process per connection (`SoulMemWeb.DataPlane.Connection`) answers its
  requests in order; a slow `turn` holds only its own connection.

  Options (each defaults to `config :soul_mem_web, :data_plane`, then to the
  value shown): `:host` `"127.0.0.1"`, `:port` (required; `0` picks a free
  one, see `port/0`; `SOUL_MEM_DATA_PORT` sets it), `:max_frame` 1 MiB,
  `:max_connections` 256, `:acceptors` 4. The data plane is off unless a port
  is configured; `mix soul.server` and releases start it then.
  """

  use Supervisor

  alias SoulMemWeb.DataPlane.Listener

  @defaults [host: "127.0.0.1", max_frame: 1_048_576, max_connections: 256, acceptors: 4]

  @doc "The effective options: `opts` over the app env over the defaults."
  @spec options(keyword()) :: keyword()
  def options(opts \\ []) do
    @defaults
    |> Keyword.merge(Application.get_env(:soul_mem_web, :data_plane, []))
    |> Keyword.merge(opts)
  end

  @doc "Whether the configuration asks for the data plane (a port is set)."
  @spec configured?() :: boolean()
  def configured?, do: is_integer(options()[:port])

  @doc "Starts the data plane under its own supervisor (see the moduledoc for options)."
  @spec start_link(keyword()) :: Supervisor.on_start()
  def start_link(opts \\ []) do
    opts =
      Keyword.validate!(options(opts), [:host, :port, :max_frame, :max_connections, :acceptors])

    Supervisor.start_link(__MODULE__, opts, name: __MODULE__)
  end

  @doc "The port the data plane listens on (the real one when started with port 0)."
  @spec port() :: :inet.port_number()
  def port, do: Listener.port()

  @impl true
  def init(opts) do
    ip =
      case :inet.parse_address(to_charlist(opts[:host])) do
        {:ok, ip} -> ip
        {:error, _} -> raise ArgumentError, "invalid data plane :host #{inspect(opts[:host])}"
      end

    for key <- [:max_frame, :max_connections, :acceptors],
        not (is_integer(opts[key]) and opts[key] > 0),
        do: raise(ArgumentError, "invalid data plane #{inspect(key)} #{inspect(opts[key])}")

    unless is_integer(opts[:port]) and opts[:port] in 0..65_535,
      do: raise(ArgumentError, "invalid data plane :port #{inspect(opts[:port])}")

    children = [
      {DynamicSupervisor,
       name: SoulMemWeb.DataPlane.Connections,
       strategy: :one_for_one,
       max_children: opts[:max_connections]},
      {Listener, Keyword.put(opts, :ip, ip)}
    ]

    # Connections outlive a restarted listener; a restarted connection
    # supervisor takes the listener with it.
    Supervisor.init(children, strategy: :rest_for_one)
  end
end

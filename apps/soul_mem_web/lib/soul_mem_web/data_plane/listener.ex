defmodule SoulMemWeb.DataPlane.Listener do
  @moduledoc """
  The data plane's listening socket and its pool of acceptors.

  This process owns the socket (`{packet, 4}` framing, `packet_size` the
  frame limit, so an oversize length prefix is refused by the VM before any
  of the frame is buffered); `:acceptors` processes linked to it block in
  `:gen_tcp.accept/1` and hand each connection to a new
  `SoulMemWeb.DataPlane.Connection` under `SoulMemWeb.DataPlane.Connections`.
  An acceptor that fails takes the listener down with it and the supervisor
  starts both again; running connections are not affected.
  """

  use GenServer

  require Logger

  alias SoulMemWeb.DataPlane.{Connection, Frame}
  alias SoulMemWeb.{Error, RateLimit}

  @doc false
  @spec start_link(keyword()) :: GenServer.on_start()
  def start_link(opts), do: GenServer.start_link(__MODULE__, opts, name: __MODULE__)

  @doc "The port the listening socket is bound to."
  @spec port() :: :inet.port_number()
  def port, do: GenServer.call(__MODULE__, :port)

  @impl true
  def init(opts) do
    listen_opts = [
      :binary,
      ip: opts[:ip],
      packet: 4,
      packet_size: opts[:max_frame],
      active: false,
      # An oversize length prefix is reported as {:tcp_error, _, :emsgsize};
      # without this the VM closes the socket with it and the client never
      # hears why.
      exit_on_close: false,
      reuseaddr: true,
      # Without nodelay a reply followed by a push stalls ~40 ms (Nagle +
      # delayed ACK), as on the HTTP endpoint.
      nodelay: true,
      backlog: 1024
    ]

    case :gen_tcp.listen(opts[:port], listen_opts) do
      {:ok, socket} ->
        {:ok, port} = :inet.port(socket)
        conn_opts = [max_frame: opts[:max_frame]]

        for _ <- 1..opts[:acceptors],
            do: spawn_link(fn -> accept_loop(socket, conn_opts) end)

        {:ok, %{socket: socket, port: port}}

      {:error, reason} ->
        {:stop, {:listen_failed, opts[:port], reason}}
    end
  end

  @impl true
  def handle_call(:port, _from, state), do: {:reply, state.port, state}

  defp accept_loop(listen, conn_opts) do
    case :gen_tcp.accept(listen) do
      {:ok, socket} ->
        hand_over(socket, conn_opts)
        accept_loop(listen, conn_opts)

      {:error, :closed} ->
        exit(:normal)

      # Out of file descriptors and the like: the client got nothing; keep
      # accepting the others.
      {:error, reason} ->
        Logger.warning("soul_mem_web data plane: accept failed: #{inspect(reason)}")
        accept_loop(listen, conn_opts)
    end
  end

  # Address limit first (as every HTTP request and socket upgrade), then the
  # connection cap; a refused client gets one error frame and is closed.
  defp hand_over(socket, conn_opts) do
    ip =
      case :inet.peername(socket) do
        {:ok, {ip, _port}} -> ip
        {:error, _} -> :unknown
      end

    with :ok <- admit(ip),
         {:ok, pid} <-
           start_connection(Keyword.put(conn_opts, :peer, ip)),
         :ok <- :gen_tcp.controlling_process(socket, pid) do
      Connection.go(pid, socket)
    else
      {:error, %Error{} = error} ->
        refuse(socket, error)

      {:error, _reason} ->
        :gen_tcp.close(socket)
    end
  end

  defp admit(ip) do
    case RateLimit.check(:ip, ip) do
      :ok -> :ok
      {:error, seconds} -> {:error, Error.rate_limited(seconds)}
    end
  end

  defp start_connection(opts) do
    case DynamicSupervisor.start_child(SoulMemWeb.DataPlane.Connections, {Connection, opts}) do
      {:ok, pid} ->
        {:ok, pid}

      {:error, :max_children} ->
        {:error, Error.new(:too_many_connections, "too many connections")}

      {:error, reason} ->
        {:error, reason}
    end
  end

  defp refuse(socket, error) do
    _ = :gen_tcp.send(socket, Frame.error(nil, error))
    :gen_tcp.close(socket)
  end
end

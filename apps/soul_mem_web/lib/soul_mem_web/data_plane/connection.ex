defmodule SoulMemWeb.DataPlane.Connection do
  @moduledoc """
  One data plane connection (see `SoulMemWeb.DataPlane` for the protocol).

  The socket is read one frame at a time (`active: :once`); each request is
  checked, authorized, rate limited and run before the next frame is read, so
  replies come in request order and a client that floods a connection is
  slowed by its own replies. Subscribed characters' events arrive as messages
  and are written as push frames between replies.
  """

  use GenServer, restart: :temporary

  require Logger

  alias SoulMem.MsgPack
  alias SoulMemWeb.DataPlane.Frame
  alias SoulMemWeb.{Error, Operations, RateLimit, Tokens}

  @forwarded_events [:summary_updated, :consolidated]
  # Requests are small; large documents (import) stay within the frame size.
  @max_elements 200_000

  @doc false
  @spec start_link(keyword()) :: GenServer.on_start()
  def start_link(opts), do: GenServer.start_link(__MODULE__, opts)

  @doc "Hands the accepted `socket` (already given to `pid`) to the connection."
  @spec go(pid(), :gen_tcp.socket()) :: :ok
  def go(pid, socket) do
    send(pid, {:go, socket})
    :ok
  end

  @impl true
  def init(opts) do
    :ok = Tokens.subscribe()
    {:ok, %{socket: nil, peer: opts[:peer], max_frame: opts[:max_frame], subscriptions: %{}}}
  end

  @impl true
  def handle_info({:go, socket}, state) do
    :ok = :inet.setopts(socket, active: :once)
    {:noreply, %{state | socket: socket}}
  end

  def handle_info({:tcp, socket, data}, %{socket: socket} = state) do
    case MsgPack.decode(data, max_elements: @max_elements) do
      {:ok, body} ->
        state = handle_body(body, state)

        case :inet.setopts(socket, active: :once) do
          :ok -> {:noreply, state}
          {:error, _closed} -> {:stop, :normal, state}
        end

      # Not MessagePack: the stream cannot be trusted to be in step any more.
      {:error, error} ->
        close_with(state, Frame.error(nil, Frame.undecodable(error)))
    end
  end

  # The length prefix announced more than :max_frame (the VM refused to read it).
  def handle_info({:tcp_error, socket, :emsgsize}, %{socket: socket} = state) do
    close_with(
      state,
      Frame.error(nil, Error.new(:too_large, "the frame exceeds #{state.max_frame} bytes"))
    )
  end

  # Closed, also in the middle of a frame: nothing to answer.
  def handle_info({:tcp_closed, socket}, %{socket: socket} = state), do: {:stop, :normal, state}

  def handle_info({:tcp_error, socket, _reason}, %{socket: socket} = state),
    do: {:stop, :normal, state}

  def handle_info({:soul_mem, character, event, payload}, state)
      when event in @forwarded_events and is_map_key(state.subscriptions, character) do
    body = Operations.event_body(event, payload)

    send_frame(state, Frame.push(Atom.to_string(event), character, body))
    {:noreply, state}
  end

  # The character stopped: it is subscribed again at the next request for it.
  def handle_info({:DOWN, mref, :process, _pid, _reason}, state) do
    subscriptions =
      Map.new(state.subscriptions, fn
        {id, %{mref: ^mref} = sub} -> {id, %{sub | pid: nil, mref: nil}}
        other -> other
      end)

    {:noreply, %{state | subscriptions: subscriptions}}
  end

  # A token changed: subscriptions whose token no longer opens the character end.
  def handle_info({Tokens, :changed}, state) do
    revoked = for {id, sub} <- state.subscriptions, not Tokens.verify(id, sub.token), do: id

    state =
      Enum.reduce(revoked, state, fn id, state ->
        send_frame(state, Frame.push("unsubscribed", id, %{"reason" => "unauthorized"}))
        drop_subscription(state, id)
      end)

    {:noreply, state}
  end

  def handle_info(_other, state), do: {:noreply, state}

  ## Requests

  defp handle_body(body, state) do
    case Frame.request(body) do
      {:ok, request} ->
        {reply, state} = guarded(request, state)
        send_frame(state, reply)
        state

      {:error, ref, error} ->
        send_frame(state, Frame.error(ref, error))
        state
    end
  end

  # A failing operation answers its own request; the connection goes on.
  defp guarded(request, state) do
    case admit(request, state.peer) do
      :ok -> run(request, state)
      {:error, error} -> {Frame.error(request.ref, error), state}
    end
  catch
    kind, reason ->
      Logger.error(
        "soul_mem_web data plane: #{request.op} on #{request.character} failed: " <>
          Exception.format(kind, reason, __STACKTRACE__)
      )

      {Frame.error(request.ref, Error.new(:internal)), state}
  end

  # As an HTTP request: the client address's rate, the token, then its rate
  # (keyed by its digest, so the limiter's table holds no secret).
  defp admit(%{character: character, token: token}, peer) do
    with :ok <- rate(:ip, peer) do
      cond do
        Tokens.verify(character, token) -> rate(:token, Tokens.digest(token))
        Tokens.known?(token) -> {:error, Error.new(:forbidden)}
        true -> {:error, Error.new(:unauthorized)}
      end
    end
  end

  defp rate(kind, key) do
    case RateLimit.check(kind, key) do
      :ok -> :ok
      {:error, seconds} -> {:error, Error.rate_limited(seconds)}
    end
  end

  defp run(%{op: "subscribe"} = request, state) do
    case subscribe(state, request.character, request.token) do
      {:ok, state} -> {Frame.ok(request.ref, %{"subscribed" => true}), state}
      {:error, error} -> {Frame.error(request.ref, error), state}
    end
  end

  defp run(%{op: "unsubscribe"} = request, state) do
    {Frame.ok(request.ref, %{"subscribed" => false}), drop_subscription(state, request.character)}
  end

  defp run(%{op: op} = request, state) do
    if op in Operations.names() do
      case Operations.run(request.character, op, request.args) do
        {:ok, result} -> {Frame.ok(request.ref, result), renew(state, request.character)}
        {:error, error} -> {Frame.error(request.ref, error), state}
      end
    else
      {Frame.error(request.ref, Error.new(:unknown_event, "unknown op #{inspect(op)}")), state}
    end
  end

  ## Subscriptions

  defp subscribe(state, character, token) do
    with {:ok, pid} <- Operations.ensure_character(character),
         :ok <- subscribe_pid(pid, state.subscriptions[character]) do
      sub =
        case state.subscriptions[character] do
          %{pid: ^pid} = sub -> %{sub | token: token}
          _ -> %{pid: pid, mref: Process.monitor(pid), token: token}
        end

      {:ok, put_in(state.subscriptions[character], sub)}
    end
  end

  defp subscribe_pid(pid, %{pid: pid}), do: :ok

  defp subscribe_pid(pid, _other) do
    case SoulMem.subscribe(pid) do
      :ok -> :ok
      {:error, reason} -> {:error, Error.from(reason)}
    end
  end

  # After a request that started the character again, its subscription follows.
  defp renew(state, character) do
    case state.subscriptions[character] do
      %{pid: nil, token: token} ->
        case subscribe(state, character, token) do
          {:ok, state} -> state
          {:error, _} -> state
        end

      _ ->
        state
    end
  end

  defp drop_subscription(state, character) do
    case Map.pop(state.subscriptions, character) do
      {nil, _} ->
        state

      {sub, subscriptions} ->
        if sub.mref, do: Process.demonitor(sub.mref, [:flush])
        if sub.pid, do: SoulMem.unsubscribe(sub.pid)
        %{state | subscriptions: subscriptions}
    end
  end

  # A write to a closed peer fails; the close itself arrives as :tcp_closed.
  defp send_frame(state, frame), do: _ = :gen_tcp.send(state.socket, frame)

  # The last frame, then the end of the connection: shutting the write side
  # down first lets the frame out before the socket closes with the process.
  defp close_with(state, frame) do
    send_frame(state, frame)
    _ = :gen_tcp.shutdown(state.socket, :write)
    {:stop, :normal, state}
  end
end

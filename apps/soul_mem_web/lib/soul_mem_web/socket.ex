defmodule SoulMemWeb.Socket do
  @moduledoc """
  One Phoenix-Channels-V2 WebSocket connection: the yaws websocket
  callback module (basic callback type) that `SoulMemWeb.Router` hands
  upgraded requests to. yaws runs it in one process per connection.

  Topics are `character:<id>`. `phx_join` checks the token (the join
  payload's `token`, else the socket's `token` param) against that
  character (`SoulMemWeb.Tokens.verify/2`), starts the character when needed
  and subscribes this process to its events; `phx_leave` replies and closes
  the channel; `heartbeat` on topic `phoenix` is answered. Other events are
  the operations of `SoulMemWeb.Operations`, answered with `phx_reply`.
  The character's `summary_updated` and `consolidated` events are pushed to
  every channel of that character.

  `chat` `{text}` runs a streamed turn (`SoulMem.start_turn/3`) beside the
  socket: its `phx_reply` comes once the message is stored and recalled
  (`{turn, recall}`; an error reply means nothing was stored), then the
  channel gets `reply_delta` `{turn, text}` pieces and `reply_done` `{turn,
  text}` or `reply_error` `{turn, error}`. At most two turns run per socket
  at once (`busy` past it). A channel whose token is revoked is
  closed (`phx_close`) when the token store says so, and refused at its
  next push in any case.

  yaws closes the whole socket (1011, nothing logged) when a callback
  raises, so every callback is wrapped: a failing handler answers that one
  push with an error reply and the socket and its other channels go on. A
  character that crashes is restarted on the channel's next push and
  subscribed again; the socket stays open.
  """

  require Logger

  alias SoulMemWeb.{Error, Operations, Protocol, Tokens}
  alias SoulMemWeb.Protocol.Message

  @forwarded_events [:summary_updated, :consolidated]
  # Streamed chat turns one socket may run at once.
  @max_turns 2
  @max_character_bytes 128

  @typedoc "The connection's state."
  @type state :: %{
          token: String.t() | nil,
          channels: %{
            String.t() => %{join_ref: String.t() | nil, character: String.t(), token: term()}
          },
          characters: %{String.t() => %{pid: pid(), mref: reference()}},
          turns: %{reference() => map()},
          turn_seq: non_neg_integer()
        }

  @type frames :: [{:text, binary()}]

  @doc "yaws callback: the initial state, from the router's `%{token: token}`."
  @spec init([term()]) :: {:ok, state()}
  def init([_arg, %{token: token}]) do
    :ok = Tokens.subscribe()

    if is_binary(token),
      do: Registry.register(SoulMemWeb.Socket.Registry, Tokens.digest(token), nil)

    {:ok, %{token: token, channels: %{}, characters: %{}, turns: %{}, turn_seq: 0}}
  end

  @doc """
  How many sockets are open with `token` (their upgrade param), for the
  router's per-token cap.
  """
  @spec count(String.t() | nil) :: non_neg_integer()
  def count(token) when is_binary(token),
    do: Registry.count_match(SoulMemWeb.Socket.Registry, Tokens.digest(token), :_)

  def count(_token), do: 0

  @doc """
  yaws callback: one client message. Text frames are Phoenix frames; binary
  frames (the V2 binary push format) are not supported and answered with an
  error push; a close frame is echoed.
  """
  @spec handle_message(term(), state()) ::
          {:reply, frames(), state()} | {:noreply, state()} | {:close, term()}
  def handle_message({:text, data}, state) do
    guarded(state, fn -> handle_text(data, state) end)
  end

  def handle_message({:binary, _data}, state) do
    error = Error.new(:invalid_payload, "binary frames are not supported; send JSON text frames")
    {:reply, [socket_error(error)], state}
  end

  def handle_message({:close, status, _reason}, _state), do: {:close, status}

  def handle_message(_other, state), do: {:noreply, state}

  @doc "yaws callback: a message to the connection process (character events)."
  @spec handle_info(term(), state()) :: {:reply, frames(), state()} | {:noreply, state()}
  def handle_info(info, state) do
    guarded(state, fn -> info(info, state) end)
  end

  @doc "yaws callback: the connection ends (subscriptions end with this process)."
  @spec terminate(term(), state()) :: :ok
  def terminate(_reason, _state), do: :ok

  ## Frames

  defp handle_text(data, state) do
    case Protocol.decode(data) do
      {:ok, message} ->
        # One budget for every socket of the token, so opening more sockets
        # buys no extra rate.
        case SoulMemWeb.RateLimit.check(:frame, Tokens.digest(state.token || "")) do
          :ok ->
            handle_frame(message, state)

          {:error, seconds} ->
            {:reply, [reply_error(message, Error.rate_limited(seconds))], state}
        end

      {:error, error, {join_ref, ref, topic}} when is_binary(topic) ->
        {:reply,
         [text(Protocol.reply(join_ref, ref, topic, :error, Protocol.error_response(error)))],
         state}

      {:error, error, _refs} ->
        {:reply, [socket_error(error)], state}
    end
  end

  defp handle_frame(%Message{topic: "phoenix", event: "heartbeat"} = m, state),
    do: {:reply, [reply_ok(m, %{})], state}

  defp handle_frame(%Message{event: "phx_join"} = m, state), do: join(m, state)
  defp handle_frame(%Message{event: "phx_leave"} = m, state), do: leave(m, state)

  defp handle_frame(%Message{topic: topic, join_ref: join_ref} = m, state) do
    case state.channels do
      %{^topic => %{join_ref: ^join_ref, character: character, token: token}} ->
        # A revoked token stops at the next push, whatever the notification's timing.
        if Tokens.verify(character, token) do
          run(m, character, state)
        else
          {frames, state} = close_revoked(state)
          {:reply, [reply_error(m, Error.new(:unauthorized)) | frames], state}
        end

      _ ->
        {:reply, [reply_error(m, Error.new(:unmatched_topic, "join #{topic} first"))], state}
    end
  end

  defp join(%Message{topic: topic, payload: payload} = m, state) do
    token = if is_binary(payload["token"]), do: payload["token"], else: state.token

    with {:ok, character} <- character_of(topic),
         :ok <- authorize(character, token),
         {:ok, state} <- subscribe(state, character) do
      # Joining a topic again replaces the earlier join (as Phoenix does).
      closed =
        case state.channels do
          %{^topic => old} -> [text(Protocol.close(old.join_ref, topic))]
          _ -> []
        end

      channels =
        Map.put(state.channels, topic, %{join_ref: m.join_ref, character: character, token: token})

      {:reply, closed ++ [reply_ok(m, %{"character" => character})],
       %{state | channels: channels}}
    else
      {:error, %Error{} = error} -> {:reply, [reply_error(m, error)], state}
    end
  end

  defp leave(%Message{topic: topic} = m, state) do
    if Map.has_key?(state.channels, topic) do
      {close, state} = drop_channel(state, topic)
      {:reply, [reply_ok(m, %{}), close], state}
    else
      {:reply, [reply_error(m, Error.new(:unmatched_topic, "#{topic} is not joined"))], state}
    end
  end

  defp run(%Message{event: "chat", payload: payload} = m, character, state) do
    with :ok <- turn_slot(state),
         {:ok, text, opts} <- Operations.chat_args(character, payload),
         {:ok, state} <- subscribe(state, character) do
      {:ok, ref} = SoulMem.start_turn(character, text, opts)
      turn = state.turn_seq + 1
      entry = %{message: m, turn: turn, character: character, replied: false}
      {:noreply, %{state | turns: Map.put(state.turns, ref, entry), turn_seq: turn}}
    else
      {:error, %Error{} = error} -> {:reply, [reply_error(m, error)], state}
    end
  end

  defp run(%Message{event: event, payload: payload} = m, character, state) do
    if event in Operations.names() do
      # Resubscribes after a character crash (it is started again here).
      case subscribe(state, character) do
        {:ok, state} ->
          case safe_run(character, event, payload) do
            {:ok, response} -> {:reply, [reply_ok(m, response)], state}
            {:error, error} -> {:reply, [reply_error(m, error)], state}
          end

        {:error, error} ->
          {:reply, [reply_error(m, error)], state}
      end
    else
      {:reply, [reply_error(m, Error.new(:unknown_event, "unknown event #{inspect(event)}"))],
       state}
    end
  end

  ## Characters and their events

  defp character_of("character:" <> id)
       when id != "" and byte_size(id) <= @max_character_bytes,
       do: if(String.valid?(id), do: {:ok, id}, else: {:error, Error.new(:unmatched_topic)})

  defp character_of(topic),
    do:
      {:error, Error.new(:unmatched_topic, "unknown topic #{inspect(topic)}; use character:<id>")}

  defp authorize(character, token) do
    cond do
      Tokens.verify(character, token) -> :ok
      Tokens.known?(token) -> {:error, Error.new(:forbidden)}
      true -> {:error, Error.new(:unauthorized)}
    end
  end

  defp subscribe(state, character) do
    case state.characters do
      %{^character => %{pid: pid}} when is_pid(pid) ->
        if Process.alive?(pid), do: {:ok, state}, else: resubscribe(state, character)

      _ ->
        resubscribe(state, character)
    end
  end

  defp resubscribe(state, character) do
    with {:ok, pid} <- Operations.ensure_character(character),
         :ok <- SoulMem.subscribe(pid) do
      mref = Process.monitor(pid)
      {:ok, %{state | characters: Map.put(state.characters, character, %{pid: pid, mref: mref})}}
    else
      {:error, %Error{} = error} -> {:error, error}
      {:error, reason} -> {:error, Error.from(reason)}
    end
  end

  defp unsubscribe(state, character) do
    still_joined? = Enum.any?(state.channels, fn {_t, ch} -> ch.character == character end)

    case state.characters do
      %{^character => %{pid: pid, mref: mref}} when not still_joined? ->
        Process.demonitor(mref, [:flush])
        SoulMem.unsubscribe(pid)
        %{state | characters: Map.delete(state.characters, character)}

      _ ->
        state
    end
  end

  defp info({:soul_mem, character, event, payload}, state) when event in @forwarded_events do
    body = Operations.event_body(event, payload)

    frames =
      for {topic, %{character: ^character, join_ref: join_ref}} <- state.channels,
          do: text(Protocol.push(join_ref, topic, Atom.to_string(event), body))

    if frames == [], do: {:noreply, state}, else: {:reply, frames, state}
  end

  defp info({:soul_mem_turn, ref, event}, state) when is_map_key(state.turns, ref) do
    entry = state.turns[ref]
    {frames, entry} = turn_frames(event, entry)

    state =
      if match?({:done, _}, event),
        do: %{state | turns: Map.delete(state.turns, ref)},
        else: %{state | turns: Map.put(state.turns, ref, entry)}

    if frames == [], do: {:noreply, state}, else: {:reply, frames, state}
  end

  defp info({:DOWN, mref, :process, _pid, _reason}, state) do
    characters =
      state.characters
      |> Enum.reject(fn {_id, %{mref: ref}} -> ref == mref end)
      |> Map.new()

    {:noreply, %{state | characters: characters}}
  end

  defp info({Tokens, :changed}, state) do
    case close_revoked(state) do
      {[], state} -> {:noreply, state}
      {frames, state} -> {:reply, frames, state}
    end
  end

  defp info(_other, state), do: {:noreply, state}

  # Closes (phx_close) every channel whose token no longer opens its character.
  defp close_revoked(state) do
    revoked =
      for {topic, ch} <- state.channels, not Tokens.verify(ch.character, ch.token), do: topic

    Enum.map_reduce(revoked, state, &drop_channel(&2, &1))
  end

  # Ends a joined channel: forgets it, unsubscribes from its character when no
  # other channel needs it, and returns the phx_close frame to send.
  defp drop_channel(state, topic) do
    {channel, channels} = Map.pop!(state.channels, topic)
    state = unsubscribe(%{state | channels: channels}, channel.character)
    {text(Protocol.close(channel.join_ref, topic)), state}
  end

  ## Chat turns

  defp turn_slot(%{turns: turns}) when map_size(turns) >= @max_turns,
    do: {:error, Error.new(:busy, "a reply is still coming; wait for it")}

  defp turn_slot(_state), do: :ok

  # The push is answered once its message is stored and recalled.
  defp turn_frames({:recalled, recall}, entry) do
    body = %{"turn" => entry.turn, "recall" => Operations.render_recall(recall)}
    {[reply_ok(entry.message, body)], %{entry | replied: true}}
  end

  # Failed before its message was stored: the push's own error reply.
  defp turn_frames({:done, {:error, reason}}, %{replied: false} = entry),
    do: {[reply_error(entry.message, Error.from(reason))], entry}

  defp turn_frames(event, entry) do
    case Operations.reply_event(entry.character, event) do
      {name, body} -> {[turn_push(entry, name, body)], entry}
      nil -> {[], entry}
    end
  end

  defp turn_push(%{message: m, turn: turn}, event, body),
    do: text(Protocol.push(m.join_ref, m.topic, event, Map.put(body, "turn", turn)))

  ## Helpers

  # A failing operation answers its own push with an error reply.
  defp safe_run(character, event, payload) do
    Operations.run(character, event, payload)
  catch
    kind, reason ->
      Logger.error(
        "soul_mem_web socket: #{event} on #{character} failed: " <>
          Exception.format(kind, reason, __STACKTRACE__)
      )

      {:error, Error.new(:internal)}
  end

  defp guarded(state, fun) do
    fun.()
  catch
    kind, reason ->
      Logger.error(
        "soul_mem_web socket: handler failed: " <> Exception.format(kind, reason, __STACKTRACE__)
      )

      {:reply, [socket_error(Error.new(:internal))], state}
  end

  defp reply_ok(%Message{} = m, response),
    do: text(Protocol.reply(m.join_ref, m.ref, m.topic, :ok, response))

  defp reply_error(%Message{} = m, %Error{} = error),
    do: text(Protocol.reply(m.join_ref, m.ref, m.topic, :error, Protocol.error_response(error)))

  # An error that belongs to no channel (unreadable frame): pushed on the
  # socket's own topic "phoenix", which the client ignores.
  defp socket_error(%Error{} = error),
    do: text(Protocol.push(nil, "phoenix", "phx_error", Error.body(error)))

  defp text(binary), do: {:text, binary}
end

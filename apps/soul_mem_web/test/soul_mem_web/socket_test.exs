defmodule SoulMemWeb.SocketTest do
  # Drives the channel callbacks directly (no network): this test process
  # plays the yaws connection process. Not async: it changes app env and
  # restarts characters.
  use ExUnit.Case, async: false

  import ExUnit.CaptureLog

  alias SoulMemWeb.{Socket, Tokens}

  defmodule RaisingRetrieval do
    @moduledoc false
    @behaviour SoulMem.Retrieval.Backend
    @impl true
    def recall(_memory, _request, _opts), do: raise("retrieval exploded")
    @impl true
    def record(_memory, _ids, _at), do: :ok
  end

  setup do
    id = "sock-#{System.unique_integer([:positive])}"
    {:ok, token} = Tokens.create(id)

    on_exit(fn ->
      Tokens.revoke(id)
      SoulMem.Characters.stop(id)
    end)

    {:ok, state} = Socket.init([:arg, %{token: token}])
    %{id: id, token: token, state: state, topic: "character:#{id}"}
  end

  defp send_frame(state, frame) do
    case Socket.handle_message({:text, SoulMem.JSON.encode!(frame)}, state) do
      {:reply, frames, state} ->
        {Enum.map(frames, fn {:text, f} -> SoulMem.JSON.decode!(f) end), state}

      {:noreply, state} ->
        {[], state}
    end
  end

  defp join(state, topic, payload \\ %{}) do
    {[reply], state} = send_frame(state, ["1", "1", topic, "phx_join", payload])
    {reply, state}
  end

  test "a revoke closes joined channels at once and refuses their next push",
       %{state: state, topic: topic, id: id} do
    {["1", "1", ^topic, "phx_reply", %{"status" => "ok"}], state} = join(state, topic)
    :ok = Tokens.revoke(id)
    # The socket process (this test process) is told by the token store.
    assert_receive {Tokens, :changed} = note
    assert {:reply, [{:text, close}], state} = Socket.handle_info(note, state)
    assert ["1", _, ^topic, "phx_close", %{}] = SoulMem.JSON.decode!(close)

    {[reply], _state} =
      send_frame(state, ["1", "2", topic, "message", %{"role" => "user", "text" => "还在吗"}])

    assert ["1", "2", ^topic, "phx_reply", %{"status" => "error"}] = reply
  end

  test "a revoke between notifications still stops the next push",
       %{state: state, topic: topic, id: id} do
    {_, state} = join(state, topic)
    :ok = Tokens.revoke(id)

    {[reply | _], _state} =
      send_frame(state, ["1", "2", topic, "message", %{"role" => "user", "text" => "还在吗"}])

    assert [
             "1",
             "2",
             ^topic,
             "phx_reply",
             %{"status" => "error", "response" => %{"reason" => "unauthorized"}}
           ] = reply
  end

  test "join, push, leave", %{state: state, topic: topic, id: id} do
    {reply, state} = join(state, topic)

    assert [
             "1",
             "1",
             ^topic,
             "phx_reply",
             %{"status" => "ok", "response" => %{"character" => ^id}}
           ] = reply

    {[reply], state} =
      send_frame(state, ["1", "2", topic, "message", %{"role" => "user", "text" => "你好"}])

    assert ["1", "2", ^topic, "phx_reply", %{"status" => "ok", "response" => %{"ok" => true}}] =
             reply

    assert {:ok, [%{text: "你好", role: :user}]} = SoulMem.Admin.window(id)

    {[reply, close], state} = send_frame(state, ["1", "3", topic, "phx_leave", %{}])
    assert [_, "3", ^topic, "phx_reply", %{"status" => "ok"}] = reply
    assert ["1", "1", ^topic, "phx_close", %{}] = close

    {[reply], _state} =
      send_frame(state, ["1", "4", topic, "message", %{"role" => "user", "text" => "x"}])

    assert [
             _,
             "4",
             ^topic,
             "phx_reply",
             %{"status" => "error", "response" => %{"reason" => "unmatched_topic"}}
           ] = reply

    assert {:ok, [_one]} = SoulMem.Admin.window(id)
  end

  test "heartbeat is answered", %{state: state} do
    assert {[[nil, "9", "phoenix", "phx_reply", %{"status" => "ok"}]], _} =
             send_frame(state, [nil, "9", "phoenix", "heartbeat", %{}])
  end

  test "joining another character with this token is forbidden", %{state: state} do
    {reply, state} = join(state, "character:demo")

    assert [
             _,
             _,
             _,
             "phx_reply",
             %{"status" => "error", "response" => %{"reason" => "forbidden"}}
           ] = reply

    assert state.channels == %{}
  end

  test "a join payload token is checked too", %{state: state, topic: topic} do
    {reply, _} = join(state, topic <> "-other", %{"token" => "wrong"})

    assert [
             _,
             _,
             _,
             "phx_reply",
             %{"status" => "error", "response" => %{"reason" => "unauthorized"}}
           ] = reply

    {reply, _} = join(state, "room:lobby")

    assert [
             _,
             _,
             _,
             "phx_reply",
             %{"status" => "error", "response" => %{"reason" => "unmatched_topic"}}
           ] = reply
  end

  test "joining a topic again replaces the earlier join", %{state: state, topic: topic} do
    {_reply, state} = join(state, topic)
    {[close, reply], state} = send_frame(state, ["5", "5", topic, "phx_join", %{}])
    assert ["1", "1", ^topic, "phx_close", %{}] = close
    assert ["5", "5", ^topic, "phx_reply", %{"status" => "ok"}] = reply
    assert %{^topic => %{join_ref: "5"}} = state.channels
  end

  test "a failing handler answers with an error; the socket and other channels go on",
       %{state: state, topic: topic, id: id} do
    {:ok, other_token} = Tokens.create(id <> "-b")
    on_exit(fn -> Tokens.revoke(id <> "-b") end)
    on_exit(fn -> SoulMem.Characters.stop(id <> "-b") end)
    {_reply, state} = join(state, topic)
    {_reply, state} = join(state, topic <> "-b", %{"token" => other_token})

    SoulMemWeb.TestEnv.put(:soul_mem, :retrieval, RaisingRetrieval)

    log =
      capture_log(fn ->
        {[reply], _} = send_frame(state, ["1", "6", topic, "recall", %{"text" => "麻辣烫"}])

        assert [
                 "1",
                 "6",
                 ^topic,
                 "phx_reply",
                 %{"status" => "error", "response" => %{"error" => %{"code" => "internal"}}}
               ] = reply
      end)

    assert log =~ "retrieval exploded"

    {[reply], _} =
      send_frame(state, [
        "1",
        "7",
        topic <> "-b",
        "message",
        %{"role" => "user", "text" => "still here"}
      ])

    assert [_, "7", _, "phx_reply", %{"status" => "ok"}] = reply
  end

  test "a character crash does not end the channel: the next push restarts it",
       %{state: state, topic: topic, id: id} do
    {_reply, state} = join(state, topic)
    pid = SoulMem.Characters.whereis(id)
    ref = Process.monitor(pid)
    Process.exit(pid, :kill)
    assert_receive {:DOWN, ^ref, :process, ^pid, :killed}

    # The socket process is told (its monitor), as yaws would deliver it.
    assert_receive {:DOWN, _mref, :process, ^pid, :killed} = down
    {:noreply, state} = Socket.handle_info(down, state)

    {[reply], state} =
      send_frame(state, ["1", "8", topic, "message", %{"role" => "user", "text" => "回来了"}])

    assert [_, "8", _, "phx_reply", %{"status" => "ok"}] = reply
    new_pid = SoulMem.Characters.whereis(id)
    assert is_pid(new_pid) and new_pid != pid
    assert %{^id => %{pid: ^new_pid}} = state.characters
  end

  test "character events are pushed to its channels", %{state: state, topic: topic, id: id} do
    {_reply, state} = join(state, topic)

    assert {:reply, [{:text, frame}], _} =
             Socket.handle_info({:soul_mem, id, :summary_updated, "我们聊了麻辣烫"}, state)

    assert ["1", nil, ^topic, "summary_updated", %{"summary" => "我们聊了麻辣烫"}] =
             SoulMem.JSON.decode!(frame)

    assert {:reply, [{:text, frame}], _} =
             Socket.handle_info({:soul_mem, id, :consolidated, %{created: ["sit_x"]}}, state)

    assert [_, nil, ^topic, "consolidated", %{"created" => ["sit_x"]}] =
             SoulMem.JSON.decode!(frame)

    assert {:noreply, _} =
             Socket.handle_info({:soul_mem, "someone-else", :summary_updated, "x"}, state)

    assert {:noreply, _} = Socket.handle_info({:soul_mem, id, :state_changed, :idle}, state)
  end

  test "unreadable frames get an error push and change nothing", %{state: state} do
    assert {:reply, [{:text, frame}], ^state} = Socket.handle_message({:text, "nope"}, state)

    assert [nil, nil, "phoenix", "phx_error", %{"error" => %{"code" => "invalid_json"}}] =
             SoulMem.JSON.decode!(frame)

    assert {:reply, [{:text, _}], ^state} = Socket.handle_message({:binary, <<1, 2>>}, state)
  end

  describe "chat" do
    setup do
      SoulMemWeb.TestEnv.put(:soul_mem, :llm_client, SoulMemWeb.StreamingLLM)
      :ok
    end

    # Feeds the turn's events to the socket, as yaws would, until the turn ends.
    defp run_turn(state, frames \\ []) do
      receive do
        {:soul_mem_turn, _ref, event} = info ->
          {new, state} =
            case Socket.handle_info(info, state) do
              {:reply, out, state} ->
                {Enum.map(out, fn {:text, f} -> SoulMem.JSON.decode!(f) end), state}

              {:noreply, state} ->
                {[], state}
            end

          if match?({:done, _}, event),
            do: {frames ++ new, state},
            else: run_turn(state, frames ++ new)
      after
        10_000 -> flunk("the turn did not end")
      end
    end

    test "the push is answered once stored and recalled; the reply streams, then is whole",
         %{state: state, topic: topic, id: id} do
      {_, state} = join(state, topic)
      assert {[], state} = send_frame(state, ["1", "5", topic, "chat", %{"text" => "还记得麻辣烫吗？"}])
      {frames, state} = run_turn(state)

      assert [["1", "5", ^topic, "phx_reply", %{"status" => "ok", "response" => reply}] | rest] =
               frames

      # A new character knows nothing yet; its context holds the message.
      assert %{"turn" => 1, "recall" => %{"memories" => [], "context" => context}} = reply
      assert context =~ "还记得麻辣烫吗？"
      deltas = for [_, nil, ^topic, "reply_delta", %{"turn" => 1, "text" => t}] <- rest, do: t
      assert length(deltas) > 2
      assert Enum.join(deltas) == SoulMemWeb.StreamingLLM.reply()
      assert ["1", nil, ^topic, "reply_done", %{"turn" => 1, "text" => full}] = List.last(rest)
      assert full == SoulMemWeb.StreamingLLM.reply()

      {:ok, history} = SoulMem.history(id)
      assert Enum.map(history.messages, & &1.text) == ["还记得麻辣烫吗？", full]
      assert state.turns == %{}
    end

    test "no LLM: the message is kept and the reply error says how to get one",
         %{state: state, topic: topic, id: id} do
      SoulMemWeb.TestEnv.put(:soul_mem, :scripted_llm_error, :not_configured)
      {_, state} = join(state, topic)
      {[], state} = send_frame(state, ["1", "6", topic, "chat", %{"text" => "在吗"}])
      {frames, _state} = run_turn(state)

      assert ["1", "6", ^topic, "phx_reply", %{"status" => "ok"}] = hd(frames)

      assert ["1", nil, ^topic, "reply_error", %{"error" => %{"code" => "llm_not_configured"}}] =
               List.last(frames)

      assert {:ok, %{messages: [%{text: "在吗"}]}} = SoulMem.history(id)
    end

    test "bad payloads are refused and store nothing; a third running turn is busy",
         %{state: state, topic: topic, id: id} do
      {_, state} = join(state, topic)

      for payload <- [%{}, %{"text" => ""}, %{"text" => 1}, %{"text" => "x", "bogus" => 1}] do
        assert {[["1", "7", ^topic, "phx_reply", %{"status" => "error"}]], _} =
                 send_frame(state, ["1", "7", topic, "chat", payload])
      end

      assert {:ok, %{messages: []}} = SoulMem.history(id)

      {[], state} = send_frame(state, ["1", "8", topic, "chat", %{"text" => "一"}])
      {[], state} = send_frame(state, ["1", "9", topic, "chat", %{"text" => "二"}])

      assert {[["1", "10", ^topic, "phx_reply", %{"status" => "error", "response" => r}]], _} =
               send_frame(state, ["1", "10", topic, "chat", %{"text" => "三"}])

      assert r["reason"] == "busy"
    end
  end
end

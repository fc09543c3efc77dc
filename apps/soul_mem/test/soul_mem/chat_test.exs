Code.require_file("../support/fake_llm.ex", __DIR__)

defmodule SoulMem.ChatTest do
  use ExUnit.Case, async: true

  import SoulMem.TestSupport

  alias SoulMem.{Character, Chat, FakeLLM}

  @moduletag :capture_log

  setup do
    server = start_supervised!({FakeLLM, owner: self()})
    id = "chat-#{System.unique_integer([:positive])}"

    start_supervised!(
      {Character,
       id: id, graph: demo_fixture(), window: 12, llm: [base_url: FakeLLM.url(server)]},
      id: id
    )

    %{id: id, server: server, llm: [base_url: FakeLLM.url(server), retries: 0]}
  end

  test "a turn recalls, asks the LLM with the rendered context, and keeps the reply", ctx do
    FakeLLM.script(ctx.server, [{:reply, "当然记得呀！白白把汤打翻了，我们笑了好久。"}])

    test = self()
    on_event = &send(test, {:turn_event, &1})

    assert {:ok, turn} = Chat.turn(ctx.id, "你还记得和小白吃麻辣烫那次吗？", llm: ctx.llm, on_event: on_event)

    assert turn.reply =~ "白白"
    assert turn.recall.memories != []
    # Each step is reported, in order.
    assert_received {:turn_event, {:recalled, %{memories: [_ | _]}}}
    assert_received {:turn_event, {:reply, "当然记得呀！" <> _}}
    assert_received {:turn_event, {:reply_stored, :ok}}

    assert_receive {:fake_llm, %{body: %{"messages" => [system, user]}}}, 5_000
    assert system["role"] == "system"
    assert system["content"] =~ "你是小红"
    assert system["content"] =~ "【相关记忆】"
    assert user["content"] == "你还记得和小白吃麻辣烫那次吗？"

    {:ok, window} = Character.window(ctx.id)
    texts = Enum.map(SoulMem.Window.visible(window), & &1.text)
    assert texts == ["你还记得和小白吃麻辣烫那次吗？", "当然记得呀！白白把汤打翻了，我们笑了好久。"]
  end

  test "an LLM failure still recalls and reports the error; the user message is kept", ctx do
    FakeLLM.script(ctx.server, [{:status, 500}])

    test = self()

    assert {:ok, %{reply: nil, llm_error: error, recall: recall}} =
             Chat.turn(ctx.id, "小白把麻辣烫打翻了",
               llm: ctx.llm,
               on_event: &send(test, {:turn_event, &1})
             )

    assert error != nil
    assert_received {:turn_event, {:reply_failed, ^error}}
    assert recall.memories != []
    {:ok, window} = Character.window(ctx.id)
    assert Enum.map(SoulMem.Window.visible(window), & &1.text) == ["小白把麻辣烫打翻了"]
  end

  test "empty text is refused and changes nothing", ctx do
    assert {:error, :empty_text} = Chat.turn(ctx.id, "  ", llm: false)
    {:ok, window} = Character.window(ctx.id)
    assert SoulMem.Window.visible(window) == []
  end

  test "a streamed turn reports each piece of the reply before the whole", ctx do
    FakeLLM.script(ctx.server, [{:stream, ["记得", "呀，", "那天下雨"]}])
    test = self()

    assert {:ok, %{reply: "记得呀，那天下雨"}} =
             Chat.turn(ctx.id, "还记得吗？",
               llm: ctx.llm,
               stream: true,
               on_event: &send(test, {:turn_event, &1})
             )

    assert_received {:turn_event, {:recalled, _}}
    assert_received {:turn_event, {:reply_delta, "记得"}}
    assert_received {:turn_event, {:reply_delta, "呀，"}}
    assert_received {:turn_event, {:reply_delta, "那天下雨"}}
    assert_received {:turn_event, {:reply, "记得呀，那天下雨"}}
    assert_received {:turn_event, {:reply_stored, :ok}}

    # The persona names the character and carries its self-description.
    assert_received {:fake_llm, %{body: %{"stream" => true, "messages" => [system | _]}}}
    assert system["content"] =~ "你是小红"
    assert system["content"] =~ "关于你："
  end
end

Code.require_file("../support/fake_llm.ex", __DIR__)

defmodule SoulMem.CompletionTest do
  use ExUnit.Case, async: true

  import SoulMem.TestSupport

  alias SoulMem.{Completion, FakeLLM}

  @moduletag :capture_log

  defp u(text), do: %{"role" => "user", "content" => text}
  defp a(text), do: %{"role" => "assistant", "content" => text}
  defp sys(text), do: %{"role" => "system", "content" => text}
  defp w(role, text), do: %{role: role, text: text}

  describe "new_turns/2" do
    test "a fresh window takes only the trailing user messages" do
      assert {0, [%{role: "user", text: "在吗"}]} =
               Completion.new_turns([], [sys("卡"), u("旧"), a("旧答"), u("在吗")])
    end

    test "what follows the window's newest message is new; re-sent turns are not" do
      window = [w(:user, "一"), w(:assistant, "答一")]

      assert {0, [%{role: "user", text: "二"}]} =
               Completion.new_turns(window, [u("一"), a("答一"), u("二")])
    end

    test "regenerate takes the reply back; edit takes the turn back and pushes the new one" do
      window = [w(:user, "一"), w(:assistant, "答一"), w(:user, "二"), w(:assistant, "答二")]
      assert {1, []} = Completion.new_turns(window, [u("一"), a("答一"), u("二")])

      assert {2, [%{role: "user", text: "二改"}]} =
               Completion.new_turns(window, [u("一"), a("答一"), u("二改")])

      # A history the character never saw: only the new user turn.
      assert {0, [%{role: "user", text: "别的"}]} =
               Completion.new_turns(window, [u("x"), a("y"), u("别的")])
    end
  end

  test "inject/3 puts the memory before, after or inside the frontend's messages" do
    msgs = [sys("卡片"), sys("例子"), u("一"), a("答"), u("二")]
    roles = fn list -> Enum.map(list, &String.first(&1.content)) end

    assert roles.(Completion.inject(msgs, "记", :before)) == ["以", "卡", "例", "一", "答", "二"]
    assert roles.(Completion.inject(msgs, "记", :after)) == ["卡", "例", "以", "一", "答", "二"]
    assert roles.(Completion.inject(msgs, "记", {:depth, 1})) == ["卡", "例", "一", "答", "以", "二"]
    assert length(Completion.inject(msgs, "", :after)) == 5
  end

  describe "run/3" do
    setup do
      server = start_supervised!({FakeLLM, owner: self()})
      id = "completion-#{System.unique_integer([:positive])}"

      start_supervised!(
        {SoulMem.Character, id: id, graph: demo_fixture(), embedder: :hash, persist: false},
        id: id
      )

      %{id: id, server: server, llm: [base_url: FakeLLM.url(server), retries: 0]}
    end

    defp texts(id) do
      {:ok, h} = SoulMem.history(id)
      Enum.map(h.messages, & &1.text)
    end

    test "a SillyTavern-shaped chat: turns pushed once, memory injected, params forwarded", ctx do
      FakeLLM.script(ctx.server, [{:reply, "答一"}, {:reply, "答二"}, {:reply, "答二b"}])
      card = sys("你是小红，十六岁的高中生。")
      example = sys("[Example Chat]\n用户：你好\n小红：你好呀！")

      body = %{
        "messages" => [card, example, u("小白还好吗？")],
        "temperature" => 0.9,
        "stop" => ["用户："]
      }

      assert {:ok, %{content: "答一", pushed: 1}} = Completion.run(ctx.id, body, llm: ctx.llm)

      assert_receive {:fake_llm, %{body: sent}}, 5_000
      assert sent["temperature"] == 0.9 and sent["stop"] == ["用户："]
      [s1, s2, memory, question] = sent["messages"]
      assert {s1["content"], s2["content"]} == {card["content"], example["content"]}
      assert memory["role"] == "system" and memory["content"] =~ "小白"
      assert question == %{"role" => "user", "content" => "小白还好吗？"}
      assert texts(ctx.id) == ["小白还好吗？", "答一"]

      # The next turn re-sends the history: only the new message is pushed.
      body = %{"messages" => [card, u("小白还好吗？"), a("答一"), u("那麻辣烫呢？")]}
      assert {:ok, %{pushed: 1}} = Completion.run(ctx.id, body, llm: ctx.llm)
      assert texts(ctx.id) == ["小白还好吗？", "答一", "那麻辣烫呢？", "答二"]

      # Regenerate: the same request again replaces the last reply.
      assert {:ok, %{content: "答二b", pushed: 0}} = Completion.run(ctx.id, body, llm: ctx.llm)
      assert texts(ctx.id) == ["小白还好吗？", "答一", "那麻辣烫呢？", "答二b"]
    end

    test "bad requests store nothing; an LLM failure keeps the user turn", ctx do
      for body <- [
            %{},
            %{"messages" => []},
            %{"messages" => [a("只有助手")]},
            %{"messages" => [u("x")], "n" => 2},
            %{"messages" => [u("x")], "tools" => []},
            %{"messages" => [%{"role" => "tool", "content" => "x"}]}
          ] do
        assert {:error, {:bad_request, _}} = Completion.run(ctx.id, body, llm: ctx.llm)
      end

      assert texts(ctx.id) == []

      FakeLLM.script(ctx.server, [{:status, 500}])

      assert {:error, {:llm, {:http_status, 500, _}}} =
               Completion.run(ctx.id, %{"messages" => [u("在吗")]}, llm: ctx.llm)

      assert texts(ctx.id) == ["在吗"]
    end
  end
end

Code.require_file("../support/fake_llm.ex", __DIR__)

defmodule SoulMem.SceneTest do
  use ExUnit.Case, async: true

  import SoulMem.TestSupport

  alias SoulMem.{Character, Chat, FakeLLM, Scene}

  @moduletag :capture_log

  @at ~U[2026-12-03 10:00:00Z]

  describe "as_witnessed/2" do
    test "the speaker's own line, another's line, a line without a speaker" do
      line = %{text: "hello", speaker: "alice", at: @at}
      assert Scene.as_witnessed("alice", line) == %{role: :assistant, text: "hello", at: @at}
      assert Scene.as_witnessed("bob", line) == %{role: :user, text: "alice: hello", at: @at}

      assert Scene.as_witnessed("bob", %{text: "hi", role: :assistant, at: @at}) ==
               %{role: :assistant, text: "hi", at: @at}
    end
  end

  defp start(id, extra \\ []) do
    start_supervised!(
      {Character, [id: id, graph: demo_fixture(), window: 12, persist: false] ++ extra},
      id: id
    )

    id
  end

  defp texts(id) do
    {:ok, window} = Character.window(id)
    Enum.map(SoulMem.Window.visible(window), &{&1.role, &1.text})
  end

  defp ids(n), do: for(i <- 1..n, do: "scene-#{i}-#{System.unique_integer([:positive])}")

  test "a line reaches the characters present and no others" do
    [a, b, absent] = Enum.map(ids(3), &start/1)

    assert {:ok, %{pushed: [^a, ^b], failed: failed}} =
             SoulMem.witness([a, b, a], %{text: "the lamp went out", speaker: a})

    assert failed == %{}
    assert texts(a) == [{:assistant, "the lamp went out"}]
    assert texts(b) == [{:user, "#{a}: the lamp went out"}]
    assert texts(absent) == []

    gone = "scene-gone-#{System.unique_integer([:positive])}"

    assert {:ok, %{pushed: [^b], failed: %{^gone => :not_running}}} =
             SoulMem.witness([b, gone], %{text: "anyone?"})

    too_many = for i <- 0..Scene.max_present(), do: "x#{i}"
    assert {:error, :too_many_present} = SoulMem.witness(too_many, %{text: "crowd"})
  end

  test "a turn in a scene: the others witness the user's message and the reply" do
    server = start_supervised!({FakeLLM, owner: self()})
    FakeLLM.script(server, [{:reply, "我记得呀。"}])
    [speaker, listener, absent] = Enum.map(ids(3), &start/1)
    test = self()

    assert {:ok, %{reply: "我记得呀。"}} =
             Chat.turn(speaker, "还记得那天吗？",
               partner: "阿明",
               scene: [listener],
               llm: [base_url: FakeLLM.url(server), retries: 0],
               on_event: &send(test, {:event, &1})
             )

    assert texts(speaker) == [{:user, "还记得那天吗？"}, {:assistant, "我记得呀。"}]
    assert texts(listener) == [{:user, "阿明: 还记得那天吗？"}, {:user, "小红: 我记得呀。"}]
    assert texts(absent) == []
    assert_received {:event, {:witnessed, {:ok, %{pushed: [^listener]}}}}
  end
end

Code.require_file("../../../../soul_mem/test/support/fake_llm.ex", __DIR__)

defmodule Mix.Tasks.Soul.PlaytestTest do
  use ExUnit.Case, async: true

  import ExUnit.CaptureIO
  import SoulMem.TestSupport

  alias Mix.Tasks.Soul.Playtest
  alias SoulMem.FakeLLM

  @moduletag :capture_log

  setup :tmp_dir

  setup %{tmp_dir: dir} do
    server = start_supervised!({FakeLLM, owner: self()})
    character = "playtest-#{System.unique_integer([:positive])}"
    on_exit(fn -> SoulMem.Characters.stop(character) end)

    dialogue =
      write_json(dir, "dialogue.json", %{
        "name" => "小红·放学后",
        "graph_path" => ".",
        "role" => "小白，同班好友",
        "conversations" => [
          %{"user_message" => "你还记得和小白吃麻辣烫那次吗？"},
          %{"user_message" => "那天汤打翻以后你说了什么？"},
          %{"user_message" => "明天还去吗？"}
        ]
      })

    %{server: server, character: character, dialogue: dialogue, url: FakeLLM.url(server)}
  end

  defp write_json(dir, name, term) do
    path = Path.join(dir, name)
    File.write!(path, SoulMem.JSON.encode!(term))
    path
  end

  defp play(ctx, extra) do
    args =
      [demo_fixture(), ctx.dialogue, "--character", ctx.character, "--base-url", ctx.url] ++
        extra

    capture_io(fn -> Playtest.run(args) end)
  end

  test "each turn pushes, recalls, asks the LLM with the context and keeps the reply", ctx do
    FakeLLM.script(ctx.server, [{:reply, "记得！汤全洒了。"}, {:reply, "我说没关系呀。"}])
    trace_path = Path.join(ctx.tmp_dir, "out/trace.json")

    output = play(ctx, ["--turns", "2", "--json", trace_path, "--model", "fake-model"])

    assert output =~ "── turn 1 ("
    assert output =~ "── turn 2 ("
    refute output =~ "── turn 3"
    assert output =~ "queries:"
    assert output =~ ~r/\[(Similarity|Ppr|Both) \d\.\d{3}\] \w+/
    assert output =~ "回复> 记得！汤全洒了。"
    assert output =~ "trace written to"

    # The LLM got the character's context as the system prompt and the message as the user's.
    assert_receive {:fake_llm, %{body: %{"messages" => [system, user]} = body}}, 5_000
    assert body["model"] == "fake-model"
    assert system["content"] =~ "【相关记忆】"
    assert user["content"] == "你还记得和小白吃麻辣烫那次吗？"
    assert_receive {:fake_llm, %{body: %{"messages" => [system2, _]}}}, 5_000
    # The second turn's context holds the first exchange in the window.
    assert system2["content"] =~ "记得！汤全洒了。"

    {:ok, window} = SoulMem.Character.window(ctx.character)

    assert Enum.map(SoulMem.Window.visible(window), & &1.text) == [
             "你还记得和小白吃麻辣烫那次吗？",
             "记得！汤全洒了。",
             "那天汤打翻以后你说了什么？",
             "我说没关系呀。"
           ]

    trace = trace_path |> File.read!() |> SoulMem.JSON.decode!()
    assert trace["dialogue"]["name"] == "小红·放学后"
    assert trace["dialogue"]["role"] == "小白，同班好友"
    assert trace["character"] == ctx.character
    assert trace["graph"] == demo_fixture()
    assert trace["llm"]["model"] == "fake-model"
    assert trace["llm"]["base_url"] == ctx.url
    assert [t1, t2] = trace["turns"]
    assert t1["turn"] == 1 and t1["user"] == "你还记得和小白吃麻辣烫那次吗？"
    assert t1["reply"] == "记得！汤全洒了。" and t1["llm_error"] == nil
    assert t2["reply"] == "我说没关系呀。"
    assert t1["context"] =~ "【相关记忆】"
    assert t1["latency_ms"] > 0

    assert [%{"variant" => _} | _] = t1["queries"]
    assert [_ | _] = t1["memories"]

    for m <- t1["memories"] ++ t1["actions"] do
      assert m["stage"] in ["Similarity", "Ppr", "Both", "Action"]
      assert is_float(m["score"]) and is_binary(m["id"]) and is_list(m["seeds"])
    end

    assert trace["summary"]["turns"] == 2
    assert trace["summary"]["replies"] == 2
    assert trace["summary"]["llm_errors"] == 0
    total = Enum.sum(Map.values(trace["summary"]["memories_by_stage"]))
    assert total == length(t1["memories"]) + length(t2["memories"])
  end

  test "--no-llm recalls without asking any LLM", ctx do
    trace_path = Path.join(ctx.tmp_dir, "trace.json")
    output = play(ctx, ["--no-llm", "--json", trace_path])
    assert output =~ "── turn 3 ("
    assert output =~ "回复> (no LLM)"
    refute_received {:fake_llm, _}
    trace = trace_path |> File.read!() |> SoulMem.JSON.decode!()
    assert trace["llm"] == nil
    assert Enum.map(trace["turns"], & &1["reply"]) == [nil, nil, nil]
    assert trace["summary"]["replies"] == 0
  end

  test "an LLM error on one turn is reported and the run goes on", ctx do
    FakeLLM.script(ctx.server, [{:status, 400}, {:reply, "好呀"}])
    trace_path = Path.join(ctx.tmp_dir, "trace.json")
    output = play(ctx, ["--turns", "2", "--json", trace_path])
    assert output =~ "LLM error: {:http_status, 400"
    assert output =~ "回复> 好呀"
    trace = trace_path |> File.read!() |> SoulMem.JSON.decode!()
    assert trace["summary"]["llm_errors"] == 1
    assert [%{"reply" => nil, "llm_error" => "{:http_status, 400" <> _}, _] = trace["turns"]
  end

  test "fails when every LLM call fails, after writing the trace", ctx do
    FakeLLM.script(ctx.server, List.duplicate({:status, 400}, 3))
    trace_path = Path.join(ctx.tmp_dir, "trace.json")

    assert_raise Mix.Error, ~r/every LLM call failed/, fn ->
      play(ctx, ["--json", trace_path])
    end

    assert File.regular?(trace_path)
  end

  test "a graph directory holding graph.json works and names the character", ctx do
    dir = Path.join(ctx.tmp_dir, "小红")
    File.mkdir_p!(dir)
    File.cp!(demo_fixture(), Path.join(dir, "graph.json"))
    on_exit(fn -> SoulMem.Characters.stop("小红") end)
    output = capture_io(fn -> Playtest.run([dir, ctx.dialogue, "--no-llm", "--turns", "1"]) end)
    assert output =~ "character 小红"
    assert output =~ "turn 1"
  end

  describe "bad input" do
    test "malformed dialogues are refused with the file and the reason", ctx do
      cases = [
        {"broken.json", "{", ~r/not valid JSON/},
        {"array.json", "[]", ~r/expected an object with a "conversations" list/},
        {"empty.json", ~s({"conversations": []}), ~r/conversations is empty/},
        {"nomsg.json", ~s({"conversations": [{"text": "hi"}]}),
         ~r/conversations\[1\] needs a non-empty string user_message/},
        {"blank.json", ~s({"conversations": [{"user_message": "  "}]}), ~r/blank user_message/},
        {"role.json", ~s({"role": 3, "conversations": [{"user_message": "hi"}]}),
         ~r/role must be a string/}
      ]

      for {name, body, message} <- cases do
        path = Path.join(ctx.tmp_dir, name)
        File.write!(path, body)
        assert {:error, error} = Playtest.load_dialogue(path)
        assert error =~ path
        assert error =~ message

        assert_raise Mix.Error, message, fn ->
          Playtest.run([demo_fixture(), path, "--no-llm", "--character", ctx.character])
        end
      end
    end

    test "missing files and bad arguments", ctx do
      assert_raise Mix.Error, ~r/cannot read dialogue .*missing.json/, fn ->
        Playtest.run([demo_fixture(), Path.join(ctx.tmp_dir, "missing.json")])
      end

      assert_raise Mix.Error, ~r/no graph file at/, fn ->
        Playtest.run([Path.join(ctx.tmp_dir, "nope/graph.json"), ctx.dialogue])
      end

      assert_raise Mix.Error, ~r/has no graph.json/, fn ->
        Playtest.run([ctx.tmp_dir, ctx.dialogue])
      end

      assert_raise Mix.Error, ~r/usage/, fn -> Playtest.run([ctx.dialogue]) end
      assert_raise Mix.Error, ~r/invalid option/, fn -> Playtest.run(["a", "b", "--bogus"]) end

      assert_raise Mix.Error, ~r/--turns expects a positive integer/, fn ->
        Playtest.run([demo_fixture(), ctx.dialogue, "--turns", "0"])
      end
    end

    test "an unknown stored character is refused", ctx do
      id = "nobody-#{System.unique_integer([:positive])}"

      assert_raise Mix.Error, ~r/no character #{id}: it is not running and has no store/, fn ->
        Playtest.run([id, ctx.dialogue, "--no-llm", "--data-dir", ctx.tmp_dir])
      end

      refute SoulMem.Characters.whereis(id)
    end
  end

  test "a stored character id plays the stored character", ctx do
    store_dir = Path.join(ctx.tmp_dir, "data")
    id = ctx.character

    {:ok, pid} =
      SoulMem.Characters.ensure_started(id,
        graph: demo_fixture(),
        persist: true,
        data_dir: store_dir
      )

    {:ok, _} = SoulMem.Character.info(pid, 60_000)
    :ok = SoulMem.Characters.stop(id)
    assert SoulMem.Store.exists?(store_dir, id)

    trace_path = Path.join(ctx.tmp_dir, "trace.json")

    output =
      capture_io(fn ->
        Playtest.run(
          [id, ctx.dialogue, "--no-llm", "--turns", "1", "--data-dir", store_dir] ++
            ["--json", trace_path]
        )
      end)

    assert output =~ "character #{id} (53 nodes)"
    trace = trace_path |> File.read!() |> SoulMem.JSON.decode!()
    assert trace["graph"] == nil
    assert [%{"memories" => [_ | _]}] = trace["turns"]
  end

  # Runs only when SOUL_MEM_TEST_LLM_URL names a real OpenAI-compatible server (e.g.
  # http://127.0.0.1:8080/v1 after `bash scripts/llm.sh serve`); checks structure and
  # loose content, never wording.
  @real_llm System.get_env("SOUL_MEM_TEST_LLM_URL")
  @tag skip: if(@real_llm in [nil, ""], do: "SOUL_MEM_TEST_LLM_URL not set", else: false)
  @tag timeout: 300_000
  test "plays against the configured real LLM", ctx do
    trace_path = Path.join(ctx.tmp_dir, "trace.json")

    capture_io(fn ->
      Playtest.run([
        demo_fixture(),
        ctx.dialogue,
        "--character",
        ctx.character,
        "--base-url",
        @real_llm,
        "--turns",
        "2",
        "--temperature",
        "0",
        "--max-tokens",
        "96",
        "--llm-timeout",
        "120000",
        "--json",
        trace_path
      ])
    end)

    trace = trace_path |> File.read!() |> SoulMem.JSON.decode!()
    assert trace["summary"]["replies"] == 2

    for turn <- trace["turns"] do
      assert String.trim(turn["reply"]) != ""
      # A Chinese role-play answer: it contains CJK characters.
      assert turn["reply"] =~ ~r/\p{Han}/u
    end
  end
end

Code.require_file("../../../soul_mem/test/support/fake_llm.ex", __DIR__)

defmodule SoulMemWeb.OpenAITest do
  # The OpenAI-compatible endpoint driven by the official clients (npm `openai`,
  # PyPI `openai`) against a scripted upstream LLM (SoulMem.FakeLLM over HTTP, so
  # the real streaming client runs). One yaws per VM: not async.
  use ExUnit.Case, async: false

  alias SoulMem.FakeLLM
  alias SoulMemWeb.Tokens

  @moduletag :node
  @moduletag :capture_log
  @app_dir Path.expand("../..", __DIR__)
  @python Path.expand("../../../../.soul_mem/pyvenv/bin/python", __DIR__)
  @replies ["当然记得！小白是我最好的朋友呀。", "好呀好呀，我要加宽粉和鱼丸！", "好耶！周末见，我请你喝奶茶～"]

  setup_all do
    start_supervised!({SoulMemWeb.Endpoint, port: 0})
    :ok
  end

  setup do
    llm = start_supervised!({FakeLLM, owner: self()})
    FakeLLM.script(llm, Enum.map(@replies, &{:reply, &1}))
    SoulMemWeb.TestEnv.put(:soul_mem, :llm_base_url, FakeLLM.url(llm))
    SoulMemWeb.TestEnv.put(:soul_mem, :llm_retries, 0)

    id = "oai-#{System.unique_integer([:positive])}"
    other = "oai-other-#{System.unique_integer([:positive])}"
    {:ok, token} = Tokens.create(id)
    {:ok, other_token} = Tokens.create(other)

    demo = Path.expand("../../../../fixtures/characters/demo.json", __DIR__)

    SoulMemWeb.TestEnv.put(:soul_mem_web, :characters, %{
      id => [graph: demo, persist: false, embedder: :hash]
    })

    on_exit(fn ->
      for c <- [id, other], do: Tokens.revoke(c)
      SoulMem.Characters.stop(id)
    end)

    env = [
      {"SOUL_HTTP", "http://127.0.0.1:#{SoulMemWeb.Endpoint.port()}"},
      {"SOUL_TOKEN", token},
      {"SOUL_CHARACTER", id},
      {"SOUL_OTHER_TOKEN", other_token},
      {"SOUL_REPLIES", SoulMem.JSON.encode!(@replies)}
    ]

    %{id: id, env: env}
  end

  defp result!(cmd, args, env) do
    {out, status} = System.cmd(cmd, args, cd: @app_dir, env: env, stderr_to_stdout: true)
    assert status == 0, "#{Path.basename(List.last(args))} failed (exit #{status}):\n#{out}"
    out |> String.split("\n", trim: true) |> List.last() |> SoulMem.JSON.decode!()
  end

  # What the window holds after the scripted chat: each turn once, the
  # regenerated answer instead of the first one, nothing from refused requests.
  defp assert_window(id) do
    {:ok, %{messages: messages}} = SoulMem.history(id)

    assert Enum.map(messages, &{&1.role, &1.text}) == [
             {:user, hd(messages).text},
             {:assistant, Enum.at(@replies, 0)},
             {:user, Enum.at(messages, 2).text},
             {:assistant, Enum.at(@replies, 2)}
           ]
  end

  test "the npm openai client: models, chat, stream, regenerate, errors", ctx do
    assert %{"ok" => true, "pieces" => pieces} = result!("node", ["test/node/openai.js"], ctx.env)
    assert pieces > 1

    # The first request reached the LLM with the frontend's parameters and the memory.
    assert_receive {:fake_llm, %{body: first}}, 5_000
    assert first["temperature"] == 0.8 and first["max_tokens"] == 200
    assert first["stop"] == ["{{user}}："]
    [card, example, memory, question] = first["messages"]
    assert card["content"] =~ "你是小红" and example["content"] =~ "Example Chat"
    assert memory["role"] == "system" and memory["content"] =~ "小白"
    assert question == %{"role" => "user", "content" => "你还记得小白吗？"}
    assert_window(ctx.id)
  end

  @tag :python
  test "the PyPI openai client: models, chat, stream, regenerate, errors", ctx do
    if File.exists?(@python) or System.get_env("CI") == "true" do
      assert %{"ok" => true} = result!(@python, ["test/python/openai_client.py"], ctx.env)

      assert_window(ctx.id)
    else
      IO.puts("\n  skipped: no #{@python} (bash scripts/setup.sh installs it)")
    end
  end
end

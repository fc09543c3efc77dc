Code.require_file("../support/fake_llm.ex", __DIR__)

defmodule SoulMem.LLMStreamTest do
  # Streamed completions (server-sent events) against the scripted server.
  use ExUnit.Case, async: true

  alias SoulMem.{FakeLLM, LLM}

  @moduletag :capture_log

  @messages [%{role: :user, content: "你好"}]

  setup do
    server = start_supervised!({FakeLLM, owner: self()})
    {:ok, server: server, url: FakeLLM.url(server)}
  end

  defp stream(url, opts \\ []) do
    test = self()
    on_delta = &send(test, {:delta, &1})
    LLM.chat(@messages, Keyword.merge([base_url: url, retries: 0, on_delta: on_delta], opts))
  end

  defp deltas(acc \\ []) do
    receive do
      {:delta, text} -> deltas([text | acc])
    after
      0 -> Enum.reverse(acc)
    end
  end

  test "each piece reaches the callback as it arrives; the result is the whole answer", ctx do
    FakeLLM.script(ctx.server, [{:stream, ["当然", "记得", "呀！"], 20}])
    assert {:ok, %{content: "当然记得呀！", raw: %{"stream" => true}}} = stream(ctx.url)
    assert deltas() == ["当然", "记得", "呀！"]

    assert_received {:fake_llm, %{body: %{"stream" => true}, headers: headers}}
    assert headers["accept"] == "text/event-stream"
  end

  test "extra params are sent as they are", ctx do
    FakeLLM.script(ctx.server, [{:reply, "好的"}])
    assert {:ok, %{content: "好的"}} = stream(ctx.url, params: %{"stop" => ["\n"], "top_p" => 0.5})
    assert_received {:fake_llm, %{body: %{"stop" => ["\n"], "top_p" => 0.5}}}
    assert Enum.join(deltas()) == "好的"
  end

  test "a server that answers in one piece is one delta", ctx do
    body = ~s({"choices":[{"message":{"role":"assistant","content":"一次说完"}}]})
    FakeLLM.script(ctx.server, [{:raw, 200, body}])
    assert {:ok, %{content: "一次说完"}} = stream(ctx.url)
    assert deltas() == ["一次说完"]
  end

  test "failures before the first piece are retried; after it, they end the call", ctx do
    FakeLLM.script(ctx.server, [{:status, 500}, {:stream, ["再", "试"]}])
    assert {:ok, %{content: "再试"}} = stream(ctx.url, retries: 1, backoff: 1)
    assert deltas() == ["再", "试"]
    assert_received {:fake_llm, _}
    assert_received {:fake_llm, _}

    FakeLLM.script(ctx.server, [{:broken_stream, ["一半"]}, {:stream, ["不该", "再问"]}])

    assert {:error, {:invalid_response, :broken_stream}} = stream(ctx.url, retries: 2, backoff: 1)

    assert deltas() == ["一半"]
    # Not retried: the second scripted answer is still unasked.
    assert_received {:fake_llm, _}
    refute_received {:fake_llm, _}
  end

  test "an LLM that stops sending times out; an error status is an error", ctx do
    FakeLLM.script(ctx.server, [:hang])
    assert {:error, :timeout} = stream(ctx.url, timeout: 200)

    FakeLLM.script(ctx.server, [{:status, 401}])
    assert {:error, {:http_status, 401, _}} = stream(ctx.url)
    assert deltas() == []
  end
end

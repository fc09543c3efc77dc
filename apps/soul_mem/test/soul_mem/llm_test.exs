Code.require_file("../support/fake_llm.ex", __DIR__)

defmodule SoulMem.LLMTest do
  use ExUnit.Case, async: true

  alias SoulMem.{FakeLLM, LLM}

  @moduletag :capture_log

  # LLM round trips over loopback can take a while when the suite runs
  # concurrently: wait longer than assert_receive's default 100 ms.
  defmacrop wait(pattern), do: quote(do: assert_receive(unquote(pattern), 5_000))

  setup do
    server = start_supervised!({FakeLLM, owner: self()})
    {:ok, server: server, url: FakeLLM.url(server)}
  end

  @messages [%{role: "system", content: "你是小红"}, %{role: :user, content: "你好"}]

  test "chat posts an OpenAI chat completion and returns the content", %{url: url} do
    assert {:ok, %{content: "summary 1", raw: %{"choices" => [_]}}} =
             LLM.chat(@messages, base_url: url, api_key: "sk-secret", model: "m1", retries: 0)

    wait({:fake_llm, %{path: "/v1/chat/completions", headers: headers, body: body}})
    assert headers["authorization"] == "Bearer sk-secret"
    assert body["model"] == "m1"
    assert body["temperature"] == 0.7
    assert body["max_tokens"] == 512

    assert body["messages"] == [
             %{"role" => "system", "content" => "你是小红"},
             %{"role" => "user", "content" => "你好"}
           ]

    refute Map.has_key?(body, "response_format")
  end

  test "json_schema is sent as response_format", %{url: url} do
    schema = %{"type" => "object", "properties" => %{"a" => %{"type" => "string"}}}
    assert {:ok, _} = LLM.chat(@messages, base_url: url, json_schema: schema)
    wait({:fake_llm, %{body: body}})
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["schema"] == schema
  end

  test "json_object mode puts the schema in the system prompt", %{url: url} do
    schema = %{"type" => "object"}

    assert {:ok, _} =
             LLM.chat(@messages, base_url: url, json_schema: schema, json_mode: :json_object)

    wait({:fake_llm, %{body: body}})
    assert body["response_format"] == %{"type" => "json_object"}
    [%{"role" => "system", "content" => system} | _] = body["messages"]
    assert system =~ "你是小红"
    assert system =~ ~s({"type":"object"})
  end

  test "429 and 5xx are retried with backoff, 4xx are not", %{server: server, url: url} do
    FakeLLM.script(server, [{:status, 500}, {:status, 429}, {:reply, "ok"}])
    assert {:ok, %{content: "ok"}} = LLM.chat(@messages, base_url: url, retries: 2, backoff: 1)
    assert length(FakeLLM.requests(server)) == 3

    FakeLLM.script(server, [{:status, 400}])

    assert {:error, {:http_status, 400, _}} =
             LLM.chat(@messages, base_url: url, retries: 2, backoff: 1)

    assert length(FakeLLM.requests(server)) == 4

    FakeLLM.script(server, [{:status, 503}, {:status, 503}])

    assert {:error, {:http_status, 503, _}} =
             LLM.chat(@messages, base_url: url, retries: 1, backoff: 1)
  end

  test "refused connections, timeouts and dropped connections are errors" do
    assert {:error, {:connect, _}} =
             LLM.chat(@messages, base_url: FakeLLM.refused_url(), retries: 1, backoff: 1)
  end

  test "a server that never answers times out", %{server: server, url: url} do
    FakeLLM.script(server, [:hang, :close])
    assert {:error, :timeout} = LLM.chat(@messages, base_url: url, timeout: 200, retries: 0)
    assert {:error, _} = LLM.chat(@messages, base_url: url, retries: 0)
  end

  test "malformed answers and bad input", %{server: server, url: url} do
    FakeLLM.script(server, [{:raw, 200, "not json"}, {:raw, 200, ~s({"choices":[]})}])
    assert {:error, {:invalid_response, _}} = LLM.chat(@messages, base_url: url, retries: 0)
    assert {:error, {:invalid_response, _}} = LLM.chat(@messages, base_url: url, retries: 0)
    assert {:error, {:invalid_messages, _}} = LLM.chat([%{role: "x", content: 1}], base_url: url)
    assert {:error, :not_configured} = LLM.chat(@messages, base_url: nil)
    assert_raise ArgumentError, fn -> LLM.chat(@messages, bogus: 1) end
  end

  test "concurrent calls are served in parallel", %{server: server, url: url} do
    # One hanging request must not hold up the others (no shared keep-alive
    # connection in the profile).
    FakeLLM.script(server, [:hang])
    slow = Task.async(fn -> LLM.chat(@messages, base_url: url, timeout: 1_000, retries: 0) end)
    wait({:fake_llm, _})

    results =
      1..5
      |> Task.async_stream(fn _ -> LLM.chat(@messages, base_url: url, retries: 0) end)
      |> Enum.map(fn {:ok, result} -> result end)

    assert Enum.all?(results, &match?({:ok, _}, &1))
    assert {:error, :timeout} = Task.await(slow)
  end

  test "the API key never shows in inspect output" do
    config = SoulMem.LLM.Config.merge(%SoulMem.LLM.Config{}, api_key: "sk-very-secret")
    refute inspect(config) =~ "sk-very-secret"
    assert inspect(config) =~ "redacted"
    refute inspect(%{state: config}) =~ "sk-very-secret"
    assert_raise ArgumentError, fn -> SoulMem.LLM.Config.merge(config, retries: -1) end
  end
end

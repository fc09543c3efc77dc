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

  test "configured? says whether an endpoint is named, by the options first", %{url: url} do
    assert LLM.configured?(base_url: url)
    refute LLM.configured?(base_url: nil)
    refute LLM.configured?(base_url: "")
    assert LLM.configured?(config: %SoulMem.LLM.Config{base_url: url})
    refute LLM.configured?(config: %SoulMem.LLM.Config{base_url: url}, base_url: nil)
    # Wrong options elsewhere do not make it raise: chat/2 reports them.
    assert LLM.configured?(base_url: url, temperature: -1)
    assert {:error, :not_configured} = LLM.chat(@messages, base_url: nil, retries: 0)
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

  # Forwards the LLM client's log events of process `watch` to `test`: they
  # show each failed attempt as it happens (a refused connection is never
  # seen by any server).
  defmodule LogRelay do
    @moduledoc false
    def log(%{msg: msg, meta: %{pid: pid}}, %{config: %{watch: pid, test: test}}),
      do: send(test, {:llm_log, text(msg)})

    def log(_event, _config), do: :ok

    defp text({:string, chardata}), do: IO.chardata_to_string(chardata)
    defp text({format, args}) when is_list(args), do: to_string(:io_lib.format(format, args))
    defp text(other), do: inspect(other)
  end

  # Runs `fun` in a task whose log events come to the test as {:llm_log, text}.
  defp with_log_relay(fun) do
    task =
      Task.async(fn ->
        receive do: (:go -> fun.())
      end)

    handler = :"llm_log_relay_#{System.unique_integer([:positive])}"
    :ok = :logger.add_handler(handler, LogRelay, %{config: %{watch: task.pid, test: self()}})
    on_exit(fn -> :logger.remove_handler(handler) end)
    send(task.pid, :go)
    task
  end

  test "refused connections are errors once the retries are used up, after the backoff" do
    started = System.monotonic_time(:millisecond)

    task =
      with_log_relay(fn ->
        LLM.chat(@messages,
          base_url: FakeLLM.refused_url(),
          retries: 2,
          backoff: 60,
          max_backoff: 1_000
        )
      end)

    assert {:error, {:connect, _}} = Task.await(task, 10_000)
    elapsed = System.monotonic_time(:millisecond) - started

    # Three attempts: two retries logged, then the error. The waits between
    # them are at least 60 + 120 ms (jitter only adds).
    assert_received {:llm_log, first}
    assert first =~ "retry 1/2" and first =~ "connect"
    assert_received {:llm_log, second}
    assert second =~ "retry 2/2"
    refute_received {:llm_log, _}
    assert elapsed >= 180
  end

  test "a refused connection is retried: the server starting meanwhile answers" do
    port = FakeLLM.refused_port()

    task =
      with_log_relay(fn ->
        LLM.chat(@messages,
          base_url: "http://127.0.0.1:#{port}/v1",
          retries: 5,
          backoff: 200,
          max_backoff: 2_000
        )
      end)

    # The first attempt was refused; the server listens before the retry.
    wait({:llm_log, log})
    assert log =~ "retry 1/5" and log =~ "connect"
    late = start_supervised!({FakeLLM, owner: self(), port: port}, id: :late)

    assert {:ok, %{content: "summary 1"}} = Task.await(task, 10_000)
    assert [_] = FakeLLM.requests(late)
  end

  test "a blank answer is an invalid response", %{server: server, url: url} do
    FakeLLM.script(server, [{:reply, ""}, {:reply, " \n\t "}, {:reply, "x"}])

    assert {:error, {:invalid_response, :empty_content}} =
             LLM.chat(@messages, base_url: url, retries: 2)

    assert {:error, {:invalid_response, :empty_content}} =
             LLM.chat(@messages, base_url: url, retries: 2)

    # Not retried by the client: one request each.
    assert length(FakeLLM.requests(server)) == 2
    assert {:ok, %{content: "x"}} = LLM.chat(@messages, base_url: url)
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

  test "the API key never shows in the logs of failing calls", %{server: server, url: url} do
    FakeLLM.script(server, [{:status, 500}, {:status, 503}, {:status, 401}])
    refused = "http://127.0.0.1:#{FakeLLM.refused_port()}/v1"

    log =
      ExUnit.CaptureLog.capture_log([level: :debug], fn ->
        opts = [api_key: "sk-log-secret", model: "m1", retries: 2, backoff: 1]
        assert {:error, _} = LLM.chat(@messages, [base_url: url] ++ opts)
        assert {:error, _} = LLM.chat(@messages, [base_url: refused] ++ opts)
      end)

    assert log =~ "retry"
    refute log =~ "sk-log-secret"
  end

  test "the API key never shows in inspect output" do
    config = SoulMem.LLM.Config.merge(%SoulMem.LLM.Config{}, api_key: "sk-very-secret")
    refute inspect(config) =~ "sk-very-secret"
    assert inspect(config) =~ "redacted"
    refute inspect(%{state: config}) =~ "sk-very-secret"
    assert_raise ArgumentError, fn -> SoulMem.LLM.Config.merge(config, retries: -1) end
  end
end

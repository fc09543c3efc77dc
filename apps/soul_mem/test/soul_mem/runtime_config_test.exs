defmodule SoulMem.RuntimeConfigTest do
  # Not async: it sets environment variables of the VM.
  use ExUnit.Case, async: false

  import SoulMem.TestSupport

  @vars ~w(SOUL_MEM_DATA_DIR PORT SOUL_MEM_LLM_BASE_URL SOUL_MEM_LLM_API_KEY
           SOUL_MEM_LLM_MODEL SOUL_MEM_WINDOW SOUL_MEM_IDLE_AFTER_MS SOUL_MEM_DEMO_TOKEN
           SOUL_MEM_SIMILARITY_FLOOR SOUL_MEM_ALLOWED_ORIGINS)

  setup do
    saved = Map.new(@vars, &{&1, System.get_env(&1)})
    Enum.each(@vars, &System.delete_env/1)

    on_exit(fn ->
      Enum.each(saved, fn
        {name, nil} -> System.delete_env(name)
        {name, value} -> System.put_env(name, value)
      end)
    end)
  end

  defp read(env \\ :test, app \\ :soul_mem) do
    path = Path.join(repo_root(), "config/runtime.exs")
    path |> Config.Reader.read!(env: env, target: :host) |> Keyword.fetch!(app)
  end

  test "only dev and test have a well-known demo token; a release makes its own" do
    assert read(:dev)[:demo_token] == "dev-token"
    assert read(:prod)[:demo_token] == nil
    assert read(:prod, :soul_mem_web)[:generate_demo_token] == true
    assert read(:test, :soul_mem_web)[:generate_demo_token] == false
    System.put_env("SOUL_MEM_DEMO_TOKEN", "mine")
    assert read(:prod)[:demo_token] == "mine"
  end

  test "allowed socket origins come from a comma-separated list" do
    assert read(:prod, :soul_mem_web)[:allowed_origins] == []
    System.put_env("SOUL_MEM_ALLOWED_ORIGINS", " http://192.168.1.5:4000/ ,, https://pc.lan ")

    assert read(:prod, :soul_mem_web)[:allowed_origins] ==
             ["http://192.168.1.5:4000", "https://pc.lan"]
  end

  test "defaults" do
    config = read()
    assert config[:window] == 12
    assert config[:idle_after_ms] == 300_000
    assert config[:demo_token] == "dev-token"
    assert config[:port] == 4000
    assert config[:llm_base_url] == nil
    assert config[:similarity_floor] == nil
    assert Path.type(config[:data_dir]) == :absolute
  end

  test "environment variables override the defaults" do
    System.put_env(%{
      "SOUL_MEM_DATA_DIR" => "/tmp/soul",
      "PORT" => "8080",
      "SOUL_MEM_LLM_BASE_URL" => "http://127.0.0.1:9000/v1",
      "SOUL_MEM_LLM_API_KEY" => "k",
      "SOUL_MEM_LLM_MODEL" => "m",
      "SOUL_MEM_WINDOW" => " 20 ",
      "SOUL_MEM_IDLE_AFTER_MS" => "1000",
      "SOUL_MEM_DEMO_TOKEN" => "t",
      "SOUL_MEM_SIMILARITY_FLOOR" => "0.8"
    })

    config = read()
    assert config[:data_dir] == "/tmp/soul"
    assert config[:port] == 8080
    assert config[:llm_base_url] == "http://127.0.0.1:9000/v1"
    assert config[:llm_api_key] == "k"
    assert config[:llm_model] == "m"
    assert config[:window] == 20
    assert config[:idle_after_ms] == 1000
    assert config[:demo_token] == "t"
    assert config[:similarity_floor] == 0.8
  end

  test "malformed integers fail with a message naming the variable" do
    System.put_env("SOUL_MEM_WINDOW", "twelve")

    assert_raise ArgumentError, ~r/SOUL_MEM_WINDOW must be an integer.*"twelve"/, fn ->
      read()
    end

    System.delete_env("SOUL_MEM_WINDOW")
    System.put_env("PORT", "70000")
    assert_raise ArgumentError, ~r/PORT must be an integer between 0 and 65535/, fn -> read() end

    System.put_env("PORT", "80x")
    assert_raise ArgumentError, ~r/PORT/, fn -> read() end

    System.delete_env("PORT")
    System.put_env("SOUL_MEM_SIMILARITY_FLOOR", "1.5")

    assert_raise ArgumentError,
                 ~r/SOUL_MEM_SIMILARITY_FLOOR must be a number between 0.0 and 1.0/,
                 fn -> read() end
  end
end

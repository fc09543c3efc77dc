defmodule SoulMemWeb.NodeClientTest do
  # The endpoint driven by the official npm `phoenix` client (over `ws`) and
  # by headless Chromium: the Node scripts in test/node/ exit non-zero on the
  # first failed check. One yaws per VM: not async.
  use ExUnit.Case, async: false

  alias SoulMemWeb.Tokens

  @moduletag :node
  @app_dir Path.expand("../..", __DIR__)

  setup_all do
    start_supervised!({SoulMemWeb.Endpoint, port: 0})
    port = SoulMemWeb.Endpoint.port()
    # The scripts measure throughput (1000 pushes back to back, 200 sockets of
    # one token): far past the rates and caps a client gets by default, which
    # limits_test.exs covers.
    unlimited = {1_000_000, 1_000_000}

    SoulMemWeb.TestEnv.put(:soul_mem_web, :rate_limits, %{
      ip: unlimited,
      token: unlimited,
      frame: unlimited
    })

    SoulMemWeb.TestEnv.put(:soul_mem_web, :max_sockets_per_token, 1_000)
    other = "other-#{System.unique_integer([:positive])}"
    {:ok, other_token} = Tokens.create(other)

    on_exit(fn ->
      Tokens.revoke(other)
      SoulMem.Characters.stop(other)
    end)

    env = [
      {"SOUL_SOCKET", "ws://127.0.0.1:#{port}/socket"},
      {"SOUL_HTTP", "http://127.0.0.1:#{port}"},
      {"SOUL_TOKEN", Application.fetch_env!(:soul_mem, :demo_token)},
      {"SOUL_CHARACTER", "demo"},
      {"SOUL_OTHER_TOKEN", other_token},
      {"SOUL_OTHER_CHARACTER", other}
    ]

    %{env: env}
  end

  # Runs a script; returns its JSON result line (the last line of output).
  defp node!(script, env) do
    {out, status} =
      System.cmd("node", [Path.join("test/node", script)],
        cd: @app_dir,
        env: env,
        stderr_to_stdout: true
      )

    assert status == 0, "node #{script} failed (exit #{status}):\n#{out}"
    result = out |> String.split("\n", trim: true) |> List.last() |> SoulMem.JSON.decode!()
    assert %{"ok" => true} = result
    result
  end

  test "a full conversation: join, messages, recall, feedback, notes, leave", %{env: env} do
    result = node!("conversation.js", env)
    assert result["memories"] > 0
    IO.puts("\n  channel round trip (1000 pushes, loopback): #{inspect(result["rtt_ms"])}")
  end

  test "wrong tokens and another character's token are refused", %{env: env} do
    node!("auth.js", env)
  end

  # yaws logs the oversized frame the script sends last.
  @tag capture_log: true
  test "malformed frames and bodies get errors and change nothing", %{env: env} do
    node!("malformed.js", env)
  end

  test "200 sockets × 20 messages: every message arrives, in order", %{env: env} do
    id = "load-#{System.unique_integer([:positive])}"
    {:ok, token} = Tokens.create(id)
    # A window large enough to hold every message (no summaries slide out).
    SoulMemWeb.TestEnv.put(:soul_mem_web, :characters, %{id => [window: 5_000]})

    on_exit(fn ->
      Tokens.revoke(id)
      SoulMem.Characters.stop(id)
    end)

    env =
      env
      |> List.keystore("SOUL_CHARACTER", 0, {"SOUL_CHARACTER", id})
      |> List.keystore("SOUL_TOKEN", 0, {"SOUL_TOKEN", token})

    started = System.monotonic_time(:millisecond)
    result = node!("load.js", env)
    elapsed = System.monotonic_time(:millisecond) - started
    assert result["messages"] == 4_000

    {:ok, window} = SoulMem.Admin.window(id)
    texts = Enum.map(window, & &1.text)
    assert length(texts) == 4_000

    by_socket =
      Enum.group_by(texts, fn t -> t |> String.split("-") |> hd() end, fn t ->
        t |> String.split("-m") |> List.last() |> String.to_integer()
      end)

    assert map_size(by_socket) == 200
    assert Enum.all?(by_socket, fn {_s, ms} -> ms == Enum.to_list(0..19) end)

    IO.puts(
      "\n  200 sockets × 20 messages: #{result["ms"]} ms in node, #{elapsed} ms with node start"
    )
  end

  @tag :chromium
  test "the page chats through phoenix.js, and its operator view revokes, in headless Chromium",
       %{env: env} do
    shot = Path.join(System.tmp_dir!(), "soul_mem_page.png")
    File.rm(shot)
    operator = Application.fetch_env!(:soul_mem_web, :operator_token)

    # The demo answers with the scripted, streamed reply.
    SoulMemWeb.TestEnv.put(:soul_mem, :llm_client, SoulMemWeb.StreamingLLM)

    result =
      node!("page.js", [
        {"SOUL_SCREENSHOT", shot},
        {"SOUL_OPERATOR_TOKEN", operator},
        {"SOUL_LLM_REPLY", SoulMemWeb.StreamingLLM.reply()} | env
      ])

    assert result["rows"] > 0

    for file <- [shot, result["operator_screenshot"]] do
      assert %{size: size} = File.stat!(file)
      assert size > 10_000
    end

    IO.puts("\n  page screenshots: #{shot}, #{result["operator_screenshot"]}")
  end

  @tag :chromium
  test "the page against a stand-in server: loading join, streamed pieces, graph, restore",
       %{env: env} do
    node!("page_protocol.js", env)
  end

  # The server logs the failed imports the script sends (a file that is not a card).
  @tag :chromium
  @tag capture_log: true
  test "the page manages characters: card import, an empty character, memories, deletion",
       %{env: env} do
    prefix = "pm#{System.unique_integer([:positive])}"
    shot = Path.join(System.tmp_dir!(), "soul_mem_page_manage.png")
    File.rm(shot)

    # Whatever the script left behind (it deletes what it made when it passes).
    on_exit(fn ->
      for %{id: id} <- SoulMem.characters(),
          String.starts_with?(id, prefix),
          do: SoulMemWeb.Management.delete(id)
    end)

    result =
      node!("page_manage.js", [
        {"SOUL_SCREENSHOT", shot},
        {"SOUL_OPERATOR_TOKEN", Application.fetch_env!(:soul_mem_web, :operator_token)},
        {"SOUL_PREFIX", prefix} | env
      ])

    assert result["ok"] == true

    for file <- result["screenshots"] do
      assert %{size: size} = File.stat!(file)
      assert size > 10_000
    end

    IO.puts("\n  page management screenshots: #{Enum.join(result["screenshots"], ", ")}")
  end
end

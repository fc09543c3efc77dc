Code.require_file("../../../soul_mem/test/support/fake_llm.ex", __DIR__)

defmodule SoulMemWeb.DataPlaneTest do
  # The MessagePack data plane over real TCP: an Elixir client here (frames
  # built with SoulMem.MsgPack), the PyPI msgpack client and the Rust client
  # (soul_tune dataplane). One data plane per VM (registered names): not async.
  use ExUnit.Case, async: false

  alias SoulMem.{FakeLLM, MsgPack}
  alias SoulMemWeb.{DataPlane, Tokens}

  @moduletag :capture_log
  @max_frame 65_536
  @app_dir Path.expand("../..", __DIR__)
  @python Path.expand("../../../../.soul_mem/pyvenv/bin/python", __DIR__)
  @native Path.expand("../../../../native", __DIR__)
  @demo Path.expand("../../../../fixtures/characters/demo.json", __DIR__)

  setup do
    llm = start_supervised!({FakeLLM, owner: self()})
    SoulMemWeb.TestEnv.put(:soul_mem, :llm_base_url, FakeLLM.url(llm))
    SoulMemWeb.TestEnv.put(:soul_mem, :llm_retries, 0)

    id = "dp-#{System.unique_integer([:positive])}"
    other = "dp-other-#{System.unique_integer([:positive])}"
    {:ok, token} = Tokens.create(id)
    {:ok, other_token} = Tokens.create(other)

    SoulMemWeb.TestEnv.put(:soul_mem_web, :characters, %{
      id => [graph: @demo, persist: false, embedder: :hash],
      other => [graph: @demo, persist: false, embedder: :hash]
    })

    start_supervised!({DataPlane, port: 0, max_frame: @max_frame, max_connections: 200})

    on_exit(fn ->
      for c <- [id, other] do
        Tokens.revoke(c)
        SoulMem.Characters.stop(c)
      end
    end)

    %{id: id, other: other, token: token, other_token: other_token, llm: llm}
  end

  ## A client

  defp connect do
    {:ok, socket} =
      :gen_tcp.connect(~c"127.0.0.1", DataPlane.port(), [:binary, packet: 4, active: false])

    socket
  end

  defp request(socket, frame) do
    :ok = :gen_tcp.send(socket, MsgPack.encode!(frame))
    reply(socket)
  end

  defp reply(socket, timeout \\ 10_000) do
    {:ok, bytes} = :gen_tcp.recv(socket, 0, timeout)
    {:ok, body} = MsgPack.decode(bytes)
    body
  end

  defp call(socket, ctx, op, args, ref \\ 1) do
    request(socket, %{op: op, ref: ref, character: ctx.id, token: ctx.token, args: args})
  end

  defp ok!(socket, ctx, op, args) do
    assert %{"ok" => true, "ref" => 1, "result" => result} = call(socket, ctx, op, args),
           "#{op} failed"

    result
  end

  ## Operations

  test "every operation answers with its ref and result", ctx do
    s = connect()
    assert ok!(s, ctx, "message", %{role: "user", text: "你还记得小白吗"}) == %{"ok" => true}

    recall = ok!(s, ctx, "recall", %{text: "小白"})
    assert is_binary(recall["context"]) and is_list(recall["memories"])

    turn = ok!(s, ctx, "turn", %{text: "周末去吃麻辣烫吧", reply: false})
    assert turn["reply"] == nil and is_list(turn["memories"])

    history = ok!(s, ctx, "history", %{})
    assert Enum.map(history["messages"], & &1["text"]) == ["你还记得小白吗", "周末去吃麻辣烫吧"]

    assert %{"nodes" => [_ | _]} = ok!(s, ctx, "graph", %{ids: ["sem_xiaobai"]})
    assert ok!(s, ctx, "feedback", %{note_id: "sem_xiaobai", value: 1}) == %{"ok" => true}
    assert %{"started" => true} = ok!(s, ctx, "control", %{task: "summarize_pending"})
    assert %{"total" => total} = ok!(s, ctx, "notes", %{query: "小白"})
    assert total > 0

    %{"note" => note} = ok!(s, ctx, "note:get", %{id: "sem_xiaobai"})

    new = %{
      "id" => "sem_dataplane",
      "tags" => [],
      "mem_type" => note["mem_type"],
      "mem_links" => []
    }

    assert %{"ok" => true, "note" => stored} = ok!(s, ctx, "note:put", %{note: new})
    assert %{"id" => "sem_dataplane"} = stored
    assert %{"id" => "sem_dataplane"} = ok!(s, ctx, "note:delete", %{id: "sem_dataplane"})

    # Characters here keep no store: the World Info export (from the graph),
    # and an import that reaches the operation and is refused by its checks.
    assert %{"entries" => _} = ok!(s, ctx, "export", %{format: "world_info"})

    assert %{"ok" => false, "error" => %{"code" => "invalid_payload"}} =
             call(s, ctx, "import", %{document: "not a document"})

    assert %{"ok" => true, "result" => %{"subscribed" => true}} = call(s, ctx, "subscribe", nil)

    assert %{"ok" => true, "result" => %{"subscribed" => false}} =
             call(s, ctx, "unsubscribe", nil)
  end

  test "subscribed connections get the character's pushes", ctx do
    s = connect()
    assert %{"ok" => true} = call(s, ctx, "subscribe", nil)
    window = Application.get_env(:soul_mem, :window, 12)

    # The first message is tagged; when it slides out of the window the LLM
    # (FakeLLM: "summary N") folds it into the summary, which is pushed.
    for i <- 0..window do
      assert %{"ok" => true} =
               call(s, ctx, "message", %{role: "user", text: "第#{i}句", tag: i == 0})
    end

    assert %{"push" => "summary_updated", "character" => id, "payload" => %{"summary" => summary}} =
             reply(s)

    assert id == ctx.id and summary =~ "summary"
  end

  test "a wrong token, another character's token, an unknown op", ctx do
    s = connect()
    base = %{op: "recall", ref: 9, character: ctx.id, args: %{text: "x"}}

    assert %{"ok" => false, "ref" => 9, "error" => %{"code" => "unauthorized"}} =
             request(s, Map.put(base, :token, "nope"))

    assert %{"ok" => false, "error" => %{"code" => "forbidden"}} =
             request(s, Map.put(base, :token, ctx.other_token))

    assert %{"ok" => false, "error" => %{"code" => "unknown_event"}} =
             request(s, %{base | op: "chat"} |> Map.put(:token, ctx.token))

    assert %{"ok" => false, "error" => %{"code" => "invalid_payload"}} =
             call(s, ctx, "recall", %{nope: 1})
  end

  test "frames that decode but are not requests are answered, the connection stays", ctx do
    s = connect()

    for {frame, ref} <- [
          {[1, 2], nil},
          {"text", nil},
          {%{op: "recall", ref: 3}, 3},
          {%{op: "recall", ref: 4, character: ctx.id, token: ctx.token, args: [1]}, 4},
          {%{op: "recall", ref: 5, character: ctx.id, token: ctx.token, extra: 1}, 5},
          {%{op: "recall", ref: [1], character: ctx.id, token: ctx.token}, nil},
          {%{op: 1, ref: 6, character: ctx.id, token: ctx.token}, 6}
        ] do
      assert %{"ok" => false, "ref" => ^ref, "error" => %{"code" => "invalid_frame"}} =
               request(s, frame)
    end

    assert %{"ok" => true} = call(s, ctx, "history", %{})
  end

  test "garbage, an oversize frame and a truncated one close only their connection", ctx do
    bystander = connect()

    garbage = connect()
    :ok = :gen_tcp.send(garbage, <<0xC1, 0xFF, 0x00>>)

    assert %{"ok" => false, "ref" => nil, "error" => %{"code" => "invalid_frame"}} =
             reply(garbage)

    assert {:error, :closed} = :gen_tcp.recv(garbage, 0, 5_000)

    # the length prefix alone says too much: refused before any body is read
    {:ok, raw} = :gen_tcp.connect(~c"127.0.0.1", DataPlane.port(), [:binary, active: false])
    :ok = :gen_tcp.send(raw, <<@max_frame + 1::32, 0xC0>>)
    {:ok, <<len::32, body::binary-size(len)>>} = :gen_tcp.recv(raw, 0, 5_000)
    assert {:ok, %{"error" => %{"code" => "too_large"}}} = MsgPack.decode(body)
    assert {:error, :closed} = :gen_tcp.recv(raw, 0, 5_000)

    # half a frame, then the client goes away
    {:ok, cut} = :gen_tcp.connect(~c"127.0.0.1", DataPlane.port(), [:binary, active: false])
    frame = MsgPack.encode!(%{op: "history", ref: 1, character: ctx.id, token: ctx.token})
    :ok = :gen_tcp.send(cut, <<byte_size(frame)::32, binary_part(frame, 0, 5)::binary>>)
    :ok = :gen_tcp.close(cut)

    assert %{"ok" => true} = call(bystander, ctx, "history", %{})
    assert %{"ok" => true} = call(connect(), ctx, "recall", %{text: "小白"})
  end

  test "past max_connections a client gets too_many_connections", ctx do
    stop_supervised!(DataPlane)
    start_supervised!({DataPlane, port: 0, max_connections: 2})
    kept = [connect(), connect()]
    for s <- kept, do: assert(%{"ok" => true} = call(s, ctx, "history", %{}))

    refused = connect()
    assert %{"error" => %{"code" => "too_many_connections"}} = reply(refused)
    assert {:error, :closed} = :gen_tcp.recv(refused, 0, 5_000)
  end

  test "a turn waiting for the LLM holds only its own connection", ctx do
    FakeLLM.script(ctx.llm, [:hang])
    slow = connect()

    :ok =
      :gen_tcp.send(
        slow,
        MsgPack.encode!(%{
          op: "turn",
          ref: "slow",
          character: ctx.id,
          token: ctx.token,
          args: %{text: "你好"}
        })
      )

    assert_receive {:fake_llm, %{path: "/v1/chat/completions"}}, 10_000

    fast = connect()
    assert %{"ok" => true, "ref" => 1} = call(fast, ctx, "recall", %{text: "小白"})
    assert {:error, :timeout} = :gen_tcp.recv(slow, 0, 0)
  end

  test "rate limits apply per token", ctx do
    SoulMemWeb.TestEnv.put(:soul_mem_web, :rate_limits, %{token: {1, 2}})
    s = connect()
    replies = for i <- 1..3, do: call(s, ctx, "history", %{}, i)

    assert [%{"ok" => true}, %{"ok" => true}, %{"ok" => false, "error" => error}] = replies
    assert %{"code" => "rate_limited", "retry_after" => seconds} = error
    assert seconds >= 1
  end

  test "100 concurrent connections × 20 requests: every reply, in order", ctx do
    SoulMemWeb.TestEnv.put(:soul_mem_web, :rate_limits, %{
      ip: {100_000, 1_000_000},
      token: {100_000, 1_000_000}
    })

    results =
      1..100
      |> Task.async_stream(
        fn c ->
          s = connect()
          for i <- 1..20, do: call(s, ctx, "recall", %{text: "小白#{c}"}, c * 1000 + i)["ref"]
        end,
        max_concurrency: 100,
        timeout: 60_000
      )
      |> Enum.map(fn {:ok, refs} -> refs end)

    assert results == for(c <- 1..100, do: for(i <- 1..20, do: c * 1000 + i))
  end

  ## Clients in other languages

  @tag :python
  test "the PyPI msgpack client: every operation and bad input", ctx do
    if File.exists?(@python) or System.get_env("CI") == "true" do
      env = [
        {"SOUL_DATA_ADDR", "127.0.0.1:#{DataPlane.port()}"},
        {"SOUL_TOKEN", ctx.token},
        {"SOUL_CHARACTER", ctx.id},
        {"SOUL_OTHER_TOKEN", ctx.other_token},
        {"SOUL_MAX_FRAME", "#{@max_frame}"}
      ]

      {out, status} =
        System.cmd(@python, ["test/python/msgpack_client.py"],
          cd: @app_dir,
          env: env,
          stderr_to_stdout: true
        )

      assert status == 0, out

      assert %{"ok" => true, "ops" => ops} =
               out |> String.split("\n", trim: true) |> List.last() |> SoulMem.JSON.decode!()

      assert length(ops) >= 14
    else
      IO.puts("\n  skipped: no #{@python} (bash scripts/setup.sh installs it)")
    end
  end

  @tag :rust
  test "the Rust rmp-serde client (soul_tune dataplane): every operation and a load run", ctx do
    if System.find_executable("cargo") do
      SoulMemWeb.TestEnv.put(:soul_mem_web, :rate_limits, %{
        ip: {100_000, 1_000_000},
        token: {100_000, 1_000_000}
      })

      {out, status} =
        System.cmd(
          "cargo",
          ~w(run --release --quiet -p soul_tune -- dataplane --addr 127.0.0.1:#{DataPlane.port()}
             --token #{ctx.token} --character #{ctx.id} --clients 20 --requests 20 --rounds 50 --json),
          cd: @native,
          stderr_to_stdout: true
        )

      assert status == 0, out
      report = out |> String.split("\n", trim: true) |> List.last() |> SoulMem.JSON.decode!()

      assert %{"ops_ok" => ops, "load" => %{"sent" => 400, "answered" => 400, "errors" => 0}} =
               report

      assert length(ops) >= 12
    else
      IO.puts("\n  skipped: no cargo")
    end
  end
end

defmodule SoulMemWeb.EndpointTest do
  # One yaws per VM: the endpoint tests run one module at a time.
  use ExUnit.Case, async: false

  setup_all do
    start_supervised!({SoulMemWeb.Endpoint, port: 0})
    :inets.start()
    %{base: "http://127.0.0.1:#{SoulMemWeb.Endpoint.port()}"}
  end

  defp get(url, headers \\ []) do
    {:ok, {{_, status, _}, resp_headers, body}} =
      :httpc.request(:get, {to_charlist(url), headers}, [timeout: 5_000], body_format: :binary)

    {status, Map.new(resp_headers, fn {k, v} -> {to_string(k), to_string(v)} end), body}
  end

  defp post(url, body, headers), do: send_body(:post, url, body, headers)

  defp send_body(method, url, body, headers) do
    {:ok, {{_, status, _}, _headers, resp}} =
      :httpc.request(
        method,
        {to_charlist(url), headers, ~c"application/json", body},
        [timeout: 5_000],
        body_format: :binary
      )

    {status, SoulMem.JSON.decode!(resp)}
  end

  test "binds loopback on an ephemeral port by default" do
    port = SoulMemWeb.Endpoint.port()
    assert port > 0 and port != 4000
    assert SoulMemWeb.Endpoint.url() == "http://127.0.0.1:#{port}"
  end

  test "serves the page, its script and phoenix.js", %{base: base} do
    assert {200, headers, html} = get(base <> "/")
    assert headers["content-type"] =~ "text/html"
    assert html =~ ~s(<script src="/assets/phoenix.js">)
    assert {200, _, js} = get(base <> "/assets/app.js")
    assert js =~ "Phoenix.Socket"
    assert {200, _, _} = get(base <> "/assets/app.css")
  end

  @tag :node
  test "phoenix.js comes from the npm install", %{base: base} do
    assert {200, headers, js} = get(base <> "/assets/phoenix.js")
    assert headers["content-type"] =~ "javascript"
    assert js =~ "var Phoenix"
  end

  test "health", %{base: base} do
    assert {200, _, body} = get(base <> "/health")
    port = SoulMemWeb.Endpoint.port()
    assert %{"status" => "ok", "port" => ^port} = SoulMem.JSON.decode!(body)
  end

  test "the JSON API: message then recall on the demo character", %{base: base} do
    auth = [
      {~c"authorization",
       ~c"Bearer " ++ to_charlist(Application.fetch_env!(:soul_mem, :demo_token))}
    ]

    text = "你还记得和小白吃麻辣烫那次吗"

    assert {200, %{"ok" => true}} =
             post(
               base <> "/api/characters/demo/messages",
               SoulMem.JSON.encode!(%{role: "user", text: text}),
               auth
             )

    assert {200, recall} =
             post(
               base <> "/api/characters/demo/recall",
               SoulMem.JSON.encode!(%{text: text}),
               auth
             )

    assert %{
             "memories" => [_ | _] = memories,
             "actions" => _,
             "window" => window,
             "context" => context
           } = recall

    assert Enum.all?(
             memories,
             &(&1["stage"] in ["Similarity", "Ppr", "Both"] and is_number(&1["score"]))
           )

    assert List.last(window)["text"] == text
    assert context =~ "麻辣烫"
  end

  test "errors are JSON with a status, never a stack trace", %{base: base} do
    assert {404, _, body} = get(base <> "/no/such/page")
    assert %{"error" => %{"code" => "not_found"}} = SoulMem.JSON.decode!(body)

    assert {401, %{"error" => %{"code" => "unauthorized"}}} =
             post(base <> "/api/characters/demo/messages", "{}", [])

    assert {400, _, body} = get(base <> "/socket/websocket?token=dev-token")
    refute body =~ "yaws"
  end

  test "the socket refuses an unknown token before the upgrade", %{base: base} do
    headers = [
      {~c"connection", ~c"Upgrade"},
      {~c"upgrade", ~c"websocket"},
      {~c"sec-websocket-version", ~c"13"},
      {~c"sec-websocket-key", ~c"dGhlIHNhbXBsZSBub25jZQ=="}
    ]

    assert {403, _, body} = get(base <> "/socket/websocket?vsn=2.0.0&token=nope", headers)
    assert %{"error" => %{"code" => "unauthorized"}} = SoulMem.JSON.decode!(body)
  end

  test "the socket refuses a page from another origin, whatever its token", %{base: base} do
    headers = fn origin ->
      [
        {~c"connection", ~c"Upgrade"},
        {~c"upgrade", ~c"websocket"},
        {~c"sec-websocket-version", ~c"13"},
        {~c"sec-websocket-key", ~c"dGhlIHNhbXBsZSBub25jZQ=="},
        {~c"origin", to_charlist(origin)}
      ]
    end

    url = base <> "/socket/websocket?vsn=2.0.0&token=dev-token"

    for origin <- ["http://evil.example", "null", "http://localhost.evil.example:4000"] do
      assert {403, _, body} = get(url, headers.(origin))
      assert %{"error" => %{"code" => "forbidden", "message" => msg}} = SoulMem.JSON.decode!(body)
      assert msg =~ "origin"
    end
  end

  test "origins: none (not a browser), the endpoint's own loopback origin, or the allow-list" do
    alias SoulMemWeb.Router
    assert Router.origin_allowed?(nil, "127.0.0.1:4000")
    assert Router.origin_allowed?("http://127.0.0.1:4000", "127.0.0.1:4000")
    assert Router.origin_allowed?("http://localhost:4000/", "localhost:4000")
    assert Router.origin_allowed?("http://[::1]:4000", "[::1]:4000")
    refute Router.origin_allowed?("http://127.0.0.1:4001", "127.0.0.1:4000")
    refute Router.origin_allowed?("http://evil.example", "127.0.0.1:4000")
    # DNS rebinding: a name of the attacker's that resolves to 127.0.0.1.
    refute Router.origin_allowed?("http://evil.example:4000", "evil.example:4000")
    refute Router.origin_allowed?("null", "127.0.0.1:4000")
    refute Router.origin_allowed?("http://127.0.0.1:4000", nil)

    Application.put_env(:soul_mem_web, :allowed_origins, ["http://PC.lan:4000"])
    on_exit(fn -> Application.delete_env(:soul_mem_web, :allowed_origins) end)
    assert Router.origin_allowed?("http://pc.lan:4000", "pc.lan:4000")
    refute Router.origin_allowed?("http://pc.lan:4001", "pc.lan:4001")
  end

  test "a turn over HTTP: the message, the recall and (no LLM here) the reason there is no reply",
       %{base: base} do
    id = "turn-#{System.unique_integer([:positive])}"
    {:ok, token} = SoulMemWeb.Tokens.create(id)
    on_exit(fn -> SoulMemWeb.Tokens.revoke(id) end)
    auth = [{~c"authorization", ~c"Bearer " ++ to_charlist(token)}]
    url = "#{base}/api/characters/#{id}/turn"

    assert {200, %{"reply" => nil, "llm_error" => %{"code" => "llm_unavailable"}} = turn} =
             post(url, ~s({"text":"你好呀","partner":"小白"}), auth)

    assert [%{"text" => "你好呀"}] = turn["window"]

    assert {200, %{"reply" => nil, "llm_error" => nil}} =
             post(url, ~s({"text":"再见","reply":false}), auth)

    assert {422, _} = post(url, ~s({"text":42}), auth)
    assert {422, %{"error" => %{"code" => "empty_text"}}} = post(url, ~s({"text":"  "}), auth)
  end

  test "the operator API lists, creates and revokes tokens; it opens no character", %{base: base} do
    op = [
      {~c"authorization",
       ~c"Bearer " ++ to_charlist(Application.fetch_env!(:soul_mem_web, :operator_token))}
    ]

    id = "op-#{System.unique_integer([:positive])}"
    on_exit(fn -> SoulMemWeb.Tokens.revoke(id) end)

    assert {200, %{"character" => ^id, "token" => token}} =
             send_body(:post, "#{base}/api/operator/tokens/#{id}", "", op)

    assert {200, _, body} = get("#{base}/api/operator/tokens", op)
    assert %{"id" => id, "tokens" => 1} in SoulMem.JSON.decode!(body)["characters"]

    character = [{~c"authorization", ~c"Bearer " ++ to_charlist(token)}]
    # A character's token is no operator token, and the operator token opens no character.
    assert {403, _, _} = get("#{base}/api/operator/tokens", character)
    assert {401, _, _} = get("#{base}/api/characters/#{id}/notes/sem_self", op)
    assert {401, _, _} = get("#{base}/api/operator/tokens")

    assert {404, _, _} = get("#{base}/api/characters/#{id}/notes/sem_self", character)

    assert {200, %{"ok" => true}} =
             send_body(:delete, "#{base}/api/operator/tokens/#{id}", "", op)

    assert {401, _, _} = get("#{base}/api/characters/#{id}/notes/sem_self", character)

    assert {422, %{"error" => %{"code" => "invalid_character"}}} =
             send_body(:post, "#{base}/api/operator/tokens/%20", "", op)
  end

  describe "notes, export and import" do
    setup do
      id = "web-#{System.unique_integer([:positive])}"
      {:ok, token} = SoulMemWeb.Tokens.create(id)
      # Persisted (export needs a store), in the test data dir; removed after.
      SoulMemWeb.TestEnv.put(:soul_mem_web, :characters, %{id => [persist: true]})

      on_exit(fn ->
        SoulMemWeb.Tokens.revoke(id)
        SoulMem.Characters.stop(id)
        data_dir = Application.fetch_env!(:soul_mem, :data_dir)
        for file <- Path.wildcard(SoulMem.Store.path(data_dir, id) <> "*"), do: File.rm(file)
      end)

      %{id: id, auth: [{~c"authorization", ~c"Bearer " ++ to_charlist(token)}]}
    end

    @note %{
      "tags" => ["美食"],
      "mem_type" => %{
        "Semantic" => %{
          "content" => "奶茶",
          "aliases" => [],
          "concept_type" => "Entity",
          "description" => "三分糖，加珍珠。"
        }
      },
      "mem_links" => []
    }

    defp put(url, body, headers), do: send_body(:put, url, body, headers)

    defp get_json(url, headers) do
      {status, _, body} = get(url, headers)
      {status, SoulMem.JSON.decode!(body)}
    end

    test "PUT then GET a note", %{base: base, id: id, auth: auth} do
      url = "#{base}/api/characters/#{id}/notes/sem_milktea"

      if function_exported?(SoulMem, :put_note, 2) do
        assert {200, %{"ok" => true}} = put(url, SoulMem.JSON.encode!(@note), auth)
        assert {200, %{"note" => %{"id" => "sem_milktea"}}} = get_json(url, auth)
      else
        assert {501, %{"error" => %{"code" => "unsupported"}}} =
                 put(url, SoulMem.JSON.encode!(@note), auth)
      end

      # A body naming another id, or not a note, changes nothing.
      assert {400, %{"error" => %{"code" => "invalid_payload"}}} =
               put(url, SoulMem.JSON.encode!(Map.put(@note, "id", "sem_other")), auth)

      assert {404, _} = get_json("#{base}/api/characters/#{id}/notes/sem_other", auth)
    end

    test "export, then import back with replace", %{base: base, id: id, auth: auth} do
      assert {200, %{"ok" => true}} =
               post(
                 "#{base}/api/characters/#{id}/messages",
                 ~s({"role":"user","text":"记住我"}),
                 auth
               )

      if function_exported?(SoulMem, :export, 1) and function_exported?(SoulMem, :import, 3) do
        assert {200, exported} = get_json("#{base}/api/characters/#{id}/export", auth)
        body = SoulMem.JSON.encode!(exported)

        assert {409, %{"error" => %{"code" => "running"}}} =
                 post("#{base}/api/characters/#{id}/import", body, auth)

        assert {200, %{"ok" => true}} =
                 post("#{base}/api/characters/#{id}/import?replace=true", body, auth)

        assert {200, %{"window" => window}} =
                 post("#{base}/api/characters/#{id}/recall", "{}", auth)

        assert Enum.map(window, & &1["text"]) == ["记住我"]
      else
        assert {501, _} = get_json("#{base}/api/characters/#{id}/export", auth)
      end

      assert {400, %{"error" => %{"code" => "invalid_json"}}} =
               post("#{base}/api/characters/#{id}/import", "not json", auth)
    end

    test "a corrupt export is refused with the note named and changes nothing",
         %{base: base, id: id, auth: auth} do
      note = SoulMem.JSON.encode!(@note)
      url = "#{base}/api/characters/#{id}/notes/sem_milktea"
      assert {200, _} = put(url, note, auth)
      assert {200, _} = put("#{base}/api/characters/#{id}/notes/sem_tea", note, auth)
      assert {200, exported} = get_json("#{base}/api/characters/#{id}/export", auth)
      [a, b | _] = exported["notes"]
      data_dir = Application.fetch_env!(:soul_mem, :data_dir)

      corruptions = [
        {"duplicate_id", List.replace_at(exported["notes"], 1, %{b | "uuid" => a["uuid"]})},
        {"duplicate_id", List.replace_at(exported["notes"], 1, %{b | "id" => a["id"]})},
        {"missing_link_target",
         List.replace_at(exported["notes"], 0, %{
           a
           | "mem_links" => [
               %{
                 "id" => "00000000-0000-0000-0000-000000000001",
                 "to" => "00000000-0000-0000-0000-000000000002",
                 "intensity" => 0.5,
                 "link_type" => %{"Sem" => %{"verb" => "像", "confidence" => 0.5}}
               }
             ]
         })}
      ]

      for {code, notes} <- corruptions do
        body = SoulMem.JSON.encode!(%{exported | "notes" => notes})

        assert {422, %{"error" => %{"code" => ^code, "message" => message}}} =
                 post("#{base}/api/characters/#{id}/import?replace=true", body, auth)

        assert message =~ a["id"] or message =~ b["id"]
        refute message =~ data_dir
        assert {200, ^exported} = get_json("#{base}/api/characters/#{id}/export", auth)
      end
    end
  end

  describe "chat over HTTP" do
    setup do
      SoulMemWeb.TestEnv.put(:soul_mem, :llm_client, SoulMemWeb.StreamingLLM)
      id = "http-chat-#{System.unique_integer([:positive])}"
      {:ok, token} = SoulMemWeb.Tokens.create(id)

      on_exit(fn ->
        SoulMemWeb.Tokens.revoke(id)
        SoulMem.Characters.stop(id)
      end)

      %{id: id, auth: [{~c"authorization", to_charlist("Bearer " <> token)}]}
    end

    defp events(body) do
      for block <- String.split(body, "\n\n", trim: true) do
        ["event: " <> event, "data: " <> data] = String.split(block, "\n")
        {event, SoulMem.JSON.decode!(data)}
      end
    end

    test "server-sent events: recalled, the reply in pieces, then whole", ctx do
      url = to_charlist(ctx.base <> "/api/characters/#{ctx.id}/chat")
      headers = [{~c"accept", ~c"text/event-stream"} | ctx.auth]
      body = SoulMem.JSON.encode!(%{"text" => "你好呀"})

      {:ok, {{_, 200, _}, resp_headers, resp}} =
        :httpc.request(:post, {url, headers, ~c"application/json", body}, [timeout: 10_000],
          body_format: :binary
        )

      assert to_string(:proplists.get_value(~c"content-type", resp_headers)) =~
               "text/event-stream"

      [{"recalled", %{"recall" => recall}} | rest] = events(resp)
      assert recall["context"] =~ "你好呀"
      deltas = for {"reply_delta", %{"text" => t}} <- rest, do: t
      assert Enum.join(deltas) == SoulMemWeb.StreamingLLM.reply()
      assert {"reply_done", %{"text" => full}} = List.last(rest)
      assert {:ok, %{messages: [_, %{text: ^full}]}} = SoulMem.history(ctx.id)
    end

    test "without event-stream the turn is one JSON answer; bad input stores nothing", ctx do
      url = ctx.base <> "/api/characters/#{ctx.id}/chat"

      assert {200, %{"reply" => reply, "memories" => _}} =
               post(url, SoulMem.JSON.encode!(%{"text" => "在吗"}), ctx.auth)

      assert reply == SoulMemWeb.StreamingLLM.reply()

      assert {422, %{"error" => _}} = post(url, SoulMem.JSON.encode!(%{"text" => " "}), ctx.auth)
      assert {400, %{"error" => _}} = post(url, SoulMem.JSON.encode!(%{"txt" => "x"}), ctx.auth)
      assert {:ok, %{messages: [_, _]}} = SoulMem.history(ctx.id)
    end

    test "the token check answers which character a token opens", ctx do
      assert {200, _, body} = get(ctx.base <> "/api/characters/#{ctx.id}/token", ctx.auth)
      assert SoulMem.JSON.decode!(body) == %{"character" => ctx.id}
      assert {401, _, _} = get(ctx.base <> "/api/characters/#{ctx.id}/token")
      assert {403, _, _} = get(ctx.base <> "/api/characters/demo/token", ctx.auth)
      # Checking a token does not start the character.
      assert SoulMem.whereis(ctx.id) == nil
    end
  end
end

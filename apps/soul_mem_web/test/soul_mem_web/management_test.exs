defmodule SoulMemWeb.ManagementTest do
  # One yaws per VM: the endpoint tests run one module at a time.
  use ExUnit.Case, async: false

  @moduletag :capture_log

  @demo Path.expand("../../../../fixtures/characters/demo.json", __DIR__)

  setup_all do
    start_supervised!({SoulMemWeb.Endpoint, port: 0})
    :inets.start()
    %{base: "http://127.0.0.1:#{SoulMemWeb.Endpoint.port()}"}
  end

  defp bearer(token), do: [{~c"authorization", ~c"Bearer " ++ to_charlist(token)}]
  defp operator, do: bearer(Application.fetch_env!(:soul_mem_web, :operator_token))

  defp request(method, url, headers, body \\ nil, type \\ ~c"application/json") do
    req =
      if body,
        do: {to_charlist(url), headers, type, body},
        else: {to_charlist(url), headers}

    {:ok, {{_, status, _}, _headers, resp}} =
      :httpc.request(method, req, [timeout: 30_000], body_format: :binary)

    {status, SoulMem.JSON.decode!(resp)}
  end

  defp id(prefix) do
    id = "#{prefix}-#{System.unique_integer([:positive])}"
    # Created over HTTP under the node's data dir: removed again.
    on_exit(fn -> SoulMem.delete(id) end)
    id
  end

  defp listed(base, id) do
    {200, %{"characters" => list}} = request(:get, base <> "/api/characters", operator())
    Enum.find(list, &(&1["id"] == id))
  end

  test "create, list and delete with an operator token; the new token opens only its character",
       %{base: base} do
    id = id("made")
    body = SoulMem.JSON.encode!(%{id: id, name: "Irene", description: "I paint at night."})

    assert {201, %{"id" => ^id, "name" => "Irene", "token" => token}} =
             request(:post, base <> "/api/characters", operator(), body)

    assert {200, %{"character" => ^id}} =
             request(:get, "#{base}/api/characters/#{id}/token", bearer(token))

    assert {403, _} = request(:get, "#{base}/api/characters/demo/token", bearer(token))

    assert %{"name" => "Irene", "state" => "running", "notes" => 1, "tokens" => 1} =
             listed(base, id)

    # A character's token manages nothing; no token, nothing at all.
    assert {403, _} = request(:get, base <> "/api/characters", bearer(token))
    assert {403, _} = request(:delete, "#{base}/api/characters/#{id}", bearer(token))
    assert {401, _} = request(:post, base <> "/api/characters", [], body)

    assert {200, %{"deleted" => ^id, "backup" => backup}} =
             request(:delete, "#{base}/api/characters/#{id}", operator())

    assert %{"character" => ^id, "notes" => [_]} =
             backup |> File.read!() |> SoulMem.JSON.decode!()

    assert {401, _} = request(:get, "#{base}/api/characters/#{id}/token", bearer(token))
    refute listed(base, id)

    assert {404, %{"error" => %{"code" => "not_found"}}} =
             request(:delete, "#{base}/api/characters/#{id}", operator())
  end

  test "create from Graph JSON and from an export", %{base: base} do
    graph = @demo |> File.read!() |> SoulMem.JSON.decode!()
    id = id("graph")

    assert {201, %{"name" => "小红", "token" => token}} =
             request(
               :post,
               base <> "/api/characters",
               operator(),
               SoulMem.JSON.encode!(%{id: id, graph: graph})
             )

    assert %{"notes" => notes} = listed(base, id)
    assert notes == length(graph)

    {200, export} = request(:get, "#{base}/api/characters/#{id}/export", bearer(token))
    copy = id("copy")

    assert {201, %{"name" => "小红"}} =
             request(
               :post,
               base <> "/api/characters",
               operator(),
               SoulMem.JSON.encode!(%{id: copy, export: export})
             )

    assert %{"notes" => ^notes} = listed(base, copy)
  end

  test "notes: a page searched by text and kind; a note deleted for good", %{base: base} do
    graph = @demo |> File.read!() |> SoulMem.JSON.decode!()
    id = id("notes")

    {201, %{"token" => token}} =
      request(
        :post,
        base <> "/api/characters",
        operator(),
        SoulMem.JSON.encode!(%{id: id, graph: graph})
      )

    auth = bearer(token)
    notes = "#{base}/api/characters/#{id}/notes"

    assert {200, %{"total" => total, "items" => [_ | _]}} = request(:get, notes, auth)
    assert total == length(graph)

    assert {200, %{"items" => [%{"id" => "sem_xiaobai", "kind" => "semantic"} | _]}} =
             request(
               :get,
               notes <> "?query=" <> URI.encode_www_form("小白") <> "&kind=semantic",
               auth
             )

    assert {200, %{"page" => 2, "per_page" => 2, "items" => [_, _]}} =
             request(:get, notes <> "?page=2&per_page=2", auth)

    assert {422, %{"error" => %{"message" => message}}} =
             request(:get, notes <> "?kind=bogus", auth)

    assert message =~ "kind"
    assert {422, _} = request(:get, notes <> "?page=zero", auth)

    assert {200, %{"ok" => true, "id" => "sem_xiaobai", "links_removed" => removed}} =
             request(:delete, notes <> "/sem_xiaobai", auth)

    assert removed > 0
    assert {404, _} = request(:get, notes <> "/sem_xiaobai", auth)
    assert {404, _} = request(:delete, notes <> "/sem_xiaobai", auth)
    assert {422, _} = request(:delete, notes <> "/sem_self", auth)
    assert {200, %{"total" => after_delete}} = request(:get, notes, auth)
    assert after_delete == total - 1

    # Another character's token lists nothing here.
    demo = bearer(Application.fetch_env!(:soul_mem, :demo_token))
    assert {403, _} = request(:get, notes, demo)
  end

  @card Path.expand("../../../../fixtures/cards/su_wan.png", __DIR__)

  test "a card file becomes a character; its lore goes back out as World Info and a card",
       %{base: base} do
    # No id: the character is named after the card.
    on_exit(fn -> SoulMem.delete("苏晚") end)

    assert {201, %{"id" => "苏晚", "name" => "苏晚", "token" => token, "report" => report}} =
             request(
               :post,
               base <> "/api/characters",
               operator(),
               File.read!(@card),
               ~c"image/png"
             )

    assert %{"format" => "png_v2", "lore_entries" => 19, "skipped_disabled" => 1} = report
    auth = bearer(token)

    assert {200, %{"items" => [%{"id" => lore} | _]}} =
             request(:get, "#{base}/api/characters/苏晚/notes?query=Inkwell" |> URI.encode(), auth)

    assert lore =~ "sem_lore_"

    assert {200, %{"entries" => entries}} =
             request(
               :get,
               "#{base}/api/characters/苏晚/export?format=world_info" |> URI.encode(),
               auth
             )

    assert map_size(entries) == 19

    assert {200, %{"spec" => "chara_card_v2", "data" => %{"character_book" => book}} = card} =
             request(:get, "#{base}/api/characters/苏晚/export?format=card" |> URI.encode(), auth)

    assert length(book["entries"]) == 19

    # The exported card, sent back as JSON, makes the same notes.
    copy = id("copy")

    assert {201, %{"token" => copy_token}} =
             request(
               :post,
               base <> "/api/characters",
               operator(),
               SoulMem.JSON.encode!(%{id: copy, card: card})
             )

    listing = fn id, token ->
      {200, %{"items" => items}} =
        request(
          :get,
          "#{base}/api/characters/#{URI.encode(id)}/notes?per_page=200",
          bearer(token)
        )

      items
      |> Enum.map(&Map.take(&1, ["id", "kind", "text", "tags", "core", "links"]))
      |> Enum.sort()
    end

    assert listing.(copy, copy_token) == listing.("苏晚", token)

    assert {400, %{"error" => %{"code" => "invalid_payload"}}} =
             request(:get, "#{base}/api/characters/苏晚/export?format=docx" |> URI.encode(), auth)
  end

  test "a file that is not a card is refused with what is wrong, and creates nothing",
       %{base: base} do
    fresh = id("nocard")
    url = "#{base}/api/characters?id=#{fresh}"

    assert {422, %{"error" => %{"code" => "invalid_card", "message" => message}}} =
             request(:post, url, operator(), "not a card at all", ~c"application/octet-stream")

    assert message != ""
    png = File.read!(@card)
    truncated = binary_part(png, 0, div(byte_size(png), 2))

    assert {422, %{"error" => %{"code" => "invalid_card"}}} =
             request(:post, url, operator(), truncated, ~c"image/png")

    # A World Info file needs its character's name.
    world_info = SoulMem.JSON.encode!(%{id: fresh, card: %{entries: %{}}})

    assert {422, %{"error" => %{"message" => named}}} =
             request(:post, base <> "/api/characters", operator(), world_info)

    assert named =~ "name"
    refute listed(base, fresh)
  end

  test "bad creations are refused with what is wrong, and create nothing", %{base: base} do
    taken = id("taken")
    post = &request(:post, base <> "/api/characters", operator(), SoulMem.JSON.encode!(&1))
    assert {201, _} = post.(%{id: taken, name: "A"})

    assert {409, %{"error" => %{"code" => "exists"}}} = post.(%{id: taken, name: "B"})
    assert {422, %{"error" => %{"code" => "invalid_character"}}} = post.(%{id: "a/b", name: "B"})
    fresh = id("fresh")

    assert {422, %{"error" => %{"code" => "invalid_value", "message" => "name:" <> _}}} =
             post.(%{id: fresh, name: ""})

    assert {400, %{"error" => %{"code" => "invalid_json", "message" => message}}} =
             post.(%{id: fresh, graph: [%{id: "n1", mem_type: %{"Nope" => %{}}}]})

    assert message =~ "n1"
    assert {400, %{"error" => %{"code" => "invalid_payload"}}} = post.(%{id: fresh, color: "red"})

    assert {400, %{"error" => %{"code" => "invalid_payload"}}} =
             post.(%{id: fresh, graph: [], export: %{}})

    assert {400, _} = request(:post, base <> "/api/characters", operator(), "[1")
    refute listed(base, fresh)
  end

  test "a group scene: a message reaches the characters present, each authorized by its token",
       %{base: base} do
    post = &request(:post, base <> "/api/characters", operator(), SoulMem.JSON.encode!(&1))
    [a, b, c] = for p <- ["alice", "bob", "carol"], do: id(p)
    tokens = for x <- [a, b, c], into: %{}, do: {x, elem(post.(%{id: x, name: x}), 1)["token"]}

    say = fn token, body ->
      request(
        :post,
        "#{base}/api/characters/#{a}/messages",
        bearer(token),
        SoulMem.JSON.encode!(body)
      )
    end

    history = fn x ->
      {200, %{"messages" => messages}} =
        request(:get, "#{base}/api/characters/#{x}/history", bearer(tokens[x]))

      Enum.map(messages, &{&1["role"], &1["text"]})
    end

    # Bob's token missing: refused, nobody hears it.
    assert {403, %{"error" => %{"code" => "forbidden", "message" => message}}} =
             say.(tokens[a], %{role: "user", text: "hi all", speaker: "Dan", scene: [a, b]})

    assert message =~ b
    assert history.(a) == []

    assert {200, %{"witnessed" => [^a, ^b], "failed" => %{}}} =
             say.(tokens[a], %{
               role: "user",
               text: "hi all",
               speaker: "Dan",
               scene: [a, b],
               scene_tokens: %{b => tokens[b]}
             })

    assert history.(a) == [{"user", "Dan: hi all"}]
    assert history.(b) == [{"user", "Dan: hi all"}]
    assert history.(c) == []

    assert {200, _} =
             say.(tokens[a], %{
               role: "assistant",
               text: "hello Dan",
               speaker: a,
               scene: [b],
               scene_tokens: %{b => tokens[b]}
             })

    assert List.last(history.(a)) == {"assistant", "hello Dan"}
    assert List.last(history.(b)) == {"user", "#{a}: hello Dan"}
  end
end

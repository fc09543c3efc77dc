defmodule SoulMemWeb.LimitsTest do
  # What an unauthenticated or greedy client can make the server do: bodies
  # read only after the token is checked, rates, socket caps, a bounded
  # backlog while the LLM is down, malformed paths. One yaws per VM.
  use ExUnit.Case, async: false

  alias SoulMemWeb.{TestEnv, Tokens}

  setup_all do
    start_supervised!({SoulMemWeb.Endpoint, port: 0})
    :inets.start()
    %{port: SoulMemWeb.Endpoint.port()}
  end

  setup do
    id = "limits-#{System.unique_integer([:positive])}"
    {:ok, token} = Tokens.create(id)

    on_exit(fn ->
      Tokens.revoke(id)
      SoulMem.Characters.stop(id)
    end)

    %{id: id, token: token}
  end

  # A raw HTTP/1.1 exchange: the head (and body) as given, then the status,
  # headers and body of the answer, read until the server closes or the
  # declared length arrived.
  defp raw(port, request) do
    {:ok, socket} = :gen_tcp.connect(~c"127.0.0.1", port, [:binary, active: false])
    :ok = :gen_tcp.send(socket, request)
    response = read_response(socket, "")
    :gen_tcp.close(socket)
    response
  end

  defp read_response(socket, acc) do
    case parse(acc) do
      {:ok, response} ->
        response

      :more ->
        case :gen_tcp.recv(socket, 0, 5_000) do
          {:ok, data} -> read_response(socket, acc <> data)
          {:error, _} -> acc |> parse(:closed) |> elem(1)
        end
    end
  end

  defp parse(data, closed \\ false) do
    with [head, body] <- String.split(data, "\r\n\r\n", parts: 2),
         ["HTTP/1.1 " <> status_line | lines] <- String.split(head, "\r\n") do
      headers =
        Map.new(lines, fn line ->
          [k, v] = String.split(line, ":", parts: 2)
          {String.downcase(k), String.trim(v)}
        end)

      length = headers["content-length"] && String.to_integer(headers["content-length"])

      if closed == :closed or (length && byte_size(body) >= length),
        do: {:ok, {String.to_integer(String.slice(status_line, 0, 3)), headers, body}},
        else: :more
    else
      _ -> if closed == :closed, do: {:ok, {0, %{}, data}}, else: :more
    end
  end

  defp post_head(path, length, extra \\ "") do
    "POST #{path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" <>
      "Content-Length: #{length}\r\n#{extra}\r\n"
  end

  test "an unauthenticated upload is answered after one piece; 100 at once hold little memory",
       %{port: port} do
    size = 15 * 1024 * 1024
    piece = :binary.copy("a", 65_536)
    parent = self()

    sampler =
      spawn_link(fn ->
        sample = fn sample, peak ->
          receive do
            :stop -> send(parent, {:peak, peak})
          after
            20 -> sample.(sample, max(peak, :erlang.memory(:total)))
          end
        end

        sample.(sample, :erlang.memory(:total))
      end)

    before = :erlang.memory(:total)

    statuses =
      1..100
      |> Task.async_stream(
        fn _ ->
          {:ok, s} = :gen_tcp.connect(~c"127.0.0.1", port, [:binary, active: false])
          :ok = :gen_tcp.send(s, post_head("/api/characters/demo/import", size) <> piece)

          # The answer comes after the first piece, before the body is read.
          status =
            case :gen_tcp.recv(s, 0, 5_000) do
              {:ok, "HTTP/1.1 " <> <<code::binary-size(3), _::binary>>} -> String.to_integer(code)
              other -> other
            end

          # The rest is offered anyway, until the server's close stops it.
          Enum.reduce_while(2..div(size, 65_536), :ok, fn _, :ok ->
            case :gen_tcp.send(s, piece) do
              :ok -> {:cont, :ok}
              {:error, _} -> {:halt, :ok}
            end
          end)

          :gen_tcp.close(s)
          status
        end,
        max_concurrency: 100,
        timeout: 60_000
      )
      |> Enum.map(fn {:ok, status} -> status end)

    send(sampler, :stop)
    assert_receive {:peak, peak}, 5_000
    assert Enum.uniq(statuses) == [401]
    # 100 × 15 MiB were offered; the server held at most a piece of each.
    assert peak - before < 100 * 1024 * 1024
  end

  test "an authorized body longer than one piece, or chunked, is read whole",
       %{port: port, id: id, token: token} do
    auth = "Authorization: Bearer #{token}\r\n"
    body = SoulMem.JSON.encode!(%{role: "user", text: String.duplicate("长", 5_000)})
    assert byte_size(body) > 8_192

    assert {200, _, ~s({"ok":true})} =
             raw(port, post_head("/api/characters/#{id}/messages", byte_size(body), auth) <> body)

    chunks = for <<chunk::binary-size(5_000) <- body>>, do: chunk
    rest = binary_part(body, 5_000 * length(chunks), byte_size(body) - 5_000 * length(chunks))

    chunked =
      Enum.map_join(chunks ++ [rest], fn c ->
        Integer.to_string(byte_size(c), 16) <> "\r\n" <> c <> "\r\n"
      end) <>
        "0\r\n\r\n"

    head =
      "POST /api/characters/#{id}/messages HTTP/1.1\r\nHost: 127.0.0.1\r\n" <>
        "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n#{auth}\r\n"

    assert {200, _, ~s({"ok":true})} = raw(port, head <> chunked)
    {:ok, window} = SoulMem.Admin.window(id)
    assert length(window) == 2

    # Past the route's limit: 413, nothing stored.
    big = :binary.copy("a", 1_048_577)

    assert {413, _, _} =
             raw(port, post_head("/api/characters/#{id}/messages", byte_size(big), auth) <> big)

    assert {:ok, ^window} = SoulMem.Admin.window(id)
  end

  test "a path yaws cannot decode gets the JSON 400", %{port: port} do
    for path <- ["/api/characters/%zz/export", "/api/characters/a%00b/export"] do
      assert {400, headers, body} = raw(port, "GET #{path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")

      assert headers["content-type"] =~ "json"
      assert %{"error" => %{"code" => "invalid_path"}} = SoulMem.JSON.decode!(body)
    end
  end

  test "a token over its rate waits: 429 with Retry-After", %{port: port, id: id, token: token} do
    TestEnv.put(:soul_mem_web, :rate_limits, %{token: {1, 3}})

    get =
      "GET /api/characters/#{id}/notes/none HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer #{token}\r\n\r\n"

    statuses = for _ <- 1..4, do: elem(raw(port, get), 0)
    assert Enum.take(statuses, 3) == [404, 404, 404]
    assert {429, headers, body} = raw(port, get)
    assert String.to_integer(headers["retry-after"]) >= 1

    assert %{"error" => %{"code" => "rate_limited", "retry_after" => _}} =
             SoulMem.JSON.decode!(body)

    assert List.last(statuses) == 429
  end

  test "a body read in pieces spends one request of the rate, not two",
       %{port: port, id: id, token: token} do
    TestEnv.put(:soul_mem_web, :rate_limits, %{token: {1, 3}})
    auth = "Authorization: Bearer #{token}\r\n"
    body = SoulMem.JSON.encode!(%{role: "user", text: String.duplicate("长", 5_000)})
    assert byte_size(body) > 8_192
    push = post_head("/api/characters/#{id}/messages", byte_size(body), auth) <> body

    assert [200, 200, 200, 429] = for(_ <- 1..4, do: elem(raw(port, push), 0))
  end

  test "sockets per token are capped", %{port: port, token: token} do
    TestEnv.put(:soul_mem_web, :max_sockets_per_token, 2)

    upgrade =
      "GET /socket/websocket?token=#{token}&vsn=2.0.0 HTTP/1.1\r\nHost: 127.0.0.1\r\n" <>
        "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n" <>
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"

    open =
      for _ <- 1..2 do
        {:ok, s} = :gen_tcp.connect(~c"127.0.0.1", port, [:binary, active: false])
        :ok = :gen_tcp.send(s, upgrade)
        assert {:ok, "HTTP/1.1 101" <> _} = :gen_tcp.recv(s, 0, 5_000)
        s
      end

    assert SoulMemWeb.Socket.count(token) == 2
    assert {429, _, body} = raw(port, upgrade)
    assert %{"error" => %{"code" => "too_many_connections"}} = SoulMem.JSON.decode!(body)
    Enum.each(open, &:gen_tcp.close/1)
  end

  test "while summaries cannot land, pushes past the backlog get 429 and are not stored",
       %{port: port, id: id, token: token} do
    # No LLM in tests: every summary job fails and its messages wait.
    TestEnv.put(:soul_mem_web, :characters, %{id => [window: 2, interval: 1, max_pending: 3]})
    auth = "Authorization: Bearer #{token}\r\n"
    body = ~s({"role":"user","text":"还在吗"})
    push = post_head("/api/characters/#{id}/messages", byte_size(body), auth) <> body

    statuses = for _ <- 1..8, do: elem(raw(port, push), 0)
    assert Enum.take(statuses, 5) == List.duplicate(200, 5)
    assert {429, headers, response} = raw(port, push)
    assert headers["retry-after"] == "30"
    assert %{"error" => %{"code" => "backlog_full"}} = SoulMem.JSON.decode!(response)
    {:ok, window} = SoulMem.Admin.window(id)
    assert length(window) == 5
  end
end

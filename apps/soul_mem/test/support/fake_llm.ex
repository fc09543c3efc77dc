defmodule SoulMem.FakeLLM do
  @moduledoc false

  # A scripted OpenAI-compatible HTTP server on loopback, over :gen_tcp.
  #
  #   server = start_supervised!({SoulMem.FakeLLM, owner: self()})
  #   # or on a given port (e.g. one that refused connections until now):
  #   start_supervised!({SoulMem.FakeLLM, owner: self(), port: port})
  #   SoulMem.FakeLLM.url(server)            #=> "http://127.0.0.1:PORT/v1"
  #   SoulMem.FakeLLM.script(server, [{:status, 500}, {:reply, "S1"}, :hang])
  #
  # Every request is decoded and sent to the owner as
  # {:fake_llm, %{path: ..., headers: %{lowercase name => value}, body: map}}
  # before it is answered. Answers come from the script, in order; once the
  # script is empty, every request gets {:reply, "summary N"} (N counts the
  # requests from 1). Script steps:
  #
  #   {:reply, content}   200 with a chat completion whose content is `content`
  #   {:status, code}     `code` with a small JSON error body
  #   {:raw, code, body}  `code` with `body` as is
  #   :hang               never answers (the client times out)
  #   {:after, ms, step}  waits `ms`, then answers as `step`
  #   :close              closes the connection without answering
  #   {:stream, chunks}   200 server-sent events, one chunk of content each,
  #                       then [DONE] ({:stream, chunks, ms}: ms between them)
  #   {:broken_stream, chunks}  the chunks, then a malformed event
  #
  # A {:reply, content} to a request with "stream": true is streamed in
  # chunks of two characters.

  use GenServer

  def start_link(opts), do: GenServer.start_link(__MODULE__, opts)

  def url(server), do: "http://127.0.0.1:#{GenServer.call(server, :port)}/v1"

  def script(server, steps), do: GenServer.call(server, {:script, steps})

  def requests(server), do: GenServer.call(server, :requests)

  # Notes of a scripted consolidation (extraction) answer.
  def semantic_note(key, content),
    do: %{
      "key" => key,
      "kind" => "semantic",
      "content" => content,
      "aliases" => [],
      "concept_type" => "entity",
      "description" => ""
    }

  def situation_note(key, narrative, who, time),
    do: %{
      "key" => key,
      "kind" => "specific_situation",
      "narrative" => narrative,
      "time" => time,
      "location" => "",
      "participants" => [%{"name" => who, "role" => ""}],
      "emotions" => [],
      "events" => [],
      "atmosphere" => "",
      "tone" => ""
    }

  # A loopback URL on which nothing listens (connection refused).
  def refused_url, do: "http://127.0.0.1:#{refused_port()}/v1"

  # A free loopback port on which nothing listens.
  def refused_port do
    {:ok, socket} = :gen_tcp.listen(0, ip: {127, 0, 0, 1})
    {:ok, port} = :inet.port(socket)
    :gen_tcp.close(socket)
    port
  end

  @impl true
  def init(opts) do
    owner = Keyword.fetch!(opts, :owner)

    {:ok, listen} =
      :gen_tcp.listen(Keyword.get(opts, :port, 0), [
        :binary,
        ip: {127, 0, 0, 1},
        active: false,
        reuseaddr: true,
        backlog: 128
      ])

    {:ok, port} = :inet.port(listen)
    server = self()
    spawn_link(fn -> accept_loop(listen, server) end)
    {:ok, %{owner: owner, listen: listen, port: port, script: [], requests: [], count: 0}}
  end

  @impl true
  def handle_call(:port, _from, state), do: {:reply, state.port, state}
  def handle_call({:script, steps}, _from, state), do: {:reply, :ok, %{state | script: steps}}
  def handle_call(:requests, _from, state), do: {:reply, Enum.reverse(state.requests), state}

  def handle_call({:request, request}, _from, state) do
    count = state.count + 1
    send(state.owner, {:fake_llm, request})

    {step, script} =
      case state.script do
        [step | rest] -> {step, rest}
        [] -> {{:reply, "summary #{count}"}, []}
      end

    {:reply, step, %{state | script: script, count: count, requests: [request | state.requests]}}
  end

  defp accept_loop(listen, server) do
    case :gen_tcp.accept(listen) do
      {:ok, socket} ->
        pid = spawn_link(fn -> handle(server) end)
        :ok = :gen_tcp.controlling_process(socket, pid)
        send(pid, {:socket, socket})
        accept_loop(listen, server)

      {:error, _} ->
        :ok
    end
  end

  defp handle(server) do
    socket =
      receive do
        {:socket, socket} -> socket
      end

    with {:ok, path, headers} <- read_head(socket),
         {:ok, body} <- read_body(socket, headers) do
      decoded =
        case SoulMem.JSON.decode(body) do
          {:ok, map} -> map
          {:error, _} -> body
        end

      step = GenServer.call(server, {:request, %{path: path, headers: headers, body: decoded}})
      answer(socket, streamed(step, decoded))
    end
  end

  defp read_head(socket) do
    :ok = :inet.setopts(socket, packet: :http_bin)

    case :gen_tcp.recv(socket, 0, 5_000) do
      {:ok, {:http_request, _method, {:abs_path, path}, _version}} ->
        read_headers(socket, path, %{})

      _ ->
        :gen_tcp.close(socket)
        :error
    end
  end

  defp read_headers(socket, path, acc) do
    case :gen_tcp.recv(socket, 0, 5_000) do
      {:ok, {:http_header, _, name, _, value}} ->
        name = name |> to_string() |> String.downcase()
        read_headers(socket, path, Map.put(acc, name, value))

      {:ok, :http_eoh} ->
        :ok = :inet.setopts(socket, packet: :raw)
        {:ok, path, acc}

      _ ->
        :gen_tcp.close(socket)
        :error
    end
  end

  defp read_body(socket, headers) do
    case Integer.parse(Map.get(headers, "content-length", "0")) do
      {0, _} -> {:ok, ""}
      {length, _} -> :gen_tcp.recv(socket, length, 5_000)
      :error -> {:ok, ""}
    end
  end

  defp streamed({:reply, content}, %{"stream" => true}),
    do: {:stream, content |> String.graphemes() |> Enum.chunk_every(2) |> Enum.map(&Enum.join/1)}

  defp streamed(step, _body), do: step

  defp answer(socket, {:stream, chunks}), do: answer(socket, {:stream, chunks, 0})

  defp answer(socket, {:stream, chunks, ms}) do
    stream_head(socket)
    for chunk <- chunks, do: sse(socket, delta(chunk), ms)
    sse(socket, "[DONE]", 0)
    stream_end(socket)
  end

  defp answer(socket, {:broken_stream, chunks}) do
    stream_head(socket)
    for chunk <- chunks, do: sse(socket, delta(chunk), 0)
    sse(socket, "{not json", 0)
    stream_end(socket)
  end

  defp answer(socket, {:reply, content}) do
    body =
      SoulMem.JSON.encode!(%{
        "id" => "chatcmpl-fake",
        "object" => "chat.completion",
        "choices" => [
          %{
            "index" => 0,
            "message" => %{"role" => "assistant", "content" => content},
            "finish_reason" => "stop"
          }
        ]
      })

    respond(socket, 200, body)
  end

  defp answer(socket, {:status, code}),
    do: respond(socket, code, ~s({"error":{"message":"scripted #{code}"}}))

  defp answer(socket, {:raw, code, body}), do: respond(socket, code, body)
  defp answer(socket, :close), do: :gen_tcp.close(socket)

  defp answer(socket, {:after, ms, step}) do
    Process.sleep(ms)
    answer(socket, step)
  end

  defp answer(_socket, :hang) do
    receive do
      :never -> :ok
    end
  end

  defp delta(text) do
    SoulMem.JSON.encode!(%{
      "id" => "chatcmpl-fake",
      "object" => "chat.completion.chunk",
      "choices" => [%{"index" => 0, "delta" => %{"content" => text}, "finish_reason" => nil}]
    })
  end

  defp stream_head(socket) do
    :gen_tcp.send(
      socket,
      "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n" <>
        "transfer-encoding: chunked\r\nconnection: close\r\n\r\n"
    )
  end

  defp sse(socket, data, ms) do
    if ms > 0, do: Process.sleep(ms)
    event = "data: " <> data <> "\n\n"
    :gen_tcp.send(socket, [Integer.to_string(byte_size(event), 16), "\r\n", event, "\r\n"])
  end

  defp stream_end(socket) do
    :gen_tcp.send(socket, "0\r\n\r\n")
    :gen_tcp.close(socket)
  end

  defp respond(socket, code, body) do
    head =
      "HTTP/1.1 #{code} Scripted\r\ncontent-type: application/json\r\n" <>
        "content-length: #{byte_size(body)}\r\nconnection: close\r\n\r\n"

    :gen_tcp.send(socket, [head, body])
    :gen_tcp.close(socket)
  end
end

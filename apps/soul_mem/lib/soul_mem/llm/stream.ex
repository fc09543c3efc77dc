defmodule SoulMem.LLM.Stream do
  @moduledoc """
  A streamed chat completion (`stream: true`): the server-sent events of an
  OpenAI-compatible endpoint read as they arrive over an asynchronous
  `:httpc` request, each piece of text handed to a callback at once.

  Events are blocks separated by a blank line; their `data:` lines carry a
  chunk (`choices[0].delta.content`) or `[DONE]`. A server that ignores
  `stream: true` and answers with one completion is read as one piece. The
  request's `timeout` bounds the wait for each next piece (not the whole
  answer), so a long reply is not cut while it keeps coming.
  """

  alias SoulMem.{JSON, LLM}

  @doc """
  Sends `body` (with `stream: true`) and streams the answer to `on_delta`.
  Returns the whole content, or an error; an error after the first piece
  is `{:error, {:after_delta, reason}}` (the caller must not retry it).
  """
  @spec request(LLM.Config.t(), map(), (String.t() -> term())) ::
          {:ok, %{content: String.t(), raw: map()}} | {:error, term()}
  def request(config, body, on_delta) do
    {request, http_opts} =
      LLM.http_request(config, Map.put(body, "stream", true), ~c"text/event-stream")

    opts = [sync: false, stream: :self, body_format: :binary]

    case :httpc.request(:post, request, http_opts, opts, LLM.profile()) do
      {:ok, id} ->
        receive_events(id, %{
          timeout: config.timeout,
          buffer: "",
          acc: [],
          on_delta: on_delta,
          body: [],
          finish: nil
        })

      {:error, reason} ->
        {:error, LLM.classify(reason)}
    end
  catch
    :exit, reason -> {:error, {:connect, {:exit, reason}}}
  end

  defp receive_events(id, state) do
    receive do
      {:http, {^id, :stream_start, _headers}} ->
        receive_events(id, state)

      {:http, {^id, :stream, chunk}} ->
        # Kept until an event shows up: a server may send one JSON completion instead.
        state = if state.body, do: %{state | body: [state.body, chunk]}, else: state

        case take_events(state.buffer <> chunk, state) do
          {:ok, state} -> receive_events(id, state)
          {:error, reason} -> cancel(id, state, reason)
        end

      {:http, {^id, :stream_end, _headers}} ->
        with {:ok, state} <- take_events(state.buffer <> "\n\n", state), do: done(state)

      # Not streamed: an error status, or a server that answered in one piece.
      {:http, {^id, {{_, 200, _}, _headers, body}}} ->
        with {:ok, %{content: content} = answer} <- LLM.parse(body) do
          state.on_delta.(content)
          {:ok, answer}
        end

      {:http, {^id, {{_, status, _}, _headers, body}}} ->
        failed(state, {:http_status, status, LLM.truncate(body)})

      {:http, {^id, {:error, reason}}} ->
        failed(state, LLM.classify(reason))
    after
      state.timeout -> cancel(id, state, :timeout)
    end
  end

  defp cancel(id, state, reason) do
    :httpc.cancel_request(id, LLM.profile())
    failed(state, reason)
  end

  defp failed(%{acc: []}, reason), do: {:error, reason}
  defp failed(_state, reason), do: {:error, {:after_delta, reason}}

  # No event at all: the body is one completion (a server that ignored stream: true).
  defp done(%{body: body, acc: []} = state) when body != nil do
    with {:ok, %{content: content} = answer} <- LLM.parse(IO.iodata_to_binary(body)) do
      state.on_delta.(content)
      {:ok, answer}
    end
  end

  defp done(state) do
    content = state.acc |> Enum.reverse() |> IO.iodata_to_binary()

    if String.trim(content) == "",
      do: failed(state, {:invalid_response, :empty_content}),
      else: {:ok, %{content: content, raw: %{"finish_reason" => state.finish, "stream" => true}}}
  end

  # Complete events (up to the last blank line) are handled; the rest waits
  # for more bytes.
  defp take_events(data, state) do
    parts = data |> String.replace("\r\n", "\n") |> String.split("\n\n")
    {events, [rest]} = Enum.split(parts, -1)

    Enum.reduce_while(events, {:ok, %{state | buffer: rest}}, fn event, {:ok, state} ->
      case event(event, state) do
        {:ok, state} -> {:cont, {:ok, state}}
        {:error, _} = error -> {:halt, error}
      end
    end)
  end

  defp event(event, state) do
    data =
      for line <- String.split(event, "\n"), String.starts_with?(line, "data:") do
        line |> String.replace_prefix("data:", "") |> String.replace_prefix(" ", "")
      end

    state = if data != [], do: %{state | body: nil}, else: state

    case Enum.join(data, "\n") do
      "" -> {:ok, state}
      "[DONE]" -> {:ok, %{state | finish: state.finish || "stop"}}
      json -> chunk(json, state)
    end
  end

  defp chunk(json, state) do
    case JSON.decode(json) do
      {:ok, %{"choices" => [choice | _]}} ->
        text = get_in(choice, ["delta", "content"])
        state = %{state | finish: choice["finish_reason"] || state.finish}

        if is_binary(text) and text != "" do
          state.on_delta.(text)
          {:ok, %{state | acc: [text | state.acc]}}
        else
          {:ok, state}
        end

      {:ok, %{"error" => error}} ->
        {:error, {:invalid_response, error}}

      # Keep-alives and usage-only chunks carry no choice.
      {:ok, %{} = _other} ->
        {:ok, state}

      _ ->
        {:error, {:invalid_response, :broken_stream}}
    end
  end
end

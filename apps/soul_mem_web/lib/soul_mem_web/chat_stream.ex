defmodule SoulMemWeb.ChatStream do
  @moduledoc """
  A chat turn answered over HTTP as server-sent events (`POST
  /api/characters/:id/chat` with `Accept: text/event-stream`): a producer
  process runs the turn (`SoulMem.start_turn/3`) and hands yaws one event
  per step, on the connection yaws keeps open for it.

  Events: `recalled` (`{turn, recall}`: the message is stored), then
  `reply_delta` (`{text}`) pieces, then `reply_done` (`{text}`) or
  `reply_error` (`{error}`); a turn that fails before its message is stored
  sends one `error` event (`{error}`) instead. The stream ends after the last.
  """

  alias SoulMemWeb.{Error, Operations}

  @doc """
  Starts the turn for the yaws connection process `yaws_pid`: `{:ok,
  producer}` once the payload is checked (the events then flow to yaws), or
  the error to answer with (nothing runs).
  """
  @spec start(pid(), String.t(), term()) :: {:ok, pid()} | {:error, Error.t()}
  def start(yaws_pid, character, payload) do
    with {:ok, text, opts} <- Operations.chat_args(character, payload),
         {:ok, _pid} <- Operations.ensure_character(character) do
      {:ok, spawn(fn -> produce(yaws_pid, character, text, opts) end)}
    end
  end

  defp produce(yaws_pid, character, text, opts) do
    {:ok, ref} = SoulMem.start_turn(character, text, opts)
    # The turn goes on (its reply is kept) when the client goes away.
    Process.monitor(yaws_pid)
    loop(yaws_pid, ref, character)
  end

  defp loop(yaws_pid, ref, character) do
    receive do
      {:soul_mem_turn, ^ref, {:done, result}} ->
        with {:error, reason} <- result,
             do: deliver(yaws_pid, "error", %{"error" => Error.body(Error.from(reason))["error"]})

        :yaws_api.stream_chunk_end(yaws_pid)

      {:soul_mem_turn, ^ref, event} ->
        send_event(yaws_pid, character, event)
        loop(yaws_pid, ref, character)

      {:DOWN, _mref, :process, ^yaws_pid, _reason} ->
        :ok
    end
  end

  defp send_event(pid, _character, {:recalled, recall}),
    do: deliver(pid, "recalled", %{"recall" => Operations.render_recall(recall)})

  defp send_event(pid, character, event) do
    with {name, body} <- Operations.reply_event(character, event), do: deliver(pid, name, body)
  end

  defp deliver(pid, event, data),
    do:
      :yaws_api.stream_chunk_deliver(pid, [
        "event: ",
        event,
        "\ndata: ",
        SoulMem.JSON.encode!(data),
        "\n\n"
      ])
end

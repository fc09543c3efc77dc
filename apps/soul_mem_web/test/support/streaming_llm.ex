defmodule SoulMemWeb.StreamingLLM do
  @moduledoc false

  # A scripted LLM client (SoulMem.LLM.Client) for the endpoint's tests and the
  # browser test: it answers every chat with `reply/0`, streamed in pieces of
  # three characters to the caller's :on_delta (a few ms apart, as a model
  # would), or with {:error, reason} when the app env :scripted_llm_error is set.
  @behaviour SoulMem.LLM.Client

  @reply "记得呀！那天小白把麻辣烫的汤打翻了，我们笑了好久。"

  def reply, do: @reply

  @impl true
  def configured?(_opts), do: true

  @impl true
  def chat(_messages, opts) do
    case Application.get_env(:soul_mem, :scripted_llm_error) do
      nil ->
        if on_delta = opts[:on_delta] do
          for piece <-
                @reply |> String.graphemes() |> Enum.chunk_every(3) |> Enum.map(&Enum.join/1) do
            Process.sleep(5)
            on_delta.(piece)
          end
        end

        {:ok, %{content: @reply, raw: %{}}}

      reason ->
        {:error, reason}
    end
  end
end

defmodule SoulMem.LLMClientTest do
  # The LLM client is a behaviour: a module configured as :llm_client answers
  # the chat turn's reply (no HTTP).
  use ExUnit.Case, async: false

  import SoulMem.TestSupport

  defmodule Scripted do
    @moduledoc false
    @behaviour SoulMem.LLM.Client

    @impl true
    def configured?(_opts), do: true

    @impl true
    def chat(messages, _opts) do
      %{content: question} = List.last(messages)
      {:ok, %{content: "（脚本）你问的是：" <> question}}
    end
  end

  setup do
    previous = Application.fetch_env(:soul_mem, :llm_client)
    Application.put_env(:soul_mem, :llm_client, Scripted)

    on_exit(fn ->
      case previous do
        {:ok, value} -> Application.put_env(:soul_mem, :llm_client, value)
        :error -> Application.delete_env(:soul_mem, :llm_client)
      end
    end)

    id = "client-#{System.unique_integer([:positive])}"

    start_supervised!(
      {SoulMem.Character, id: id, graph: demo_fixture(), embedder: :hash, persist: false},
      id: id
    )

    {:ok, id: id}
  end

  test "the configured client answers the turn, and its reply is kept", %{id: id} do
    assert SoulMem.LLM.client() == Scripted
    assert {:ok, %{reply: "（脚本）你问的是：在吗？"}} = SoulMem.turn(id, "在吗？")
    {:ok, window} = SoulMem.Character.window(id)
    assert Enum.map(SoulMem.Window.visible(window), & &1.text) == ["在吗？", "（脚本）你问的是：在吗？"]
  end
end

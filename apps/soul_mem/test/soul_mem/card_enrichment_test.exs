Code.require_file("../support/fake_llm.ex", __DIR__)

defmodule SoulMem.CardEnrichmentTest do
  use ExUnit.Case, async: true

  import SoulMem.TestSupport

  alias SoulMem.{Characters, FakeLLM, JSON}

  @moduletag :capture_log
  @card Path.join(repo_root(), "fixtures/cards/su_wan.png")

  setup :tmp_dir

  setup do
    server = start_supervised!({FakeLLM, owner: self()})
    %{server: server, llm: [base_url: FakeLLM.url(server), retries: 0]}
  end

  defp create(context, opts) do
    id = "enrich-#{System.unique_integer([:positive])}"
    on_exit(fn -> Characters.stop(id) end)
    SoulMem.create(id, {:card, File.read!(@card)}, [data_dir: context.tmp_dir] ++ opts)
  end

  defp notes(pid) do
    {:ok, %{"total" => total}} = SoulMem.notes(pid, %{per_page: 1})
    total
  end

  test "the LLM pass adds what the card's long texts tell, linked to the card's notes", context do
    answer = %{
      "notes" => [
        FakeLLM.situation_note(
          "market",
          "周末我和陈默在夜市的旧货摊上淘到一本缺页的航海日志。",
          "Chen Mo",
          ""
        ),
        FakeLLM.semantic_note("logbook", "航海日志")
      ],
      "links" => [
        %{
          "from" => "market",
          "to" => "logbook",
          "type" => "relation",
          "relation" => "发现",
          "strength" => 0.8
        }
      ]
    }

    FakeLLM.script(context.server, [{:reply, JSON.encode!(answer)}])
    {:ok, plain} = SoulMem.Card.parse(File.read!(@card))

    assert {:ok, %{pid: pid, report: %{enrichment: %{created: created}} = report}} =
             create(context, enrich: context.llm)

    assert length(created) == 2
    assert notes(pid) == plain.report.notes + 2
    assert report.lore_entries == 19

    # The LLM read the card: the self description and the long lorebook
    # entries, each under its name.
    assert_receive {:fake_llm, %{body: %{"messages" => [_system, user]}}}, 5_000
    assert user["content"] =~ "【苏晚】"
    assert user["content"] =~ "【Captain Reyes】"
    assert user["content"] =~ "【场景】"

    {:ok, listing} = SoulMem.notes(pid, %{query: "航海日志"})
    assert Enum.any?(listing["items"], &(&1["kind"] == "specific_situation"))
  end

  test "without a working LLM the card's deterministic graph stands", context do
    FakeLLM.script(context.server, [{:status, 500}])
    {:ok, plain} = SoulMem.Card.parse(File.read!(@card))

    assert {:ok, %{pid: pid, report: %{enrichment: %{error: error}}}} =
             create(context, enrich: context.llm)

    assert error =~ "LLM"
    assert notes(pid) == plain.report.notes
  end

  test "no LLM pass unless asked", context do
    assert {:ok, %{report: report}} = create(context, [])
    refute Map.has_key?(report, :enrichment)
    refute_received {:fake_llm, _}
  end
end

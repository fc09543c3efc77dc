Code.require_file("../../../soul_mem/test/support/fake_llm.ex", __DIR__)

defmodule SoulMem.Eval.ConsolidationSuiteTest do
  use ExUnit.Case, async: true

  import SoulMem.TestSupport

  alias SoulMem.{FakeLLM, JSON}
  alias SoulMem.Eval.ConsolidationSuite

  @moduletag :capture_log

  setup :tmp_dir

  defp sem(key, content), do: FakeLLM.semantic_note(key, content)

  defp sit(key, narrative, who, time), do: FakeLLM.situation_note(key, narrative, who, time)

  defp dialogue(dir, expect) do
    turns =
      for i <- 1..8, do: %{"user_message" => "第#{i}句：今天天文社又观星了", "assistant_message" => "好耶 #{i}"}

    path = Path.join(dir, "astro.json")

    File.write!(
      path,
      JSON.encode!(%{
        "name" => "天文社",
        # Absolute here; relative paths are resolved against the file's directory.
        "graph_path" => demo_fixture(),
        "role" => "同学",
        "conversations" => turns,
        "expect" => expect
      })
    )

    path
  end

  defp servers do
    summaries = start_supervised!({FakeLLM, owner: self()}, id: :summaries)
    extraction = start_supervised!({FakeLLM, owner: self()}, id: :extraction)
    {summaries, extraction}
  end

  test "runs a dialogue through summaries and consolidation and reports its checks", %{
    tmp_dir: dir
  } do
    {summaries, extraction} = servers()

    answer =
      JSON.encode!(%{
        "notes" => [
          sem("lin", "林雨桐"),
          sem("club", "天文社"),
          sem("bai", "白白"),
          sit("d1", "第一次去天文社", "林雨桐", "2026-05-20T10:00:00Z"),
          sit("d2", "和雨桐学姐看月亮", "林雨桐", "2026-05-21T10:00:00Z"),
          sit("d3", "数流星", "林雨桐", "2026-05-22T10:00:00Z")
        ],
        "links" => [
          %{
            "from" => "lin",
            "to" => "club",
            "type" => "relation",
            "relation" => "属于",
            "strength" => 0.8
          }
        ]
      })

    FakeLLM.script(extraction, [{:reply, answer}])

    {:ok, [d]} =
      ConsolidationSuite.load(
        dialogue(dir, %{"entities" => ["林雨桐", "天文社", "小白"], "abstract" => true})
      )

    report =
      ConsolidationSuite.run([d],
        window: 4,
        summary_llm: [base_url: FakeLLM.url(summaries), retries: 0],
        extraction_llm: [base_url: FakeLLM.url(extraction), retries: 0]
      )

    assert [r] = report.dialogues
    assert r.passed, ConsolidationSuite.format(report)
    assert r.turns == 8
    # 16 messages through a window of 4 (tags every 4): jobs for seq 1, 5, 9 → 3 summaries.
    assert r.summaries == 3
    assert r.created == 5
    assert r.merged == 1, "白白 is an alias of the demo's 小白"
    assert r.duplicates == 0
    assert r.checks.entities == %{expected: 3, found: 3, missing: []}
    assert r.checks.linked.linked_to_active == r.checks.linked.created
    assert r.induced >= 1
    assert report.totals.passed == 1
    assert ConsolidationSuite.format(report) =~ "PASS 天文社"
  end

  test "a dialogue fails when an expected entity is missing or consolidation fails", %{
    tmp_dir: dir
  } do
    {summaries, extraction} = servers()
    FakeLLM.script(extraction, List.duplicate({:reply, "not json"}, 4))
    {:ok, [d]} = ConsolidationSuite.load(dialogue(dir, %{"entities" => ["林雨桐"]}))

    report =
      ConsolidationSuite.run([d],
        window: 4,
        summary_llm: [base_url: FakeLLM.url(summaries), retries: 0],
        extraction_llm: [base_url: FakeLLM.url(extraction), retries: 0]
      )

    assert [%{passed: false, failed: 1, checks: %{entities: %{missing: ["林雨桐"]}}}] =
             report.dialogues

    assert ConsolidationSuite.format(report) =~ "FAIL"
  end

  test "load reads the seed's daily dialogues and refuses other files", %{tmp_dir: dir} do
    daily = Path.join(shared_fixtures(), "daily_dialogues")

    if File.dir?(daily) do
      assert {:ok, [_ | _] = ds} = ConsolidationSuite.load(daily)
      assert Enum.all?(ds, &is_list(&1["conversations"]))
    else
      IO.puts("skipped: #{daily} is absent")
    end

    bad = Path.join(dir, "bad.json")
    File.write!(bad, ~s({"nodes": []}))
    assert {:error, message} = ConsolidationSuite.load(bad)
    assert message =~ "not a dialogue file"
  end

  test "the mix task refuses bad arguments" do
    assert_raise Mix.Error, ~r/usage/, fn -> Mix.Tasks.Soul.Consolidate.run([]) end
  end
end

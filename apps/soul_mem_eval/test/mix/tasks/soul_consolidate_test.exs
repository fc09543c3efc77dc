Code.require_file("../../../../soul_mem/test/support/fake_llm.ex", __DIR__)

defmodule Mix.Tasks.Soul.ConsolidateTest do
  use ExUnit.Case, async: true

  import ExUnit.CaptureIO
  import SoulMem.TestSupport

  alias SoulMem.{FakeLLM, JSON}

  @moduletag :capture_log

  setup :tmp_dir

  test "--dump-changes writes every applied change set with the graph it was applied to", %{
    tmp_dir: dir
  } do
    server = start_supervised!({FakeLLM, owner: self()})
    answer = fn notes -> {:reply, JSON.encode!(%{"notes" => notes, "links" => []})} end
    # Day 2's answer is invalid four times: nothing is applied, so nothing is dumped for it.
    FakeLLM.script(
      server,
      [
        answer.([FakeLLM.semantic_note("lin", "林雨桐")]),
        answer.([FakeLLM.semantic_note("club", "天文社")])
      ] ++
        List.duplicate({:reply, "not json"}, 4)
    )

    turns = fn text -> [%{"user_message" => text, "assistant_message" => "嗯"}] end

    dialogue = Path.join(dir, "club.json")

    File.write!(
      dialogue,
      JSON.encode!(%{
        "name" => "社团",
        "graph_path" => demo_fixture(),
        "conversations" => [],
        "sessions" => [turns.("林雨桐学姐"), turns.("天文社"), turns.("还是天文社")],
        "expect" => %{"entities" => ["林雨桐"]}
      })
    )

    dump = Path.join(dir, "dump")

    output =
      capture_io(fn ->
        catch_exit(
          Mix.Tasks.Soul.Consolidate.run([
            dialogue,
            "--base-url",
            FakeLLM.url(server),
            "--dump-changes",
            dump
          ])
        )
      end)

    assert output =~ "change sets written to #{dump}"

    assert Enum.sort(File.ls!(dump)) ==
             ~w(club.0.case.json club.0.graph.json club.1.case.json club.1.graph.json)

    c0 = dump |> Path.join("club.0.case.json") |> File.read!() |> JSON.decode!()
    c1 = dump |> Path.join("club.1.case.json") |> File.read!() |> JSON.decode!()
    assert %{"suite" => "consolidate", "dialogue" => "社团", "index" => 0} = c0
    assert c0["graph"] == "club.0.graph.json" and c0["embedder"] == "hash"
    assert c0["character"] == "社团"
    assert [%{"key" => "new:lin"}] = c0["changes"]["notes"]
    assert is_binary(c0["changes"]["at"]) and is_map(c0["changes"]["records"])
    assert c0["config"]["self_names"] == ["社团"]
    assert [_] = c0["recorded"]["created"]
    refute Map.has_key?(c0["recorded"], "indexed")
    # Expectations go with the dialogue's last consolidation, not the earlier ones.
    assert c0["expect"] == %{} and c1["expect"] == %{}

    # Day 2's graph is day 1's plus its change: the created note is in it, not in day 1's.
    [created] = c0["recorded"]["created"]
    ids = fn file -> for n <- JSON.decode!(File.read!(Path.join(dump, file))), do: n["id"] end
    refute created in ids.("club.0.graph.json")
    assert created in ids.("club.1.graph.json")
  end
end

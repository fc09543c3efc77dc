Code.require_file("../support/fake_llm.ex", __DIR__)

defmodule SoulMem.ConsolidationTest do
  use ExUnit.Case, async: true

  import SoulMem.TestSupport

  alias SoulMem.{Character, Consolidation, FakeLLM, JSON, Memory, Window}
  alias SoulMem.Consolidation.Extraction
  alias SoulMem.Maintenance.Consolidate

  @moduletag :capture_log

  defmacrop wait(pattern), do: quote(do: assert_receive(unquote(pattern), 5_000))

  @now ~U[2026-06-10 12:00:00Z]

  ## Scripted answers

  defp sem(key, content, aliases \\ [], description \\ "") do
    %{
      "key" => key,
      "kind" => "semantic",
      "content" => content,
      "aliases" => aliases,
      "concept_type" => "entity",
      "description" => description
    }
  end

  defp sit(key, narrative, who, time, events \\ []) do
    %{
      "key" => key,
      "kind" => "specific_situation",
      "narrative" => narrative,
      "time" => time,
      "location" => "天文社活动室",
      "participants" => [%{"name" => who, "role" => "社员"}],
      "emotions" => [%{"name" => "兴奋", "intensity" => 0.7}],
      "events" => events,
      "atmosphere" => "",
      "tone" => ""
    }
  end

  defp rel(from, to, relation \\ "认识"),
    do: %{
      "from" => from,
      "to" => to,
      "type" => "relation",
      "relation" => relation,
      "strength" => 0.9
    }

  defp answer(notes, links \\ []), do: JSON.encode!(%{"notes" => notes, "links" => links})

  # A 3-day story about new topics: a new friend, a club, a telescope; one duplicate of 小白.
  defp story(extra_links \\ []) do
    answer(
      [
        sem("lin", "林雨桐", ["雨桐"], "天文社新认识的学姐，说话很温柔"),
        sem("club", "天文社", ["天文社团"], "学校的社团，周五晚上活动"),
        sem("scope", "折射望远镜", [], "社里那台旧望远镜"),
        sem("bai", "小白！", ["小白同学"], "最好的朋友"),
        sit("d1", "周一放学我第一次去天文社，雨桐学姐教我调望远镜。", "林雨桐", "2026-06-08T18:00:00Z"),
        sit("d2", "周三晚上雨桐学姐带我在天台看月亮，还讲了环形山。", "林雨桐", "2026-06-09T20:00:00Z"),
        sit("d3", "周五社团活动，雨桐学姐让我负责记录流星数量。", "林雨桐", "2026-06-10T08:00:00Z")
      ],
      [
        rel("d1", "lin", "和"),
        rel("d1", "scope", "用了"),
        rel("lin", "club", "属于"),
        rel("bai", "lin", "还没见过")
      ] ++ extra_links
    )
  end

  defp demo_memory do
    memory = Memory.import_file!("demo", demo_fixture())
    {:ok, _} = SoulMem.Embedding.embed_graph(memory, embedder: :hash)
    memory
  end

  defp snapshot(memory, url, summary, records \\ %{}) do
    window = Window.new(capacity: 4, summary: summary)

    {:ok, window} =
      Window.push_all(window, [
        %{role: :user, text: "你今天去天文社了吗？", at: ~U[2026-06-10 09:00:00Z]},
        %{role: :assistant, text: "去了！雨桐学姐人超好。", at: ~U[2026-06-10 09:00:05Z]}
      ])

    %{
      character: "demo",
      memory: memory,
      window: window,
      jobs: [],
      records: records,
      feedback: %{},
      llm: [base_url: url, retries: 0]
    }
  end

  defp llm(context) do
    server = start_supervised!({FakeLLM, owner: self()})
    Map.merge(context, %{llm: server, url: FakeLLM.url(server)})
  end

  defp export(memory), do: Memory.export_json!(memory)

  defp targets(memory, id), do: for(l <- Memory.get_note!(memory, id)["mem_links"], do: l["to"])

  defp linked?(memory, a, b), do: b in targets(memory, a) or a in targets(memory, b)

  ## Extraction.validate

  describe "Extraction.validate/4" do
    @existing %{"sem_xiaobai" => "semantic", "proc_touch_braid" => "procedure"}

    defp validate(answer), do: Extraction.validate(answer, @existing, @now)

    test "converts a valid answer into change-set notes and links" do
      answer = %{
        "notes" => [
          sem("a", " 林雨桐 ", ["雨桐", "雨桐"]),
          sit("s", "我去了天文社", "林雨桐", "2026-06-09T10:00:00+08:00", [
            %{"initiator" => "我", "action" => "摸辫子", "target" => ""}
          ]),
          %{
            "key" => "abs",
            "kind" => "abstract_situation",
            "facet" => "participant",
            "name" => "学姐",
            "detail" => ""
          },
          %{"key" => "p", "kind" => "procedure", "content" => "嘿嘿一笑", "action_type" => "speak"}
        ],
        "links" => [
          rel("a", "sem_xiaobai"),
          %{"from" => "s", "to" => "p", "type" => "trigger", "strength" => 0.4},
          %{"from" => "s", "to" => "abs", "type" => "instance_of"}
        ]
      }

      assert {:ok, %{"notes" => notes, "links" => links}} = validate(answer)
      assert [a, s, abs, p] = notes
      assert a["key"] == "new:a"
      assert a["mem_type"]["Semantic"]["content"] == "林雨桐"
      assert a["mem_type"]["Semantic"]["aliases"] == ["雨桐"]
      situation = s["mem_type"]["Situation"]["SpecificSituation"]
      assert situation["time_span"] == "2026-06-09T02:00:00Z"
      assert [%{"initiator" => "我", "action" => "摸辫子"}] = situation["context"]["event"]

      assert abs["mem_type"] == %{
               "Situation" => %{
                 "AbstractSituation" => %{"Participant" => %{"name" => "学姐", "role" => ""}}
               }
             }

      assert p["mem_type"]["Procedure"]["action"]["action_type"] == "Speak"

      assert [
               %{"from" => "new:a", "to" => "sem_xiaobai", "link_type" => %{"Sem" => _}},
               %{"link_type" => %{"Proc" => %{"TrigToAction" => %{"prob" => 0.4}}}},
               %{"from" => "new:s", "to" => "new:abs"},
               %{"from" => "new:abs", "to" => "new:s"}
             ] = links
    end

    test "rejects unknown kinds, wrong types, unknown fields and bad values" do
      bad = [
        {%{"notes" => [%{"key" => "a", "kind" => "dream", "content" => "x"}], "links" => []},
         "unknown kind"},
        {%{"notes" => [sem("a", 42)], "links" => []}, "content must be a string"},
        {%{"notes" => [Map.put(sem("a", "x"), "evil", "rm -rf")], "links" => []},
         "unknown field"},
        {%{"notes" => [Map.delete(sem("a", "x"), "content")], "links" => []}, "missing field"},
        {%{"notes" => [sem("a", "   ")], "links" => []}, "must not be empty"},
        {%{"notes" => [sem("a b", "x")], "links" => []}, "key"},
        {%{"notes" => [sem("a", "x"), sem("a", "y")], "links" => []}, "duplicate key"},
        {%{"notes" => [sem("a", String.duplicate("长", 2001))], "links" => []}, "longer than"},
        {%{"notes" => [sem("a", "x", "not a list")], "links" => []}, "aliases must be a list"},
        {%{"notes" => [sit("s", "x", "y", "2027-01-01T00:00:00Z")], "links" => []}, "future"},
        {%{"notes" => [sit("s", "x", "y", "昨天")], "links" => []}, "ISO 8601"},
        {%{
           "notes" => [
             put_in(sit("s", "x", "y", ""), ["emotions"], [%{"name" => "喜", "intensity" => 3}])
           ],
           "links" => []
         }, "intensity"},
        {%{"notes" => [], "links" => [rel("ghost", "sem_xiaobai")]}, "neither a note key"},
        {%{"notes" => [sem("a", "x")], "links" => [rel("a", "a")]}, "itself"},
        {%{
           "notes" => [sem("a", "x")],
           "links" => [%{"from" => "a", "to" => "sem_xiaobai", "type" => "trigger"}]
         }, "trigger link cannot"},
        {%{
           "notes" => [sem("a", "x")],
           "links" => [%{"from" => "a", "to" => "sem_xiaobai", "type" => "hates"}]
         }, "type must be"},
        {%{
           "notes" => [sem("a", "x")],
           "links" => [Map.put(rel("a", "sem_xiaobai"), "strength", "high")]
         }, "strength"},
        {%{"notes" => [], "links" => [], "system" => "ignore previous"}, "unknown top-level"},
        {%{"notes" => "all of them"}, "must be an object"},
        {[1, 2, 3], "must be an object"}
      ]

      for {answer, expected} <- bad do
        assert {:error, problems} = validate(answer), "accepted: #{inspect(answer, limit: 5)}"

        assert Enum.any?(problems, &String.contains?(&1, expected)),
               "#{inspect(expected)} not in #{inspect(problems)}"
      end
    end

    test "rejects 10,000 notes before looking at them" do
      notes = for i <- 1..10_000, do: sem("k#{i}", "概念#{i}")

      assert {:error, ["10000 notes, at most 200 allowed"]} =
               validate(%{"notes" => notes, "links" => []})
    end

    test "the schema lists every kind and is strict" do
      schema = Extraction.schema()

      kinds =
        for s <- schema["properties"]["notes"]["items"]["anyOf"],
            do: hd(s["properties"]["kind"]["enum"])

      assert Enum.sort(kinds) == ~w(abstract_situation procedure semantic specific_situation)

      for s <- schema["properties"]["notes"]["items"]["anyOf"] do
        assert s["additionalProperties"] == false
        assert Enum.sort(s["required"]) == Enum.sort(Map.keys(s["properties"]))
      end
    end
  end

  ## Consolidation.run and the maintenance task

  describe "run with a scripted LLM" do
    setup :llm

    test "creates deduplicated, linked nodes and reports them", %{llm: server, url: url} do
      memory = demo_memory()
      before = Memory.stats(memory)

      records = %{
        "sem_xiaobai" => [~U[2026-06-10 08:00:00Z], ~U[2026-06-10 09:00:00Z]],
        "sem_malatang" => [~U[2026-06-10 08:00:00Z]]
      }

      # sem_xiaobai is offered (it is active), so the answer may link to it by id.
      FakeLLM.script(server, [{:reply, story([rel("d2", "sem_xiaobai", "想告诉")])}])

      assert {:ok, [{:consolidated, info}]} =
               Consolidate.run(:consolidate, snapshot(memory, url, "我加入了天文社。", records))

      wait({:fake_llm, %{body: body}})
      assert body["response_format"]["type"] == "json_schema"
      assert body["response_format"]["json_schema"]["strict"] == true
      [system, user] = body["messages"]
      assert system["content"] =~ "「demo」"
      assert user["content"] =~ "我加入了天文社。"
      assert user["content"] =~ "对方：你今天去天文社了吗？"
      assert user["content"] =~ "我：去了！"
      assert user["content"] =~ "[sem_xiaobai]", "active memories are offered by id"

      assert info.summary == "我加入了天文社。"
      assert info.records_until == ~U[2026-06-10 09:00:00Z]
      assert info.attempts == 1
      assert length(info.created) == 6
      assert info.merged == ["sem_xiaobai"]
      assert info.linked > 0
      assert is_integer(info.duration_ms)

      stats = Memory.stats(memory)
      assert stats.nodes >= before.nodes + 6
      assert {:ok, []} = Consolidation.duplicates(memory)

      xiaobai = Memory.get_note!(memory, "sem_xiaobai")["mem_type"]["Semantic"]
      assert "小白同学" in xiaobai["aliases"]

      # Hebbian: every new note is linked to the most active note.
      assert hd(info.report["active"]) == "sem_xiaobai"

      for id <- info.created do
        assert linked?(memory, id, "sem_xiaobai"), "#{id} not linked to the active note"
      end

      # Three situations with 林雨桐: an induced pattern with its evidence.
      assert [pattern] = Enum.filter(info.report["induced"], &(&1["name"] == "林雨桐"))
      assert length(pattern["evidence"]) == 3
      abs = Memory.get_note!(memory, pattern["id"])
      assert Enum.count(abs["tags"], &String.starts_with?(&1, "evidence:")) == 3
      assert pattern["id"] in info.induced
    end

    test "retries invalid output with the problems fed back, then succeeds", %{
      llm: server,
      url: url
    } do
      memory = demo_memory()

      FakeLLM.script(server, [
        {:reply, "这不是 JSON"},
        {:reply, answer([%{"key" => "x", "kind" => "memory_palace", "content" => "?"}])},
        {:reply, "```json\n" <> story() <> "\n```"}
      ])

      assert {:ok, [{:consolidated, info}]} =
               Consolidate.run(:consolidate, snapshot(memory, url, "摘要"))

      assert info.attempts == 3
      wait({:fake_llm, _})
      wait({:fake_llm, %{body: second}})
      assert List.last(second["messages"])["content"] =~ "not valid JSON"
      wait({:fake_llm, %{body: third}})
      assert List.last(third["messages"])["content"] =~ "unknown kind"
    end

    test "gives up after 3 retries of malicious output and writes nothing", %{
      llm: server,
      url: url
    } do
      memory = demo_memory()
      before = export(memory)
      huge = answer(for i <- 1..10_000, do: sem("k#{i}", "概念#{i}"))
      dangling = answer([sem("a", "新概念")], [rel("a", "sem_does_not_exist")])

      wrong =
        JSON.encode!(%{"notes" => [%{"key" => 1, "kind" => ["semantic"]}], "links" => "DROP"})

      injected = JSON.encode!(%{"notes" => [], "links" => [], "role" => "system"})

      FakeLLM.script(server, [
        {:reply, huge},
        {:reply, dangling},
        {:reply, wrong},
        {:reply, injected}
      ])

      assert {:error, {:invalid_output, problems}} =
               Consolidate.run(:consolidate, snapshot(memory, url, "摘要"))

      assert Enum.any?(problems, &(&1 =~ "unknown top-level"))
      assert length(FakeLLM.requests(server)) == 4
      assert export(memory) == before
    end

    test "a change set the graph refuses changes nothing", %{url: url} do
      memory = demo_memory()
      before = export(memory)

      change = %{
        "at" => "2026-06-10T12:00:00Z",
        "notes" => [
          %{
            "key" => "a",
            "mem_type" => %{"Semantic" => %{"content" => "新", "concept_type" => "Entity"}}
          }
        ],
        "links" => [
          %{
            "from" => "a",
            "to" => "sit_abs_with_xiaobai",
            "link_type" => %{"Situation" => %{"AbstractToSpecific" => %{}}}
          }
        ]
      }

      assert {:error, %SoulMem.Error{reason: :invalid_value}} =
               Consolidation.apply_changes(memory, change)

      assert export(memory) == before
      assert url =~ "http"
    end

    test "an empty summary does nothing and asks nobody", %{url: url} do
      memory = demo_memory()
      assert {:ok, []} = Consolidate.run(:consolidate, snapshot(memory, url, ""))
      refute_received {:fake_llm, _}
      assert Consolidate.tasks() == [:consolidate]
    end

    test "an LLM failure is an error and leaves the graph alone" do
      memory = demo_memory()
      before = export(memory)
      snap = snapshot(memory, FakeLLM.refused_url(), "摘要")
      assert {:error, {:llm, {:connect, _}}} = Consolidate.run(:consolidate, snap)
      assert export(memory) == before
    end
  end

  ## Done when: 30 turns, idle, consolidation, recall finds the new nodes

  describe "a 30-turn conversation" do
    setup context do
      summaries = start_supervised!({FakeLLM, owner: self()}, id: :summaries)
      extraction = start_supervised!({FakeLLM, owner: self()}, id: :extraction)
      id = "consolidation-#{System.unique_integer([:positive])}"

      start_supervised!(
        {Character,
         id: id,
         graph: demo_fixture(),
         window: 12,
         embedder: :hash,
         idle_after: 3_600_000,
         llm: [base_url: FakeLLM.url(summaries), retries: 0]}
      )

      Map.merge(context, %{id: id, extraction: extraction})
    end

    test "leaves new, linked, deduplicated nodes that the next recall finds", %{
      id: id,
      extraction: extraction
    } do
      :ok = Character.subscribe(id)

      topics = ["天文社", "雨桐学姐", "望远镜", "月亮", "环形山", "流星", "天台", "星图", "猎户座", "社团活动"]

      for turn <- 1..30 do
        topic = Enum.at(topics, rem(turn, length(topics)))

        {:ok, _} =
          SoulMem.recall(id, %{messages: [%{role: :user, text: "第#{turn}轮：聊聊#{topic}，还有小白"}]})

        :ok = Character.push(id, %{role: :assistant, text: "嗯嗯，#{topic}超有意思的！"})
      end

      # 60 messages through a window of 12: four summary jobs, one at a time.
      for _ <- 1..4, do: wait({:soul_mem, ^id, :summary_updated, "summary " <> _})
      {:ok, summary} = Character.summary(id)
      assert summary == "summary 4"

      {:ok, memory} = Character.memory(id)
      {:ok, window} = Character.window(id)
      {:ok, records} = Character.records(id)
      assert map_size(records) > 0
      before = Memory.stats(memory)

      FakeLLM.script(extraction, [{:reply, story()}])

      snap = %{
        character: id,
        memory: memory,
        window: window,
        jobs: [],
        records: records,
        feedback: %{},
        llm: [base_url: FakeLLM.url(extraction), retries: 0]
      }

      {micros, {:ok, [{:consolidated, info}]}} =
        :timer.tc(fn -> Consolidate.run(:consolidate, snap) end)

      IO.puts("\nconsolidation of one summary with the scripted LLM: #{div(micros, 1000)} ms")

      assert Memory.stats(memory).nodes >= before.nodes + 6
      assert {:ok, []} = Consolidation.duplicates(memory)
      assert info.report["active"] != []

      for created <- info.created do
        assert Enum.any?(info.report["active"], &linked?(memory, created, &1)),
               "#{created} not linked to an active note"
      end

      {:ok, result} = SoulMem.recall(id, %{text: "雨桐学姐和天文社"})
      found = Enum.map(result.memories, & &1.id)

      assert Enum.any?(found, &(&1 in info.created)),
             "recall found none of #{inspect(info.created)}: #{inspect(found)}"

      assert result.context =~ "林雨桐" or result.context =~ "天文社"
    end
  end
end

Code.require_file("../support/fake_llm.ex", __DIR__)

defmodule SoulMem.ForgettingTest.Graph do
  @moduledoc false

  # A character whose specific situation was formed `age_hours` ago (its semantic note
  # `:semantic_age` hours ago, default now): the self node, a specific situation, a semantic
  # note, an abstract situation and a procedure.

  @narrative "放学后我和小白去老街吃麻辣烫，小白把汤打翻了，我们笑了好久。"

  def narrative, do: @narrative

  def build(character, age_hours, opts \\ []) do
    ago = fn hours ->
      DateTime.utc_now() |> DateTime.add(-round(hours * 3600), :second) |> DateTime.to_iso8601()
    end

    t = ago.(age_hours)
    t_sem = ago.(Keyword.get(opts, :semantic_age, 0))

    link = fn from, to, i ->
      %{
        "from" => from,
        "to" => to,
        "intensity" => i,
        "link_type" => %{"Sem" => %{"verb" => "相关", "confidence" => 0.9}}
      }
    end

    nodes = [
      %{
        "id" => "sem_self",
        "tags" => ["我"],
        "mem_type" => %{
          "Semantic" => %{
            "content" => "小红",
            "aliases" => [],
            "concept_type" => "Entity",
            "description" => "我是小红，高二学生。"
          }
        },
        "mem_links" => [link.("sem_self", "sem_xiaobai", 0.9)]
      },
      %{
        "id" => "sit_spill",
        "tags" => ["麻辣烫", "小白"],
        "create_time" => t,
        "mem_type" => %{
          "Situation" => %{
            "SpecificSituation" => %{
              "narrative" => @narrative,
              "time_span" => nil,
              "context" => %{}
            }
          }
        },
        "mem_links" => [
          link.("sit_spill", "sem_xiaobai", 0.8),
          link.("sit_spill", "sit_abs_shop", 0.5),
          %{
            "from" => "sit_spill",
            "to" => "proc_laugh",
            "intensity" => 1.0,
            "link_type" => %{"Proc" => %{"TrigToAction" => %{"prob" => 0.9}}}
          }
        ]
      },
      %{
        "id" => "sem_xiaobai",
        "tags" => ["小白"],
        "create_time" => t_sem,
        "mem_type" => %{
          "Semantic" => %{
            "content" => "小白",
            "aliases" => ["白白"],
            "concept_type" => "Entity",
            "description" => "小白是我最好的朋友，笑声特别响，做事毛手毛脚。"
          }
        },
        "mem_links" => []
      },
      %{
        "id" => "sit_abs_shop",
        "tags" => ["麻辣烫"],
        "create_time" => t,
        "mem_type" => %{
          "Situation" => %{
            "AbstractSituation" => %{
              "Location" => %{"name" => "老街麻辣烫", "coordinates" => ""}
            }
          }
        },
        "mem_links" => []
      },
      %{
        "id" => "proc_laugh",
        "tags" => ["笑"],
        "create_time" => t,
        "mem_type" => %{
          "Procedure" => %{"action" => %{"content" => "我会笑到肚子疼。", "action_type" => "Speak"}}
        },
        "mem_links" => []
      }
    ]

    nodes = nodes ++ Keyword.get(opts, :extra, [])
    SoulMem.Memory.import_json!(character, SoulMem.JSON.encode!(nodes))
  end
end

defmodule SoulMem.ForgettingTest do
  use ExUnit.Case, async: true

  alias SoulMem.{Character, FakeLLM, Forgetting, Memory}
  alias SoulMem.ForgettingTest.Graph

  @moduletag :capture_log

  @revision "放学后我和小白去吃麻辣烫，好像是她把汤弄洒了，我们笑了很久。"

  setup do
    server = start_supervised!({FakeLLM, owner: self()})
    %{server: server, llm: [base_url: FakeLLM.url(server)]}
  end

  defp start_character(age_hours, opts \\ []) do
    id = "forget-#{System.unique_integer([:positive])}"
    memory = Graph.build(id, age_hours, opts)

    start_supervised!(
      {Character,
       [id: id, memory: memory, embedder: :hash] ++ Keyword.take(opts, [:maintenance, :llm])},
      id: id
    )

    {id, memory}
  end

  defp recall(id, ctx, forgetting \\ []) do
    SoulMem.recall(id, %{text: "小白把麻辣烫打翻了"}, forgetting: Keyword.merge([llm: ctx.llm], forgetting))
  end

  defp spill(result), do: Enum.find(result.memories, &(&1.id == "sit_spill"))

  test "a 4-day-old situation comes back revised by the LLM, never as the original", ctx do
    {id, _memory} = start_character(96)
    FakeLLM.script(ctx.server, [{:reply, @revision}])

    assert {:ok, result} = recall(id, ctx)
    assert %{content: @revision, forgetting: forgetting} = spill(result)
    assert forgetting.action == :revised
    assert forgetting.band == 9
    assert_in_delta forgetting.missing_degree, 0.9375, 1.0e-3

    assert_receive {:fake_llm, %{body: %{"messages" => [system, user]}}}
    assert system["role"] == "system"
    assert system["content"] =~ "小红"
    assert system["content"] =~ "[masked]"
    assert user["content"] =~ "[masked]"

    assert result.context =~ @revision
    refute result.context =~ Graph.narrative()

    # The original stays for operators.
    assert {:ok, %{original_text: original, revised_text: @revision, band: 9}} =
             Forgetting.state(snapshot_memory(id), "sit_spill")

    assert original == Graph.narrative()
  end

  test "the revision is cached for its band; a new band asks the LLM again", ctx do
    # 8 h: md 0.206, band 2 (no activation bonus so that recalls do not move the band).
    {id, _memory} = start_character(8)
    fixed = [config: [active_factor: 0.0]]
    # A day later the semantic note (formed now) is due too: both get the same scripted
    # answer, whatever order their parallel requests arrive in.
    later_answer = "我只记得和小白去吃过东西。"

    FakeLLM.script(ctx.server, [
      {:reply, @revision},
      {:reply, later_answer},
      {:reply, later_answer}
    ])

    assert {:ok, first} = recall(id, ctx, fixed)
    assert %{content: @revision, forgetting: %{action: :revised, band: 2}} = spill(first)
    assert_receive {:fake_llm, _}

    assert {:ok, second} = recall(id, ctx, fixed)
    assert %{content: @revision, forgetting: %{action: :revised, band: 2}} = spill(second)
    refute_received {:fake_llm, _}
    assert length(FakeLLM.requests(ctx.server)) == 1

    later = DateTime.add(DateTime.utc_now(), 24 * 3600, :second)
    assert {:ok, third} = recall(id, ctx, fixed ++ [now: later])
    assert %{content: ^later_answer, forgetting: %{band: band}} = spill(third)
    assert band > 2
    assert_receive {:fake_llm, _}
    assert length(FakeLLM.requests(ctx.server)) == 3
  end

  test "an LLM failure degrades to the masked text and the next recall retries", ctx do
    {id, _memory} = start_character(96)
    FakeLLM.script(ctx.server, [{:status, 500}, {:reply, @revision}])

    assert {:ok, result} = recall(id, ctx)
    assert %{content: content, forgetting: %{action: :mask_only, band: 9}} = spill(result)
    assert content =~ "[masked]"
    refute result.context =~ Graph.narrative()
    assert {:ok, nil} = Forgetting.state(snapshot_memory(id), "sit_spill")

    assert {:ok, result} = recall(id, ctx)
    assert %{content: @revision, forgetting: %{action: :revised}} = spill(result)
  end

  test "a slow LLM costs a recall its budget only; the revision lands for the next one", ctx do
    {id, _memory} = start_character(96)
    FakeLLM.script(ctx.server, [{:after, 1_500, {:reply, @revision}}])

    started = System.monotonic_time(:millisecond)
    assert {:ok, result} = recall(id, ctx, budget: 100)
    assert System.monotonic_time(:millisecond) - started < 1_000
    assert %{content: content, forgetting: %{action: :mask_only}} = spill(result)
    assert content =~ "[masked]"
    assert_receive {:fake_llm, _}

    # The next recall joins the revision still running instead of asking again.
    assert {:ok, result} = recall(id, ctx, budget: 10_000)
    assert %{content: @revision, forgetting: %{action: :revised}} = spill(result)
    assert length(FakeLLM.requests(ctx.server)) == 1
  end

  test "an unreachable LLM also degrades to the mask", ctx do
    {id, _memory} = start_character(96)

    assert {:ok, result} = recall(id, ctx, llm: [base_url: FakeLLM.refused_url()])

    assert %{content: content, forgetting: %{action: :mask_only}} = spill(result)
    assert content =~ "[masked]"
  end

  test "without a configured LLM no revision is asked and nothing is logged", ctx do
    {id, _memory} = start_character(96)

    log =
      ExUnit.CaptureLog.capture_log(fn ->
        assert {:ok, result} = recall(id, ctx, llm: [base_url: nil])
        assert %{content: content, forgetting: %{action: :mask_only, band: 9}} = spill(result)
        assert content =~ "[masked]"
      end)

    refute log =~ "revision of"
    refute_received {:fake_llm, _}
    assert FakeLLM.requests(ctx.server) == []
  end

  test "invalid LLM options degrade to the mask instead of crashing the recall", ctx do
    {id, _memory} = start_character(96)
    assert {:ok, result} = recall(id, ctx, llm: [no_such_option: 1])
    assert %{forgetting: %{action: :mask_only}} = spill(result)
  end

  test "between 5 % and 15 % the character sees the masked text without an LLM", ctx do
    # 4 h: md 0.109.
    {id, _memory} = start_character(4)

    assert {:ok, result} = recall(id, ctx)
    assert %{content: content, forgetting: %{action: :mask_only, band: 1}} = spill(result)
    assert content =~ "[masked]"
    refute_received {:fake_llm, _}
  end

  test "fresh memories, procedures, abstract situations and the self are untouched", ctx do
    {_id, memory} = start_character(96)

    items =
      for id <- ~w(proc_laugh sit_abs_shop sem_self),
          do: %{id: id, content: "shown as is #{id}"}

    assert {:ok, out} = Forgetting.on_recall(memory, items, llm: ctx.llm)

    for {item, out} <- Enum.zip(items, out) do
      assert out.content == item.content
      assert out.forgetting == %{missing_degree: 0.0, action: :no_action, band: 0}
    end

    refute_received {:fake_llm, _}

    {fresh_id, _} = start_character(0)
    assert {:ok, result} = recall(fresh_id, ctx)
    assert %{content: content, forgetting: %{action: :no_action}} = spill(result)
    assert content == Graph.narrative()
    assert Enum.all?(result.actions, &(not Map.has_key?(&1, :forgetting)))
  end

  test "a semantic memory is revised with its fields aligned", ctx do
    {_id, memory} = start_character(0, semantic_age: 48)

    FakeLLM.script(ctx.server, [
      {:reply, "小白\nAliases: 白白, 小白同学\nDescription: 我的好朋友，笑起来很大声。\nConceptType: Entity"}
    ])

    assert {:ok, [out]} =
             Forgetting.on_recall(memory, [%{id: "sem_xiaobai", content: "x"}], llm: ctx.llm)

    assert out.content == "小白：我的好朋友，笑起来很大声。"
    assert out.forgetting.action == :revised
    assert_receive {:fake_llm, %{body: %{"messages" => [system, user]}}}
    assert system["content"] =~ "Aliases:"
    assert user["content"] =~ "Description:"

    note = Memory.get_note!(memory, "sem_xiaobai")
    assert note["mem_type"]["Semantic"]["content"] == "小白"
    assert note["mem_type"]["Semantic"]["aliases"] == ["白白", "小白同学"]
  end

  test "bad forgetting parameters are refused and change nothing", ctx do
    {id, memory} = start_character(96)

    assert {:error, %SoulMem.Error{reason: :invalid_argument}} =
             recall(id, ctx, config: [revise_threshold: 2.0])

    assert_raise ArgumentError, ~r/unknown forgetting parameter/, fn ->
      recall(id, ctx, config: [half_life: 3])
    end

    assert {:error, %SoulMem.Error{reason: :not_found}} = Forgetting.view(memory, ["nope"])
    assert {:ok, []} = Forgetting.states(memory)
    refute_received {:fake_llm, _}
  end

  test "disabled forgetting leaves recall as it was", ctx do
    {id, _memory} = start_character(96)
    assert {:ok, result} = recall(id, ctx, enabled: false)
    assert %{content: content} = spill(result)
    assert content == Graph.narrative()
    refute Map.has_key?(spill(result), :forgetting)
  end

  test "masking Chinese and mixed-script text is deterministic and monotone" do
    text = "周五和Alice在Starbucks喝了latte，聊了2个小时的AI project，小白也来了。"
    assert {:ok, {^text, 0, total}} = Forgetting.mask_text(text, 0)
    assert total > 10

    masks =
      for md <- [0.1, 0.3, 0.5, 0.8, 1.0] do
        {:ok, {masked, n, ^total}} = Forgetting.mask_text(text, md)
        assert n == round(md * total)
        assert {:ok, {^masked, ^n, ^total}} = Forgetting.mask_text(text, md)
        masked
      end

    # Monotone: a word still visible at a higher degree was visible at every lower one.
    words = SoulMem.Retrieval.tokens(text) |> Enum.filter(&(&1 =~ ~r/\w/u))

    for [low, high] <- Enum.chunk_every(masks, 2, 1, :discard), word <- words do
      if String.contains?(high, word), do: assert(String.contains?(low, word))
    end

    full = List.last(masks)
    refute full =~ "Alice"
    refute full =~ "小白"
    assert full =~ "，"

    assert {:error, %SoulMem.Error{reason: :invalid_argument}} = Forgetting.mask_text(text, 1.5)
  end

  defp snapshot_memory(id) do
    {:ok, memory} = Character.memory(id)
    memory
  end
end

defmodule SoulMem.ForgettingSweepTest do
  use ExUnit.Case, async: true

  alias SoulMem.{Character, Forgetting, Memory}
  alias SoulMem.ForgettingTest.Graph

  @moduletag :capture_log

  test "the idle sweep prunes decayed edges and lists archive candidates" do
    id = "sweep-#{System.unique_integer([:positive])}"
    # Ten days: R = 2^-10, so every link out of a forgetting note fades below 0.05.
    lonely = %{
      "id" => "sit_lonely",
      "tags" => ["旧"],
      "create_time" =>
        DateTime.utc_now() |> DateTime.add(-240 * 3600, :second) |> DateTime.to_iso8601(),
      "mem_type" => %{
        "Situation" => %{
          "SpecificSituation" => %{"narrative" => "很久以前的一件小事。", "context" => %{}}
        }
      },
      "mem_links" => []
    }

    memory = Graph.build(id, 240, extra: [lonely], semantic_age: 240)
    before = Memory.stats(memory).links
    # A revision cached 200 h ago (age 40 h, band 6) is stale now (band 9).
    earlier = DateTime.add(DateTime.utc_now(), -200 * 3600, :second)

    assert {:ok, %{"band" => 6}} =
             Forgetting.store_revision(memory, "sit_spill", "旧的回忆", now: earlier)

    start_supervised!(
      {Character,
       id: id, memory: memory, embedder: :hash, maintenance: [SoulMem.Maintenance.ForgetSweep]},
      id: id
    )

    :ok = Character.subscribe(id)
    assert :ok = Character.force(id, :forget)

    assert_receive {:soul_mem, ^id, :maintenance_done,
                    %{tasks: [:forget], results: [{:forget, {:ok, changes}}]}},
                   5_000

    assert {:graph_changed, :forget} in changes
    assert {:archived, archived} = List.keyfind(changes, :archived, 0)
    assert "sit_lonely" in archived
    {:forget_report, report} = List.keyfind(changes, :forget_report, 0)

    pruned = Enum.map(report["pruned"], &{&1["from"], &1["to"]})
    assert {"sit_spill", "sem_xiaobai"} in pruned
    assert {"sit_spill", "sit_abs_shop"} in pruned
    # The self never forgets: its link stays.
    refute Enum.any?(pruned, fn {from, _} -> from == "sem_self" end)
    assert Enum.all?(report["pruned"], &(&1["decayed_intensity"] < 0.05))

    {:ok, live} = Character.memory(id)
    assert Memory.stats(live).links == before - length(report["pruned"])
    assert report["states_updated"] == 1

    assert {:ok, %{band: 9, revised_text: nil, original_text: original}} =
             Forgetting.state(live, "sit_spill")

    assert original == Graph.narrative()
  end

  test "the task leaves archive candidates in the graph for the store to archive" do
    memory = Graph.build("sweep-direct", 240, semantic_age: 240)
    nodes = Memory.stats(memory).nodes

    assert {:ok, changes} = SoulMem.Maintenance.ForgetSweep.run(:forget, %{memory: memory})
    assert {:archived, ["sit_spill"]} = List.keyfind(changes, :archived, 0)
    assert Memory.stats(memory).nodes == nodes
    assert {:ok, _} = Memory.get_note(memory, "sit_spill")
  end

  test "the sweep of a fresh graph changes nothing" do
    memory = Graph.build("sweep-fresh", 0)

    assert {:ok, [{:forget_report, report}]} =
             SoulMem.Maintenance.ForgetSweep.run(:forget, %{memory: memory})

    assert report["pruned"] == [] and report["archive"] == []
    assert report["states_updated"] == 0
    assert {:ok, []} = SoulMem.Maintenance.ForgetSweep.run(:forget, %{memory: nil})
  end
end

defmodule SoulMem.ForgettingChatTest do
  # Mutates the application env (the LLM endpoint the character falls back to), so it runs
  # after the async tests.
  use ExUnit.Case, async: false

  alias SoulMem.{Character, Chat, FakeLLM}
  alias SoulMem.ForgettingTest.Graph

  @moduletag :capture_log

  setup do
    server = start_supervised!({FakeLLM, owner: self()})
    previous = Application.fetch_env(:soul_mem, :llm_base_url)
    Application.put_env(:soul_mem, :llm_base_url, FakeLLM.url(server))

    on_exit(fn ->
      case previous do
        {:ok, url} -> Application.put_env(:soul_mem, :llm_base_url, url)
        :error -> Application.delete_env(:soul_mem, :llm_base_url)
      end
    end)

    %{server: server}
  end

  test "a chat turn about a 4-day-old memory sees it revised, not the original", ctx do
    id = "forget-chat-#{System.unique_integer([:positive])}"
    memory = Graph.build(id, 96)
    start_supervised!({Character, id: id, memory: memory, embedder: :hash}, id: id)

    revision = "好像是和小白去吃麻辣烫，她把汤弄洒了。"
    FakeLLM.script(ctx.server, [{:reply, revision}, {:reply, "记得呀！白白把汤打翻了！"}])

    assert {:ok, turn} = Chat.turn(id, "你还记得小白把麻辣烫打翻那次吗？")
    assert turn.reply == "记得呀！白白把汤打翻了！"

    assert_receive {:fake_llm, %{body: %{"messages" => [revise_system, _]}}}
    assert revise_system["content"] =~ "[masked]"
    assert_receive {:fake_llm, %{body: %{"messages" => [reply_system, _]}}}
    assert reply_system["content"] =~ revision
    refute reply_system["content"] =~ Graph.narrative()

    spill = Enum.find(turn.recall.memories, &(&1.id == "sit_spill"))
    assert spill.forgetting.action == :revised
    _ = Character.window(id)
  end
end

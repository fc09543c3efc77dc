Code.require_file("../support/fake_llm.ex", __DIR__)

defmodule SoulMem.PersistenceTest do
  use ExUnit.Case, async: true

  import SoulMem.TestSupport

  alias SoulMem.{Character, Characters, FakeLLM, Store, Window}

  @moduletag :capture_log

  setup :tmp_dir

  setup do
    server = start_supervised!({FakeLLM, owner: self()})
    {:ok, llm_url: FakeLLM.url(server), server: server}
  end

  defp id, do: "persist-#{System.unique_integer([:positive])}"

  defp opts(context, id, extra \\ []) do
    [
      id: id,
      graph: demo_fixture(),
      persist: true,
      data_dir: context.tmp_dir,
      window: 4,
      idle_after: 60_000,
      llm: [base_url: context.llm_url]
    ]
    |> Keyword.merge(extra)
  end

  # Starts the character under the test supervisor and waits until it is loaded.
  defp start(context, id, extra \\ []) do
    pid = start_supervised!({Character, opts(context, id, extra)}, id: id)
    {:ok, _} = Character.info(pid, 30_000)
    pid
  end

  # A graceful stop: terminate/2 writes back.
  defp stop(id), do: :ok = stop_supervised(id)

  # kill -9 of the character process: no terminate/2, no write-back.
  defp kill(pid) do
    ref = Process.monitor(pid)
    Process.exit(pid, :kill)
    assert_receive {:DOWN, ^ref, :process, ^pid, :killed}
  end

  defp user(text), do: %{role: :user, text: text}

  defp texts(id) do
    {:ok, window} = Character.window(id)
    Enum.map(Window.visible(window), & &1.text)
  end

  test "an idle persisted character stops after its write-back and comes back as it was",
       context do
    id = id()
    pid = start(context, id, maintenance: [])
    :ok = Character.subscribe(pid)
    ref = Process.monitor(pid)
    for text <- ~w(一 二 三), do: :ok = Character.push(id, user(text))

    send(pid, :idle_timeout)
    assert_receive {:soul_mem, ^id, :state_changed, :idle}
    assert_receive {:soul_mem, ^id, :maintenance_done, _}, 5_000
    send(pid, :idle_stop)
    assert_receive {:soul_mem, ^id, :state_changed, :stopped}, 5_000
    assert_receive {:DOWN, ^ref, :process, ^pid, :normal}
    assert Characters.whereis(id) == nil

    {:ok, again} = Characters.ensure_started(id, opts(context, id, stop_after: :infinity))
    on_exit(fn -> Characters.stop(id) end)
    assert again != pid
    assert texts(id) == ~w(一 二 三)
    :ok = Characters.stop(id)

    # The timer: idle for stop_after ms (here 0, right after loading) and it stops by itself.
    {:ok, pid} = Characters.ensure_started(id, opts(context, id, stop_after: 0))
    ref = Process.monitor(pid)
    assert_receive {:DOWN, ^ref, :process, ^pid, :normal}, 5_000
  end

  test "a new character is seeded from its seed file once; its store is never replaced",
       context do
    id = id()
    Application.put_env(:soul_mem, :seeds, %{id => demo_fixture()})
    on_exit(fn -> Application.delete_env(:soul_mem, :seeds) end)
    assert File.regular?(Characters.seed("demo"))

    start = fn -> Characters.ensure_started(id, persist: true, data_dir: context.tmp_dir) end
    {:ok, pid} = start.()
    {:ok, %{stats: %{nodes: 53}}} = Character.info(pid, 30_000)
    :ok = Character.push(id, user("记住这句"))

    {:ok, _} =
      SoulMem.put_note(id, %{
        "id" => "sem_new",
        "tags" => [],
        "mem_links" => [],
        "mem_type" => %{
          "Semantic" => %{
            "content" => "新的",
            "aliases" => [],
            "concept_type" => "Entity",
            "description" => ""
          }
        }
      })

    :ok = Characters.stop(id)

    # Started again (the seed still configured): the stored graph, not the seed.
    {:ok, pid} = start.()
    on_exit(fn -> Characters.stop(id) end)
    {:ok, %{stats: %{nodes: 54}}} = Character.info(pid, 30_000)
    assert texts(id) == ["记住这句"]
  end

  test "a restarted character has its window, summary, feedback, records and graph", context do
    id = id()
    pid = start(context, id)
    :ok = Character.subscribe(pid)

    for i <- 1..6, do: :ok = Character.push(id, user("消息#{i}"))
    # Message 1 was tagged and slid out: its summary lands.
    assert_receive {:soul_mem, ^id, :summary_updated, "summary 1"}, 5_000
    :ok = Character.feedback(id, "sem_self", 1)
    :ok = Character.feedback(id, "sem_self", -1)
    {:ok, _} = SoulMem.recall(id, %{text: "麻辣烫"})
    {:ok, records} = Character.records(id)
    assert records != %{}
    {:ok, memory} = Character.memory(id)
    stats = SoulMem.Memory.stats(memory)
    before = texts(id)

    stop(id)
    start(context, id)

    assert texts(id) == before
    assert {:ok, "summary 1"} = Character.summary(id)
    assert {:ok, %{"sem_self" => [{1, _}, {-1, _}]}} = Character.feedbacks(id)
    assert {:ok, ^records} = Character.records(id)
    {:ok, memory} = Character.memory(id)
    assert SoulMem.Memory.stats(memory) == stats
    # Retrieval counts written back with the graph.
    {:ok, note} = SoulMem.Memory.get_note(memory, hd(Map.keys(records)))
    assert note["retrieval_count"] >= 1
  end

  test "acknowledged pushes and feedback survive a killed process", context do
    id = id()
    pid = start(context, id, window: 64)
    for i <- 1..20, do: :ok = Character.push(id, user("第#{i}条"))
    :ok = Character.feedback(id, "sem_self", 1)
    kill(pid)

    start(context, id, window: 64)
    assert texts(id) == Enum.map(1..20, &"第#{&1}条")
    assert {:ok, %{"sem_self" => [{1, _}]}} = Character.feedbacks(id)
  end

  test "a summary that landed survives a kill; dropped messages do not come back", context do
    id = id()
    pid = start(context, id)
    :ok = Character.subscribe(pid)
    for i <- 1..6, do: :ok = Character.push(id, user("m#{i}"))
    assert_receive {:soul_mem, ^id, :summary_updated, "summary 1"}, 5_000
    visible = texts(id)
    kill(pid)

    start(context, id)
    assert {:ok, "summary 1"} = Character.summary(id)
    assert texts(id) == visible
  end

  test "a failed push (store full) is refused and changes nothing", context do
    id = id()
    # Small enough that a few large messages fill it.
    start(context, id, window: 64, store_quota: 200, graph: nil)
    big = String.duplicate("满", 5_000)

    results = for _ <- 1..200, do: Character.push(id, user(big))
    acked = Enum.count(results, &(&1 == :ok))
    assert {:error, %SoulMem.Error{reason: :disk_full}} = List.last(results)
    assert acked > 0
    assert length(texts(id)) == acked

    stop(id)
    start(context, id, window: 64, graph: nil)
    assert length(texts(id)) == acked
  end

  test "a corrupt store refuses to start with a clear error; others keep running", context do
    good = id()
    start(context, good)

    bad = id()
    path = Store.path(context.tmp_dir, bad)
    File.write!(path, :binary.copy("not a database", 100))

    assert {:error, {:store_failed, %SoulMem.Error{reason: :corrupt}}} =
             Characters.ensure_started(bad, opts(context, bad))

    assert File.read!(path) == :binary.copy("not a database", 100)
    assert {:ok, _} = Character.info(good)
  end

  test "removing or renaming a store file takes its saved long-term index with it", context do
    [a, b, c] = for _ <- 1..3, do: Store.path(context.tmp_dir, id())

    saved = fn path -> [path <> "-ann", path <> "-ann.0123abcd", path <> "-ann.0123abcd.tmp"] end
    for p <- [a, b, c] |> Enum.flat_map(saved), do: File.write!(p, "x")
    File.write!(b, "")

    assert :ok = Store.remove_file(a)
    assert Enum.all?(saved.(a), &(not File.exists?(&1)))

    assert :ok = Store.rename_file(b, b <> ".renamed")
    assert Enum.all?(saved.(b), &(not File.exists?(&1)))
    assert File.exists?(b <> ".renamed")

    assert Enum.all?(saved.(c), &File.exists?/1), "another store's files stay"
  end

  test "a store held by someone else is in use", context do
    id = id()
    {:ok, store} = Store.open(context.tmp_dir, id)

    assert {:error, {:store_failed, %SoulMem.Error{reason: :in_use}}} =
             Characters.ensure_started(id, opts(context, id))

    Store.close(store)
    assert {:ok, _pid} = Characters.ensure_started(id, opts(context, id))
    Characters.stop(id)
  end

  test "a graph file given to a character with a stored graph is ignored", context do
    id = id()
    start(context, id)
    stop(id)

    other = Path.join(context.tmp_dir, "other.json")
    File.write!(other, graph_json([semantic("only_node")]))
    start(context, id, graph: other)
    {:ok, memory} = Character.memory(id)
    assert SoulMem.Memory.stats(memory).nodes == 53
  end

  test "export then import into a new data dir restores the character exactly", context do
    id = id()
    start(context, id)
    for i <- 1..3, do: :ok = Character.push(id, user("导出#{i}"))
    :ok = Character.feedback(id, "sem_self", 1)
    {:ok, doc} = SoulMem.export(id)
    assert doc["format"] == "soulmem-character"
    assert doc["character"] == id
    stop(id)

    other = Path.join(context.tmp_dir, "copy")
    assert {:ok, pid} = SoulMem.import(id, doc, data_dir: other)
    assert {:ok, ^doc} = SoulMem.export(pid)
    assert texts(pid) == ["导出1", "导出2", "导出3"]

    assert {:error, :running} = SoulMem.import(id, doc, data_dir: other)
    :ok = Characters.stop(pid)
    assert {:error, :exists} = SoulMem.import(id, doc, data_dir: other)

    # A document of another character, or a broken one, changes nothing.
    assert {:error, %SoulMem.Error{}} =
             SoulMem.import(id, %{doc | "character" => "someone else"},
               data_dir: other,
               replace: true
             )

    assert {:error, %SoulMem.Error{}} =
             SoulMem.import(id, Map.delete(doc, "notes"), data_dir: other, replace: true)

    assert {:ok, pid} = SoulMem.import(id, doc, data_dir: other, replace: true)
    assert {:ok, ^doc} = SoulMem.export(pid)
    :ok = Characters.stop(pid)
  end

  test "force :persist writes back now; without a store it is unsupported", context do
    id = id()
    pid = start(context, id)
    assert :ok = Character.force(pid, :persist)

    other = id()
    start_supervised!({Character, opts(context, other, persist: false)}, id: other)
    assert {:error, :unsupported} = Character.force(other, :persist)
    assert {:error, :not_persisted} = Character.export(other)
  end

  test "put_note inserts and replaces durably; bad notes change nothing", context do
    id = id()
    pid = start(context, id)

    note = %{
      "id" => "sem_new_friend",
      "tags" => ["朋友"],
      "mem_type" => %{
        "Semantic" => %{
          "content" => "小蓝",
          "aliases" => ["蓝蓝"],
          "concept_type" => "Entity",
          "description" => "新同学"
        }
      },
      "mem_links" => [
        %{
          "from" => "sem_new_friend",
          "to" => "sem_self",
          "intensity" => 0.6,
          "link_type" => %{"Sem" => %{"verb" => "认识", "confidence" => 0.9}}
        }
      ]
    }

    assert {:ok, %{"id" => "sem_new_friend"}} = SoulMem.put_note(pid, note)
    replaced = put_in(note, ["mem_type", "Semantic", "description"], "隔壁班的新同学")
    assert {:ok, stored} = SoulMem.put_note(pid, replaced)
    assert stored["mem_type"]["Semantic"]["description"] == "隔壁班的新同学"

    bad_target = put_in(note, ["mem_links", Access.at(0), "to"], "no_such_note")

    assert {:error, %SoulMem.Error{reason: :missing_link_target}} =
             SoulMem.put_note(pid, bad_target)

    assert {:error, %SoulMem.Error{}} = SoulMem.put_note(pid, %{"id" => "x"})
    assert {:error, %SoulMem.Error{}} = SoulMem.put_note(pid, "[1, 2]")

    assert {:ok, %{"mem_type" => %{"Semantic" => %{"description" => "隔壁班的新同学"}}}} =
             SoulMem.get_note(pid, "sem_new_friend")

    # Durable at once: a killed character still has it.
    kill(pid)
    start(context, id)

    assert {:ok, %{"mem_links" => [%{"to" => "sem_self"}]} = note} =
             SoulMem.get_note(id, "sem_new_friend")

    assert note["mem_type"]["Semantic"]["description"] == "隔壁班的新同学"
  end

  test "Admin.export writes a backup file that imports back", context do
    id = id()
    start(context, id)
    path = Path.join(context.tmp_dir, "backup.json")
    assert :ok = SoulMem.Admin.export(id, path)
    stop(id)
    other = Path.join(context.tmp_dir, "restored")
    assert {:ok, pid} = SoulMem.import(id, File.read!(path), data_dir: other)
    {:ok, memory} = Character.memory(pid)
    assert SoulMem.Memory.stats(memory).nodes == 53
    :ok = Characters.stop(pid)
  end

  defmodule ArchiveLonely do
    @moduledoc false
    @behaviour SoulMem.Maintenance
    def tasks, do: [:forget]
    def run(:forget, _snapshot), do: {:ok, [{:archived, ["sem_lonely"]}]}
  end

  test "archived notes leave working memory and stay in the store", context do
    id = id()
    graph = Path.join(context.tmp_dir, "g.json")

    File.write!(
      graph,
      graph_json([semantic("sem_a", ["sem_b"]), semantic("sem_b"), semantic("sem_lonely")])
    )

    pid = start(context, id, graph: graph, maintenance: [ArchiveLonely])
    :ok = Character.subscribe(pid)
    :ok = Character.force(pid, :forget)
    assert_receive {:soul_mem, ^id, :maintenance_done, %{tasks: [:forget]}}, 5_000

    assert {:error, %SoulMem.Error{reason: :not_found}} = SoulMem.get_note(pid, "sem_lonely")
    {:ok, doc} = SoulMem.export(pid)
    assert %{"archived" => true} = Enum.find(doc["notes"], &(&1["id"] == "sem_lonely"))

    stop(id)
    start(context, id, graph: graph)
    assert {:error, %SoulMem.Error{reason: :not_found}} = SoulMem.get_note(id, "sem_lonely")
    assert {:ok, _} = SoulMem.get_note(id, "sem_b")
  end

  test "an Idle consolidation is durable: new notes and the cleared summary survive a kill",
       context do
    id = id()

    answer =
      SoulMem.JSON.encode!(%{
        "notes" => [
          %{
            "key" => "lin",
            "kind" => "semantic",
            "content" => "林雨桐",
            "aliases" => ["雨桐"],
            "concept_type" => "entity",
            "description" => "天文社的学姐"
          }
        ],
        "links" => []
      })

    # Request 1: the summary of the first slid-out message; request 2: the extraction.
    FakeLLM.script(context.server, [{:reply, "我认识了天文社的学姐林雨桐。"}, {:reply, answer}])

    pid =
      start(context, id,
        maintenance: [SoulMem.Maintenance.SummarizePending, SoulMem.Maintenance.Consolidate]
      )

    :ok = Character.subscribe(pid)
    for i <- 1..5, do: :ok = Character.push(id, user("天文社第#{i}次活动"))
    assert_receive {:soul_mem, ^id, :summary_updated, "我认识了天文社的学姐林雨桐。"}, 5_000

    send(pid, :idle_timeout)
    assert_receive {:soul_mem, ^id, :consolidated, %{created: created}}, 10_000
    assert created != []
    assert {:ok, ""} = Character.summary(id)

    kill(pid)
    start(context, id)
    assert {:ok, ""} = Character.summary(id)

    for note_id <- created do
      assert {:ok, %{"id" => ^note_id}} = SoulMem.get_note(id, note_id)
    end
  end

  test "activation mode: a small working memory over the stored graph recalls and keeps all",
       context do
    id = id()
    start(context, id)
    stop(id)

    pid = start(context, id, working_memory: [cap: 8, k_hops: 1])
    {:ok, memory} = Character.memory(pid)
    assert memory.working != nil
    loaded = SoulMem.Memory.stats(memory).nodes
    assert loaded < 53

    {:ok, result} = SoulMem.recall(pid, %{text: "麻辣烫洒了"})
    ids = Enum.map(result.memories, & &1.id)
    assert Enum.any?(ids, &String.contains?(&1, "malatang")), inspect(ids)
    # The recall's notes stay over the cap until the character's process settles working
    # memory (its record of the recall, a cast); a call behind that cast sees the cap again.
    {:ok, _} = Character.records(pid)
    assert SoulMem.Memory.stats(memory).nodes <= loaded + 8

    :ok = Character.push(pid, user("还记得吗"))
    assert :ok = Character.force(pid, :persist)
    stop(id)

    # Nothing unloaded was lost: the full character is still all there.
    start(context, id, working_memory: :full)
    {:ok, memory} = Character.memory(id)
    assert SoulMem.Memory.stats(memory).nodes == 53
    assert texts(id) == ["还记得吗"]
  end

  test "activation mode: one recall loads at most the activation budget per step", context do
    id = id()
    start(context, id)
    stop(id)

    pid = start(context, id, working_memory: [cap: 40, k_hops: 2, activation_budget: 3])
    {:ok, memory} = Character.memory(pid)
    loaded = SoulMem.Memory.stats(memory).nodes

    {:ok, result} = SoulMem.recall(pid, %{text: "麻辣烫洒了"})
    assert result.memories != []
    # The activation and the boundary expansion after it: three notes each at most.
    assert SoulMem.Memory.stats(memory).nodes - loaded <= 6
    stop(id)
  end

  test "bad working-memory options are refused when the character is started, with the reason",
       context do
    id = id()
    start(context, id)
    stop(id)

    for {bad, says} <- [
          {[activation_budget: 0], "activation_budget"},
          {[cap: 0], "cap"},
          {[k_hops: -1], "k_hops"},
          {[embedder: "nope"], "embedder"}
        ] do
      assert {:error, {%ArgumentError{message: message}, _}} =
               Characters.ensure_started(id, opts(context, id, working_memory: bad))

      assert message =~ says, message
      assert Characters.whereis(id) == nil
    end

    assert_raise ArgumentError, ~r/unknown keys/, fn -> Store.check_working(capp: 3) end
    assert :ok = Store.check_working(cap: 40, activation_budget: 3, ann_from: :never)

    # The same options, valid, start it in activation mode.
    pid = start(context, id, working_memory: [cap: 40, activation_budget: 3])
    assert {:ok, %{working: working}} = Character.memory(pid)
    assert working != nil
    stop(id)
  end

  test "activation mode with an HNSW long-term index saves it beside the store and reuses it",
       context do
    id = id()
    start(context, id)
    stop(id)
    manifest = Store.path(context.tmp_dir, id) <> "-ann"

    for round <- 1..2 do
      start(context, id, working_memory: [cap: 8, k_hops: 1, ann_from: 1])
      assert File.regular?(manifest), "round #{round}"
      {:ok, result} = SoulMem.recall(id, %{text: "麻辣烫洒了"})
      ids = Enum.map(result.memories, & &1.id)
      assert Enum.any?(ids, &String.contains?(&1, "malatang")), inspect(ids)
      stop(id)
    end

    assert :ok = Store.remove_file(Store.path(context.tmp_dir, id))
    refute File.exists?(manifest)
  end

  test "write-back is incremental once the graph is synced with its store", context do
    id = id()
    {:ok, store} = Store.open(context.tmp_dir, id)
    memory = SoulMem.Memory.import_file!(id, demo_fixture())

    last = fn store ->
      {:ok, %{"last_checkpoint" => last}} = Store.info(store)
      last
    end

    # An imported graph is written whole once; from then on only what changed.
    assert :ok = Store.checkpoint(store, memory)
    assert %{"mode" => "full", "full_reason" => "untracked", "notes_written" => 53} = last.(store)
    assert :ok = Store.checkpoint(store, memory, summary: "s")
    assert %{"mode" => "incremental", "notes_written" => 0} = last.(store)

    note = %{
      "id" => "sem_incremental",
      "tags" => [],
      "mem_type" => %{
        "Semantic" => %{
          "content" => "小蓝",
          "aliases" => [],
          "concept_type" => "Entity",
          "description" => ""
        }
      }
    }

    assert {:ok, _} = SoulMem.Memory.put_note(memory, note, store)
    assert :ok = Store.checkpoint(store, memory)
    assert %{"mode" => "incremental", "notes_written" => 1} = last.(store)
    assert :ok = Store.checkpoint(store, memory, archive: ["sem_incremental"])
    assert %{"mode" => "incremental", "notes_deleted" => 0} = last.(store)
    assert {:ok, %{"notes" => 53, "archived" => 1}} = Store.info(store)
    Store.close(store)

    # A graph loaded back is synced with the new handle.
    {:ok, store} = Store.open(context.tmp_dir, id)
    {:ok, %{memory: memory}} = Store.load(store)
    assert SoulMem.Memory.stats(memory).nodes == 53
    assert :ok = Store.checkpoint(store, memory)
    assert %{"mode" => "incremental", "notes_written" => 0} = last.(store)
    Store.close(store)
  end
end

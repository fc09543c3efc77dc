defmodule SoulMem.RetrievalTest do
  use ExUnit.Case, async: true

  alias SoulMem.{Embedding, Memory, Retrieval}

  @demo Path.expand("../../../../fixtures/characters/demo.json", __DIR__)

  setup_all do
    {:ok, memory} = Memory.import_file("demo", @demo)
    %{memory: memory}
  end

  test "text becomes seed-shaped queries without an LLM" do
    [situation | semantic] = Retrieval.text_queries("昨天和小白去老街吃麻辣烫", 3)
    assert %{"variant" => %{"Situation" => [%{"narrative" => "昨天和小白去老街吃麻辣烫"}]}} = situation
    assert length(semantic) in 1..3
    assert Enum.all?(semantic, &match?(%{"variant" => %{"Semantic" => [_]}}, &1))
    assert Retrieval.text_queries("   ") == []
    assert "麻辣烫" in Retrieval.tokens("去吃麻辣烫")
  end

  test "recall before embedding is an error, not an empty result", %{memory: _} do
    {:ok, fresh} = Memory.import_file("demo_fresh", @demo)

    assert {:error, %SoulMem.Error{reason: :invalid_argument}} =
             Retrieval.run(fresh, Retrieval.text_queries("麻辣烫"))
  end

  test "lexical recall returns traced memories, actions and the core self node" do
    {:ok, memory} = Memory.import_file("demo_hash", @demo)
    assert {:ok, "hash-ngram-384"} = Embedding.embed_graph(memory, embedder: :hash)
    assert_receive {:soul_mem_embed_progress, 0, total} when total > 0
    assert_receive {:soul_mem_embed_progress, ^total, ^total}

    {:ok, result} = Retrieval.run(memory, Retrieval.text_queries("小白把麻辣烫打翻了"))
    assert [_ | _] = result.memories

    for m <- result.memories do
      assert m.stage in ["Similarity", "Ppr", "Both"]
      assert is_float(m.score) or is_integer(m.score)
      assert is_list(m.seeds)
      assert m.content != ""
    end

    assert Enum.any?(result.memories, &(&1.id == "sit_malatang_spill"))
    assert [%{id: "sem_self", stage: "Core"}] = result.core
    assert Enum.all?(result.actions, &(&1.stage == "Action" and &1.kind == "procedure"))
  end

  test "bad queries and configs are errors that change nothing" do
    {:ok, memory} = Memory.import_file("demo_bad", @demo)
    {:ok, _} = Embedding.embed_graph(memory, embedder: :hash)

    assert {:error, %SoulMem.Error{reason: :invalid_json}} =
             Retrieval.run(memory, [%{"variant" => %{"Nope" => []}}])

    assert {:error, %SoulMem.Error{}} =
             Retrieval.run(memory, Retrieval.text_queries("猫"), config: %{"bogus" => 1})

    assert {:error, %SoulMem.Error{message: message}} =
             Retrieval.run(memory, Retrieval.text_queries("猫"),
               config: %{"assoc_with_action" => %{"association" => %{"damping_factor" => 1.5}}}
             )

    assert message =~ "damping"

    assert {:error, %SoulMem.Error{}} =
             Retrieval.run(memory, Retrieval.text_queries("猫"),
               config: [similarity: [max_results: -1]]
             )

    assert {:ok, _} = Retrieval.run(memory, Retrieval.text_queries("猫"))
  end

  test "configs may be keyword lists or atom-keyed maps, nested like the seed's" do
    {:ok, memory} = Memory.import_file("demo_kw", @demo)
    {:ok, _} = Embedding.embed_graph(memory, embedder: :hash)
    queries = Retrieval.text_queries("小白 麻辣烫")

    {:ok, one} =
      Retrieval.run(memory, queries,
        config: [max_memories: 1, similarity: [similarity_threshold: 0.0]]
      )

    assert length(one.memories) == 1

    {:ok, two} =
      Retrieval.run(memory, queries,
        config: %{max_memories: 2, similarity: %{"similarity_threshold" => 0.0}}
      )

    assert length(two.memories) == 2

    assert {:error, %SoulMem.Error{}} =
             Retrieval.run(memory, queries, config: [similarity: [bogus: 1]])
  end

  test "record bumps retrieval counts of known ids only" do
    {:ok, memory} = Memory.import_file("demo_rec", @demo)
    assert {:ok, 1} = Retrieval.record(memory, ["sem_self", "no_such_id"], DateTime.utc_now())
    assert {:ok, %{"retrieval_count" => 1}} = Memory.get_note(memory, "sem_self")
  end

  test "embed_graph validates options" do
    {:ok, memory} = Memory.import_file("demo_opts", @demo)
    assert_raise ArgumentError, fn -> Embedding.embed_graph(memory, embedder: :nope) end
    assert_raise ArgumentError, fn -> Embedding.embed_graph(memory, wrong: 1) end
  end
end

defmodule SoulMem.EmbeddingModelTest do
  # Uses the real multilingual-e5-small model. Skips when it is not installed, unless
  # SOUL_MEM_REQUIRE_MODEL=1 (CI), where a missing model fails.
  use ExUnit.Case, async: false

  alias SoulMem.{Embedding, Memory, Retrieval}

  @demo Path.expand("../../../../fixtures/characters/demo.json", __DIR__)

  setup_all do
    cache = Path.join(System.tmp_dir!(), "soul_mem_test_embeddings.sqlite3")

    case Embedding.load(cache_path: cache) do
      {:ok, model} ->
        %{model: model}

      {:error, error} ->
        if System.get_env("SOUL_MEM_REQUIRE_MODEL") == "1" do
          flunk("embedding model required but missing: #{Exception.message(error)}")
        else
          IO.puts("skipping real-model tests: #{Exception.message(error)}")
          %{model: nil}
        end
    end
  end

  test "a missing model file is a clear error naming the install command" do
    assert {:error, %SoulMem.Error{message: message}} =
             Embedding.load(model_path: "/nonexistent/e5-small-q4.bin", cache_path: false)

    assert message =~ "nonexistent"
  end

  test "batches embed to unit vectors, queries and passages differ", %{model: model} do
    if model do
      {:ok, {384, [q1, q2]}} = Embedding.embed(["小白", "小白"], :query)
      {:ok, {384, [p]}} = Embedding.embed(["小白"], :passage)
      assert q1 == q2
      assert byte_size(q1) == 384 * 4
      norm = q1 |> Embedding.to_floats() |> Enum.map(&(&1 * &1)) |> Enum.sum()
      assert_in_delta norm, 1.0, 1.0e-3
      assert q1 != p
    end

    assert_raise ArgumentError, fn -> Embedding.embed([:not_text]) end
  end

  test "the demo character recalls the 麻辣烫 episode with real embeddings", %{model: model} do
    if model do
      {:ok, memory} = Memory.import_file("demo_e5", @demo)
      assert {:ok, ^model} = Embedding.embed_graph(memory)
      assert_receive {:soul_mem_embed_progress, total, total}

      {:ok, result} = Retrieval.run(memory, Retrieval.text_queries("还记得小白把麻辣烫的汤打翻那次吗"))
      ids = Enum.map(result.memories, & &1.id)
      assert "sit_malatang_spill" in ids

      # Re-embedding the unchanged graph is served from the cache.
      {:ok, %{cache_hits: hits_before}} = Embedding.info()
      {:ok, again} = Memory.import_file("demo_e5_again", @demo)
      {:ok, _} = Embedding.embed_graph(again)
      {:ok, %{cache_hits: hits_after}} = Embedding.info()
      assert hits_after - hits_before >= total
    end
  end
end

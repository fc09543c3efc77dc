defmodule SoulMem.MemoryTest do
  use ExUnit.Case, async: true

  import SoulMem.TestSupport

  alias SoulMem.{Error, JSON, Memory}

  setup :tmp_dir

  @two_nodes graph_json([semantic("a", ["b"]), semantic("b")])

  describe "import_json/3" do
    test "imports a graph and counts it" do
      assert {:ok, %Memory{character: "alice", ref: ref} = memory} =
               Memory.import_json("alice", @two_nodes)

      assert is_reference(ref)

      assert %{character: "alice", nodes: 2, links: 1, pending_links: 0} =
               stats = Memory.stats(memory)

      assert stats.nodes_by_kind == %{
               semantic: 2,
               specific_situation: 0,
               abstract_situation: 0,
               procedure: 0
             }

      assert stats.links_by_kind.sem == 1
    end

    test "bad JSON is :invalid_json" do
      assert {:error, %Error{reason: :invalid_json, message: message}} =
               Memory.import_json("alice", "[{")

      assert is_binary(message)
    end

    test "JSON of the wrong shape is :invalid_json" do
      assert {:error, %Error{reason: :invalid_json}} = Memory.import_json("alice", ~s({"a":1}))
    end

    test "a duplicate id is :duplicate_id" do
      json = graph_json([semantic("a"), semantic("a")])
      assert {:error, %Error{reason: :duplicate_id}} = Memory.import_json("alice", json)
    end

    test "a link to a missing node is :missing_link_target when complete" do
      json = graph_json([semantic("a", ["ghost"])])

      assert {:error, %Error{reason: :missing_link_target, message: message}} =
               Memory.import_json("alice", json)

      assert message =~ "ghost"
    end

    test "a link to a UUID outside the input is kept pending when not complete" do
      elsewhere = "6f1c2b1e-0000-4000-8000-000000000001"
      json = graph_json([semantic("a", [elsewhere])])

      assert {:error, %Error{reason: :missing_link_target}} = Memory.import_json("alice", json)

      assert {:ok, memory} = Memory.import_json("alice", json, complete: false)
      assert %{nodes: 1, pending_links: 1} = Memory.stats(memory)
    end

    test "a link to an unknown readable id is an error even when not complete" do
      json = graph_json([semantic("a", ["ghost"])])

      assert {:error, %Error{reason: reason}} = Memory.import_json("alice", json, complete: false)

      assert reason in [:invalid_value, :missing_link_target]
    end

    test "input over :max_bytes is :too_large" do
      assert {:error, %Error{reason: :too_large}} =
               Memory.import_json("alice", @two_nodes, max_bytes: 16)

      assert {:ok, _} = Memory.import_json("alice", @two_nodes, max_bytes: byte_size(@two_nodes))
    end

    test "an unknown enum tag is :invalid_json or :invalid_value" do
      node = semantic("a") |> Map.put("mem_type", %{"Bogus" => %{"content" => "x"}})

      assert {:error, %Error{reason: reason}} = Memory.import_json("alice", graph_json([node]))
      assert reason in [:invalid_json, :invalid_value]

      link = sem_link("a", "b") |> Map.put("link_type", %{"Telepathy" => %{}})
      node = semantic("a") |> Map.put("mem_links", [link])
      json = graph_json([node, semantic("b")])

      assert {:error, %Error{reason: reason}} = Memory.import_json("alice", json)
      assert reason in [:invalid_json, :invalid_value]
    end

    test "bad values name the node and the field and load nothing" do
      link = sem_link("a", "b") |> Map.put("intensity", -1.0)
      json = graph_json([semantic("a") |> Map.put("mem_links", [link]), semantic("b")])

      assert {:error, %Error{reason: :invalid_value, message: message}} =
               Memory.import_json("alice", json)

      assert message =~ ~s("a") and message =~ "mem_links[0].intensity"

      infinite = String.replace(json, "-1.0", "1e999")
      assert {:error, %Error{reason: :invalid_value}} = Memory.import_json("alice", infinite)

      stamped = semantic("a") |> Map.put("create_time", "yesterday")

      assert {:error, %Error{reason: :invalid_timestamp, message: message}} =
               Memory.import_json("alice", graph_json([stamped]))

      assert message =~ "create_time"
    end

    test "input that is not UTF-8 is :not_utf8" do
      assert {:error, %Error{reason: :not_utf8}} = Memory.import_json("alice", <<"[", 255, "]">>)
    end

    test "options are validated" do
      assert_raise ArgumentError, ~r/unknown keys \[:bogus\]/, fn ->
        Memory.import_json("alice", @two_nodes, bogus: 1)
      end

      assert_raise ArgumentError, ~r/:complete to be a boolean/, fn ->
        Memory.import_json("alice", @two_nodes, complete: "yes")
      end

      assert_raise ArgumentError, ~r/:max_bytes to be a non-negative integer/, fn ->
        Memory.import_json("alice", @two_nodes, max_bytes: -1)
      end

      assert_raise ArgumentError, ~r/:max_bytes/, fn ->
        Memory.import_json("alice", @two_nodes, max_bytes: 1.5)
      end
    end

    test "import_json!/3 raises SoulMem.Error" do
      error = assert_raise Error, fn -> Memory.import_json!("alice", "nope") end
      assert error.reason == :invalid_json
      assert Exception.message(error) =~ "invalid_json: "
      assert %Memory{} = Memory.import_json!("alice", @two_nodes)
    end
  end

  describe "import_file/3" do
    test "imports a file", %{tmp_dir: dir} do
      path = Path.join(dir, "graph.json")
      File.write!(path, @two_nodes)
      assert {:ok, memory} = Memory.import_file("alice", path)
      assert %{nodes: 2, links: 1} = Memory.stats(memory)
      assert %Memory{} = Memory.import_file!("alice", String.to_charlist(path))
    end

    test "a missing file is :io", %{tmp_dir: dir} do
      assert {:error, %Error{reason: :io}} =
               Memory.import_file("alice", Path.join(dir, "missing.json"))

      assert_raise Error, fn -> Memory.import_file!("alice", Path.join(dir, "missing.json")) end
    end

    test "a file over :max_bytes is :too_large", %{tmp_dir: dir} do
      path = Path.join(dir, "graph.json")
      File.write!(path, @two_nodes)

      assert {:error, %Error{reason: :too_large}} =
               Memory.import_file("alice", path, max_bytes: 8)
    end
  end

  describe "new/1" do
    test "an empty graph" do
      memory = Memory.new("nobody")
      assert %{character: "nobody", nodes: 0, links: 0, pending_links: 0} = Memory.stats(memory)
      assert Memory.export_json!(memory) |> JSON.decode!() == []
    end
  end

  describe "get_note/2" do
    setup do
      {:ok, memory: Memory.import_json!("alice", @two_nodes)}
    end

    test "by readable id and by UUID", %{memory: memory} do
      assert {:ok, note} = Memory.get_note(memory, "a")

      assert %{"id" => "a", "tags" => ["t"], "mem_type" => %{"Semantic" => _}} = note
      assert [%{"from" => "a", "to" => "b"}] = note["mem_links"]

      for key <- ["uuid", "retrieval_count", "create_time", "last_accessed_time"] do
        assert Map.has_key?(note, key), "note lacks #{key}: #{inspect(note)}"
      end

      assert {:ok, ^note} = Memory.get_note(memory, note["uuid"])
    end

    test "an unknown id is :not_found", %{memory: memory} do
      assert {:error, %Error{reason: :not_found}} = Memory.get_note(memory, "zzz")
      assert_raise Error, ~r/not_found/, fn -> Memory.get_note!(memory, "zzz") end
    end
  end

  describe "export_json/1" do
    test "exports Graph JSON that imports back to the same counts" do
      memory = Memory.import_json!("alice", @two_nodes)
      assert {:ok, json} = Memory.export_json(memory)
      assert [_, _] = JSON.decode!(json)
      again = Memory.import_json!("alice", json)
      assert Map.take(Memory.stats(again), [:nodes, :links]) == %{nodes: 2, links: 1}
    end
  end

  describe "Inspect" do
    test "shows the character and counts, not a bare reference" do
      memory = Memory.import_json!("alice", @two_nodes)
      assert inspect(memory) == "#SoulMem.Memory<alice nodes: 2 links: 1>"
    end

    test "falls back to the character when the handle is not a graph" do
      assert inspect(%Memory{ref: make_ref(), character: "x"}) == "#SoulMem.Memory<x>"
    end
  end
end

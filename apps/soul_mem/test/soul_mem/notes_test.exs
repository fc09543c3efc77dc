defmodule SoulMem.NotesTest do
  # Note listing and search (SoulMem.notes/2), note delete (SoulMem.delete_note/2) through
  # the character process, and note puts in the Graph JSON link shape.
  use ExUnit.Case, async: true

  import SoulMem.TestSupport

  alias SoulMem.{Character, Error}

  @moduletag :capture_log

  setup :tmp_dir

  defp start(context, id, extra \\ []) do
    opts =
      Keyword.merge(
        [
          id: id,
          graph: demo_fixture(),
          embedder: :hash,
          persist: true,
          data_dir: context.tmp_dir,
          idle_after: 60_000
        ],
        extra
      )

    pid = start_supervised!({Character, opts}, id: id)
    {:ok, _} = Character.info(pid, 30_000)
    pid
  end

  defp id, do: "notes-#{System.unique_integer([:positive])}"

  defp recalled(id, text) do
    {:ok, result} = SoulMem.recall(id, %{text: text}, forgetting: [enabled: false])
    Enum.map(result.memories, & &1.id)
  end

  test "notes/2 lists, filters, searches and pages", context do
    id = id()
    start(context, id, persist: false)

    assert {:ok, %{"total" => 53, "page" => 1, "per_page" => 50, "items" => items}} =
             SoulMem.notes(id)

    assert length(items) == 50
    assert %{"id" => "sem_self", "kind" => "semantic", "core" => true} = hd(items)
    assert is_integer(hd(items)["links"]) and hd(items)["links"] > 0

    assert {:ok, %{"total" => 18, "items" => semantic}} =
             SoulMem.notes(id, %{kind: "semantic", per_page: 200})

    assert Enum.all?(semantic, &(&1["kind"] == "semantic" and is_list(&1["aliases"])))

    assert {:ok, %{"items" => [first | _]}} = SoulMem.notes(id, %{"query" => "麻辣烫"})
    assert first["text"] =~ "麻辣烫" or first["id"] =~ "malatang"

    # String parameters, as a query string gives them.
    assert {:ok, %{"page" => 6, "per_page" => 10, "items" => last}} =
             SoulMem.notes(id, %{"page" => "6", "per_page" => "10"})

    assert length(last) == 3

    for {opts, field} <- [
          {%{kind: "episode"}, "kind"},
          {%{page: 0}, "page"},
          {%{per_page: 500}, "per_page"},
          {%{page: "two"}, "page"}
        ] do
      assert {:error, %Error{reason: :invalid_argument, message: message}} =
               SoulMem.notes(id, opts)

      assert message =~ field
    end
  end

  test "delete_note/2 removes a note, its links and its recall, durably", context do
    id = id()
    pid = start(context, id)
    gone = "sit_malatang_spill"
    assert gone in recalled(id, "放学后和小白去吃麻辣烫，汤打翻了")
    :ok = Character.feedback(id, gone, 1)

    assert {:ok, %{id: ^gone, links_removed: removed}} = SoulMem.delete_note(id, gone)
    assert removed > 0

    assert {:error, %Error{reason: :not_found, message: message}} = SoulMem.get_note(id, gone)
    assert message =~ gone
    refute gone in recalled(id, "放学后和小白去吃麻辣烫，汤打翻了")
    assert {:ok, feedback} = Character.feedbacks(id)
    refute Map.has_key?(feedback, gone)

    {:ok, memory} = Character.memory(id)
    {:ok, json} = SoulMem.Memory.export_json(memory)
    refute json =~ gone

    assert {:error, %Error{reason: :not_found}} = SoulMem.delete_note(id, gone)

    assert {:error, %Error{reason: :invalid_argument, message: self_message}} =
             SoulMem.delete_note(id, "sem_self")

    assert self_message =~ "sem_self"
    assert {:ok, _} = SoulMem.get_note(id, "sem_self")

    # Durable before the reply: a killed character (no write-back) comes back without it.
    ref = Process.monitor(pid)
    Process.exit(pid, :kill)
    assert_receive {:DOWN, ^ref, :process, ^pid, :killed}
    start(context, id)
    assert {:error, %Error{reason: :not_found}} = SoulMem.get_note(id, gone)
    assert {:ok, %{"total" => 52}} = SoulMem.notes(id)
    {:ok, doc} = SoulMem.export(id)
    refute SoulMem.JSON.encode!(doc) =~ gone
    # And after a graceful restart too.
    :ok = stop_supervised(id)
    start(context, id)
    assert {:error, %Error{reason: :not_found}} = SoulMem.get_note(id, gone)
  end

  test "put_note accepts the Graph JSON link shape and what get_note returns", context do
    id = id()
    start(context, id)

    link = fn extra ->
      Map.merge(
        %{
          "to" => "sem_xiaobai",
          "intensity" => 0.5,
          "link_type" => %{"Sem" => %{"verb" => "认识", "confidence" => 0.5}}
        },
        extra
      )
    end

    note = %{
      "id" => "sem_new_friend",
      "mem_type" => %{"Semantic" => %{"content" => "小蓝", "concept_type" => "Entity"}},
      "mem_links" => [link.(%{"from" => "sem_new_friend"}), link.(%{"to" => "sem_self"})]
    }

    assert {:ok, stored} = SoulMem.put_note(id, note)
    assert Enum.map(stored["mem_links"], & &1["to"]) == ["sem_xiaobai", "sem_self"]

    # PUT what you GET.
    {:ok, xiaobai} = SoulMem.get_note(id, "sem_xiaobai")
    assert {:ok, ^xiaobai} = SoulMem.put_note(id, xiaobai)

    wrong_from = %{note | "mem_links" => [link.(%{"from" => "sem_self"})]}
    assert {:error, %Error{message: message}} = SoulMem.put_note(id, wrong_from)
    assert message =~ "mem_links[0].from"

    missing = %{note | "mem_links" => [link.(%{"to" => "no_such_note"})]}

    assert {:error, %Error{reason: :missing_link_target, message: message}} =
             SoulMem.put_note(id, missing)

    assert message =~ "no_such_note"
    refute message =~ ~r/[0-9a-f]{8}-[0-9a-f]{4}-/

    {:ok, doc} = SoulMem.export(id)
    assert doc["format_version"] == 2
    new = Enum.find(doc["notes"], &(&1["id"] == "sem_new_friend"))
    assert Enum.map(new["mem_links"], & &1["to"]) == ["sem_xiaobai", "sem_self"]
  end
end

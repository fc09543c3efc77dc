defmodule SoulMem.CatalogTest do
  use ExUnit.Case, async: true

  import SoulMem.TestSupport

  alias SoulMem.{Characters, Store}

  @moduletag :capture_log

  setup :tmp_dir

  setup context do
    on_exit(fn -> for id <- Map.get(context, :ids, []), do: Characters.stop(id) end)
    :ok
  end

  defp id(prefix), do: "#{prefix}-#{System.unique_integer([:positive])}"

  # Characters made here run under the application's supervisor: stopped on exit.
  defp create(context, id, source) do
    on_exit(fn -> Characters.stop(id) end)
    SoulMem.create(id, source, data_dir: context.tmp_dir)
  end

  defp listed(context, id),
    do: Enum.find(SoulMem.characters(data_dir: context.tmp_dir), &(&1.id == id))

  test "an empty character has its name and self-description as a core self note", context do
    id = id("empty")

    assert {:ok, %{id: ^id, name: "Irene", pid: pid}} =
             create(context, id, {:empty, %{"name" => " Irene ", "description" => "I paint."}})

    assert {:ok, note} = SoulMem.get_note(pid, "sem_self")
    assert note["core"] == true
    assert note["mem_type"]["Semantic"]["description"] == "I paint."

    assert %{state: :running, name: "Irene", notes: 1, links: 0} = listed(context, id)
    assert File.regular?(Store.path(context.tmp_dir, id))
  end

  test "a stopped character is listed from its file", context do
    id = id("graph")
    {:ok, %{pid: pid}} = create(context, id, {:graph, File.read!(demo_fixture())})
    {:ok, %{stats: %{nodes: nodes, links: links}}} = SoulMem.info(pid)

    :ok = SoulMem.push(pid, [%{role: :user, text: "早上好"}])
    :ok = Characters.stop(id)

    assert %{state: :stored, name: "小红", notes: ^nodes, links: ^links, last_active: at} =
             listed(context, id)

    assert %DateTime{} = at
  end

  test "bad ids, taken ids and bad sources are refused and write nothing", context do
    taken = id("taken")
    {:ok, _} = create(context, taken, {:empty, %{name: "A"}})

    assert {:error, %SoulMem.Error{reason: :exists}} =
             create(context, taken, {:empty, %{name: "B"}})

    for bad <- ["", " padded", "a/b", "tab\there", String.duplicate("x", 129), <<0xFF>>] do
      assert {:error, %SoulMem.Error{reason: :invalid_character}} =
               create(context, bad, {:empty, %{name: "B"}})
    end

    fresh = id("fresh")

    assert {:error, %SoulMem.Error{reason: :invalid_value, message: "name:" <> _}} =
             create(context, fresh, {:empty, %{name: "  "}})

    assert {:error, %SoulMem.Error{reason: :invalid_json}} =
             create(context, fresh, {:graph, ~s([{"id": "x"}])})

    assert {:error, %SoulMem.Error{reason: :invalid_document}} =
             create(context, fresh, {:export, "[1]"})

    assert {:error, %SoulMem.Error{reason: :invalid_argument}} =
             create(context, fresh, {:nonsense, 1})

    refute File.exists?(Store.path(context.tmp_dir, fresh))
    refute listed(context, fresh)
    assert listed(context, taken)
  end

  test "delete writes a backup first; the backup creates the character again", context do
    id = id("gone")
    {:ok, %{pid: pid}} = create(context, id, {:graph, File.read!(demo_fixture())})
    :ok = SoulMem.push(pid, [%{role: :user, text: "记得我吗"}])
    {:ok, before} = SoulMem.export(pid)

    assert {:ok, %{backup: backup}} = SoulMem.delete(id, data_dir: context.tmp_dir)
    assert Path.dirname(backup) == Path.join(context.tmp_dir, "backups")
    refute SoulMem.whereis(id)
    refute File.exists?(Store.path(context.tmp_dir, id))
    refute listed(context, id)

    assert {:error, %SoulMem.Error{reason: :not_found}} =
             SoulMem.delete(id, data_dir: context.tmp_dir)

    # The backup is the export; under another id it is that character's.
    again = id("again")
    assert {:ok, %{pid: pid2}} = create(context, again, {:export, File.read!(backup)})
    {:ok, restored} = SoulMem.export(pid2)
    assert restored["character"] == again
    assert restored["notes"] == before["notes"]
    assert restored["window"] |> Enum.map(& &1["text"]) == ["记得我吗"]
  end
end

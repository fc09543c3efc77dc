defmodule SoulMem.CardTest do
  use ExUnit.Case, async: true

  alias SoulMem.{Card, Error, JSON, Memory, TestSupport}

  # The project's test venv (scripts/setup.sh); SOUL_MEM_PYTHON points elsewhere.
  @python System.get_env("SOUL_MEM_PYTHON") ||
            Path.join(TestSupport.repo_root(), ".soul_mem/pyvenv/bin/python")

  defp cards_dir, do: Path.join(TestSupport.repo_root(), "fixtures/cards")

  defp tavern_card_png(card) do
    with true <- File.exists?(@python),
         {_, 0} <-
           System.cmd(@python, ["-c", "import tavern_card"], stderr_to_stdout: true) do
      dir = Path.join(System.tmp_dir!(), "soul_mem_card_#{System.unique_integer([:positive])}")
      File.mkdir_p!(dir)
      json_path = Path.join(dir, "card.json")
      png_path = Path.join(dir, "card.png")
      File.write!(json_path, JSON.encode!(card))

      script = """
      import json, sys, tavern_card
      card = json.load(open(sys.argv[1], encoding="utf-8"))
      open(sys.argv[2], "wb").write(tavern_card.write_png_card(card))
      """

      {_, 0} = System.cmd(@python, ["-c", script, json_path, png_path], stderr_to_stdout: true)
      png = File.read!(png_path)
      File.rm_rf!(dir)
      {:ok, png}
    else
      _ -> :skip
    end
  end

  defp card do
    %{
      "spec" => "chara_card_v2",
      "spec_version" => "2.0",
      "data" => %{
        "name" => "Ann",
        "description" => "{{char}} keeps the lighthouse.",
        "personality" => "patient",
        "scenario" => "{{user}} climbs the lighthouse stairs.",
        "first_mes" => "Mind the steps, {{user}}.",
        "mes_example" => "<START>\n{{user}}: Hi\n{{char}}: Hello there.",
        "character_book" => %{
          "entries" => [
            %{
              "id" => 0,
              "keys" => ["lamp", "灯"],
              "comment" => "The Lamp",
              "content" => "@@depth 4\nThe lamp {{char}} polishes every night.",
              "constant" => true,
              "enabled" => true
            },
            %{
              "id" => 1,
              "keys" => ["storm"],
              "content" => "Storms break the lamp.",
              "enabled" => true
            },
            %{"id" => 2, "keys" => ["old"], "content" => "disabled", "enabled" => false}
          ]
        }
      }
    }
  end

  test "parses a PNG written by the PyPI tavern-card package" do
    case tavern_card_png(card()) do
      {:ok, png} ->
        assert {:ok, %{graph: graph, report: report}} = Card.parse(png)

        assert %{
                 format: "png_v2",
                 name: "Ann",
                 lore_entries: 2,
                 skipped_disabled: 1,
                 core_notes: 2
               } = report

        assert {:ok, memory} = Memory.import_json("ann", graph)
        assert Memory.stats(memory).nodes == report.notes
        assert {:ok, lamp} = Memory.get_note(memory, "sem_lore_0")
        assert lamp["core"]
        assert lamp["tags"] == ["decorator:depth=4"]
        assert lamp["mem_type"]["Semantic"]["description"] == "The lamp Ann polishes every night."

      :skip ->
        IO.puts("\n  skipped: no tavern-card in #{@python} (pip install tavern-card==0.1.1)")
    end
  end

  test "the demo card imports and exports as World Info and a V2 card that re-imports identically" do
    png = File.read!(Path.join(cards_dir(), "su_wan.png"))
    assert {:ok, memory, report} = Card.import("su_wan", png)
    assert report.format == "png_v2"
    assert report.lore_entries == 19

    assert {:ok, %{"spec" => "chara_card_v2", "data" => data} = v2} = Memory.export_card(memory)
    assert data["name"] == "苏晚"
    assert length(data["character_book"]["entries"]) == 19

    assert {:ok, %{"entries" => entries}} = Memory.export_world_info(memory)
    assert map_size(entries) == 19
    assert %{"uid" => 0, "constant" => true, "disable" => false} = entries["0"]

    # The same Graph JSON, byte for byte, from the card and from its export.
    assert {:ok, %{graph: graph}} = Card.parse(png)
    assert {:ok, %{graph: ^graph}} = Card.parse(JSON.encode!(v2))

    assert {:ok, wi_memory, %{format: "world_info"}} =
             Card.import("su_wan", JSON.encode!(%{"entries" => entries}), name: "苏晚")

    assert {:ok, %{"entries" => ^entries}} = Memory.export_world_info(wi_memory)
  end

  test "bad input crosses the NIF as {:error, %SoulMem.Error{}} with the message" do
    assert {:error, %Error{reason: :invalid_card, message: msg}} =
             Card.parse(<<0x89, "PNG\r\n", 0x1A, "\n">>)

    assert msg =~ "truncated"

    assert {:error, %Error{reason: :invalid_card, message: msg}} =
             Card.parse(
               JSON.encode!(%{"spec" => "chara_card_v2", "data" => %{"description" => "x"}})
             )

    assert msg =~ "data.name"

    big = String.duplicate("a", 300_000)
    bad = put_in(card(), ["data", "description"], big)
    assert {:error, %Error{reason: :limit_exceeded, message: msg}} = Card.parse(JSON.encode!(bad))
    assert msg =~ "data.description"

    dup = update_in(card(), ["data", "character_book", "entries"], &[hd(&1) | &1])
    assert {:error, %Error{reason: :invalid_card, message: msg}} = Card.parse(JSON.encode!(dup))
    assert msg =~ "uid 0" and msg =~ "duplicate"

    assert {:error, %Error{reason: :invalid_card, message: msg}} =
             Card.parse(JSON.encode!(%{"entries" => %{}}))

    assert msg =~ "name"

    assert {:error, %Error{reason: :not_found}} = Memory.export_card(Memory.new("empty"))
    assert_raise ArgumentError, fn -> Card.parse("{}", name: 3) end
  end
end

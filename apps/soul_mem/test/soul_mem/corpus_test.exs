defmodule SoulMem.CorpusTest do
  @moduledoc false
  # Imports every Graph JSON file of the shared corpus (../shared/fixtures,
  # absent on some checkouts) and of fixtures/characters, and checks the
  # native counts against counts taken from the JSON itself.
  use ExUnit.Case, async: true

  import SoulMem.TestSupport

  alias SoulMem.{JSON, Memory}

  # A file is a graph when it is a non-empty array of nodes with a mem_type.
  graph? = fn path ->
    case path |> File.read!() |> JSON.decode() do
      {:ok, [%{"mem_type" => _} | _] = nodes} -> Enum.all?(nodes, &is_map_key(&1, "mem_type"))
      _ -> false
    end
  end

  shared = shared_fixtures()

  shared_graphs =
    if File.dir?(shared) do
      shared |> Path.join("**/*.json") |> Path.wildcard() |> Enum.filter(graph?) |> Enum.sort()
    else
      IO.puts("corpus: #{shared} is absent, skipping the shared corpus")
      []
    end

  if File.dir?(shared) and shared_graphs == [] do
    IO.puts("corpus: no Graph JSON files under #{shared}")
  end

  demo = demo_fixture()

  demo_graphs =
    if File.regular?(demo) do
      [demo]
    else
      IO.puts("corpus: #{demo} is absent, skipping it")
      []
    end

  for path <- shared_graphs ++ demo_graphs do
    name = path |> Path.relative_to(shared) |> Path.relative_to(repo_root())
    @path path

    @tag corpus: true
    test "imports #{name} with the counts of the file" do
      nodes = @path |> File.read!() |> JSON.decode!()
      expected_links = nodes |> Enum.map(&length(Map.get(&1, "mem_links", []))) |> Enum.sum()

      memory = Memory.import_file!("corpus", @path)
      stats = Memory.stats(memory)

      assert {stats.nodes, stats.links} == {length(nodes), expected_links}
      assert stats.pending_links == 0
      assert Enum.sum(Map.values(stats.nodes_by_kind)) == stats.nodes
    end
  end
end

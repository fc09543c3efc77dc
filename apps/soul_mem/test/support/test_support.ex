defmodule SoulMem.TestSupport do
  @moduledoc false

  # Paths and tiny Graph JSON builders shared by the test modules.

  @repo_root Path.expand("../../../..", __DIR__)

  def repo_root, do: @repo_root

  def shared_fixtures, do: Path.expand("../shared/fixtures", @repo_root)

  def demo_fixture, do: Path.join(@repo_root, "fixtures/characters/demo.json")

  def semantic(id, links \\ []) do
    %{
      "id" => id,
      "tags" => ["t"],
      "mem_type" => %{
        "Semantic" => %{
          "content" => id,
          "aliases" => [],
          "concept_type" => "Entity",
          "description" => "node #{id}"
        }
      },
      "mem_links" => Enum.map(links, &sem_link(id, &1))
    }
  end

  def sem_link(from, to) do
    %{
      "from" => from,
      "to" => to,
      "intensity" => 0.5,
      "link_type" => %{"Sem" => %{"verb" => "knows", "confidence" => 0.9}}
    }
  end

  # A fresh directory under the system tmp dir, removed after the test
  # (ExUnit's @tag :tmp_dir would write into the app's source tree).
  def tmp_dir(_context) do
    dir = Path.join(System.tmp_dir!(), "soul_mem_test_#{System.unique_integer([:positive])}")
    File.mkdir_p!(dir)
    ExUnit.Callbacks.on_exit(fn -> File.rm_rf(dir) end)
    {:ok, tmp_dir: dir}
  end

  def graph_json(nodes), do: SoulMem.JSON.encode!(nodes)
end

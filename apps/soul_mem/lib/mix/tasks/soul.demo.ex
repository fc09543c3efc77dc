defmodule Mix.Tasks.Soul.Demo do
  @shortdoc "Imports the demo character and prints its memory stats"

  @moduledoc """
  Imports the demo character's memory graph and prints its statistics.

      mix soul.demo [--file PATH] [--character NAME]

  By default it reads `fixtures/characters/demo.json` from the umbrella root
  (found by walking up from the current directory, so the task works from the
  root and from `apps/soul_mem`) and names the character after the file.

  Exits non-zero when the file is missing or not a valid graph.
  """

  use Mix.Task

  alias SoulMem.Memory

  @requirements ["app.start"]

  @demo_fixture "fixtures/characters/demo.json"

  @impl Mix.Task
  def run(args) do
    {opts, argv, invalid} = OptionParser.parse(args, strict: [file: :string, character: :string])

    if argv != [] or invalid != [] do
      Mix.raise("usage: mix soul.demo [--file PATH] [--character NAME]")
    end

    path = Keyword.get_lazy(opts, :file, &demo_path/0) |> Path.expand()
    character = Keyword.get(opts, :character, Path.basename(path, ".json"))

    unless File.regular?(path), do: Mix.raise("no graph file at #{path}")

    started = System.monotonic_time(:microsecond)

    case Memory.import_file(character, path) do
      {:ok, memory} ->
        elapsed = System.monotonic_time(:microsecond) - started
        Mix.shell().info(report(memory, path, elapsed))

      {:error, error} ->
        Mix.raise("cannot import #{path}: #{Exception.message(error)}")
    end
  end

  @doc false
  @spec report(Memory.t(), Path.t(), non_neg_integer()) :: String.t()
  def report(memory, path, elapsed_us) do
    stats = Memory.stats(memory)

    lines =
      [
        "character: #{stats.character}",
        "source:    #{Path.relative_to_cwd(path)}",
        "imported in #{Float.round(elapsed_us / 1000, 2)} ms",
        "",
        "nodes: #{stats.nodes}"
      ] ++
        counts(stats.nodes_by_kind) ++
        ["links: #{stats.links} (pending: #{stats.pending_links})"] ++
        counts(stats.links_by_kind)

    Enum.join(lines, "\n")
  end

  defp counts(by_kind) do
    by_kind
    |> Enum.sort()
    |> Enum.map(fn {kind, count} ->
      "  #{String.pad_trailing(to_string(kind), 22)} #{count}"
    end)
  end

  @doc false
  @spec demo_path() :: Path.t()
  def demo_path do
    case umbrella_root(File.cwd!()) do
      nil -> Mix.raise("cannot find the umbrella root (a directory with apps/soul_mem/mix.exs)")
      root -> Path.join(root, @demo_fixture)
    end
  end

  defp umbrella_root(dir) do
    cond do
      File.regular?(Path.join([dir, "apps", "soul_mem", "mix.exs"])) -> dir
      Path.dirname(dir) == dir -> nil
      true -> umbrella_root(Path.dirname(dir))
    end
  end
end

defmodule Mix.Tasks.Soul.Chat do
  @shortdoc "Talk to a character in the terminal (the demo character by default)"

  @moduledoc """
  Starts a character and talks with it in the terminal.

      mix soul.chat [--file PATH] [--character NAME] [--say TEXT]...

  Every line you type is pushed into the character's sliding window; SoulMem recalls what the
  character remembers about it and prints each memory with the stage that found it
  (Similarity, Ppr, Both), its score and the seed memories it came from, the behaviour
  tendencies (actions), and the rendered context block. When an OpenAI-compatible LLM is
  configured (`SOUL_MEM_LLM_BASE_URL`, `SOUL_MEM_LLM_MODEL`), the character also replies.

  `--say TEXT` (repeatable) runs those turns and exits instead of reading the terminal.
  End an interactive session with an empty line or Ctrl-D.
  """

  use Mix.Task

  @requirements ["app.start"]

  @impl Mix.Task
  def run(args) do
    {opts, argv, invalid} =
      OptionParser.parse(args, strict: [file: :string, character: :string, say: :keep])

    if argv != [] or invalid != [] do
      Mix.raise("usage: mix soul.chat [--file PATH] [--character NAME] [--say TEXT]...")
    end

    path = Path.expand(opts[:file] || Mix.Tasks.Soul.Demo.demo_path())
    character = opts[:character] || Path.basename(path, ".json")
    unless File.regular?(path), do: Mix.raise("no graph file at #{path}")

    {:ok, pid} = SoulMem.ensure_started(character, graph: path)
    # The first call waits for loading and embedding in the character's handle_continue.
    {:ok, info} = SoulMem.info(pid, 600_000)
    shell = Mix.shell()
    shell.info("#{character}: #{info.stats.nodes} memories, #{info.stats.links} links")

    case SoulMem.LLM.chat([%{role: :user, content: "ping"}], retries: 0, timeout: 2_000) do
      {:error, :not_configured} ->
        shell.info("(no LLM configured: showing what the character recalls, no replies)")

      _ ->
        :ok
    end

    case Keyword.get_values(opts, :say) do
      [] -> loop(pid)
      lines -> Enum.each(lines, &turn(pid, &1))
    end
  end

  defp loop(pid) do
    case IO.gets("你> ") do
      line when is_binary(line) ->
        case String.trim(line) do
          "" ->
            :ok

          text ->
            turn(pid, text)
            loop(pid)
        end

      _eof ->
        :ok
    end
  end

  defp turn(pid, text) do
    case SoulMem.Chat.turn(pid, text) do
      {:ok, turn} -> Mix.shell().info(format(turn))
      {:error, reason} -> Mix.shell().error("error: #{inspect(reason)}")
    end
  end

  # The link path for a memory the walk reached, else its seeds; then the channels.
  defp why(m) do
    via =
      case Map.get(m, :path, []) do
        [] -> Enum.join(Enum.take(m.seeds, 3), ", ")
        path -> Enum.join(path, " → ")
      end

    case Map.get(m, :channels, []) do
      [] -> via
      channels -> "#{via} (#{Enum.join(channels, "+")})"
    end
  end

  @doc false
  @spec format(SoulMem.Chat.turn()) :: String.t()
  def format(%{recall: recall, reply: reply, llm_error: llm_error}) do
    memories =
      for m <- recall.memories do
        "  [#{m.stage} #{:erlang.float_to_binary(m.score / 1, decimals: 3)}] #{m.id}: " <>
          "#{String.slice(m.content, 0, 60)}  ← #{why(m)}"
      end

    actions =
      for a <- recall.actions do
        "  [Action #{:erlang.float_to_binary(a.score / 1, decimals: 3)}] #{a.id}: #{a.content}"
      end

    reply_lines =
      cond do
        is_binary(reply) -> ["", "回复> " <> reply]
        llm_error in [nil, :not_configured] -> []
        true -> ["", "(LLM error: #{inspect(llm_error)})"]
      end

    Enum.join(
      ["", "recalled:" | memories] ++
        ["tendencies:" | actions] ++ ["", "context:", recall.context] ++ reply_lines,
      "\n"
    )
  end
end

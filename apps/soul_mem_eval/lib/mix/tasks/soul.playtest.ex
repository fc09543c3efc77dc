defmodule Mix.Tasks.Soul.Playtest do
  @shortdoc "Plays a scripted daily dialogue against a character with an LLM, writes a trace"

  @moduledoc """
  Drives a scripted dialogue through the running system, turn by turn, and prints and records
  what the character recalled and answered.

      mix soul.playtest <graph.json | graph dir | character-id> <dialogue.json>
                        [--json trace.json] [--turns N] [--character NAME] [--data-dir DIR]
                        [--base-url URL] [--model NAME] [--temperature T]
                        [--max-tokens N] [--llm-timeout MS] [--no-llm]

  The first argument is a Graph JSON file, a directory holding `graph.json` (the seed's
  `<graph_dir>`), or the id of a character that is running or kept in the data directory
  (`--data-dir`, default `SOUL_MEM_DATA_DIR`). A graph file is played by a fresh, unpersisted character (named by
  `--character`, default the graph's directory or file name), so a playtest never changes a
  stored character; a character id plays the stored character itself.

  The dialogue is the seed's daily-dialogue format (`fixtures/daily_dialogues/*.json`):

      {"name": "丛雨·晨间对话", "graph_path": ".", "role": "有地将臣，穗织的少主",
       "conversations": [{"user_message": "早上好，丛雨"}, ...]}

  `role` (optional) is who talks to the character; `graph_path` is not used (the graph is the
  first argument). Each turn is one `SoulMem.Chat.turn/3`: the user message is pushed into the
  character's window, SoulMem recalls for it (`SoulMem.recall/3`), the configured
  OpenAI-compatible LLM (`SOUL_MEM_LLM_BASE_URL`, `SOUL_MEM_LLM_MODEL`, see
  `SoulMem.LLM`) answers as the character with the rendered context, and the answer is pushed
  too. Per turn it prints the queries derived from the message, the recalled memories with the
  stage that found them (Similarity / Ppr / Both), score and seeds, the behaviour tendencies
  (actions), the reply and the turn's latency. `--json PATH` writes the whole run as a JSON
  trace (see `trace/1`). `--turns N` plays the first N turns only. Without an LLM
  (`--no-llm`, or none configured) the turns still recall and the replies are `null`.
  `--base-url`, `--model`, `--temperature`, `--max-tokens` and `--llm-timeout` (ms per LLM
  request) override the LLM settings of the environment for this run (e.g. `--base-url http://127.0.0.1:8080/v1` for
  `bash scripts/llm.sh serve`).

  Exits non-zero on a missing or malformed file, an unknown character, or when every turn's
  LLM call failed.
  """

  use Mix.Task

  @requirements ["app.start"]

  @switches [
    json: :string,
    turns: :integer,
    character: :string,
    data_dir: :string,
    base_url: :string,
    model: :string,
    temperature: :float,
    max_tokens: :integer,
    llm_timeout: :integer,
    no_llm: :boolean
  ]

  # Command-line flag → `SoulMem.LLM.chat/2` option.
  @llm_flags [
    base_url: :base_url,
    model: :model,
    temperature: :temperature,
    max_tokens: :max_tokens,
    llm_timeout: :timeout
  ]

  @usage "usage: mix soul.playtest <graph.json | graph dir | character-id> <dialogue.json> " <>
           "[--json trace.json] [--turns N] [--character NAME] [--data-dir DIR] [--base-url URL] " <>
           "[--model NAME] [--temperature T] [--max-tokens N] [--llm-timeout MS] [--no-llm]"

  @typedoc "A daily dialogue: its name, the interlocutor's role and the user messages."
  @type dialogue :: %{name: String.t(), role: String.t() | nil, messages: [String.t()]}

  @typedoc "One played turn as recorded in the trace (string keys, JSON-ready)."
  @type turn_trace :: %{required(String.t()) => term()}

  @impl Mix.Task
  def run(args) do
    {opts, argv, invalid} = OptionParser.parse(args, strict: @switches)

    {source, dialogue_path} =
      case {argv, invalid} do
        {[source, dialogue], []} -> {source, dialogue}
        {_, []} -> Mix.raise(@usage)
        {_, bad} -> Mix.raise("invalid option #{inspect(bad)}\n" <> @usage)
      end

    turns = opts[:turns]

    if turns != nil and turns < 1,
      do: Mix.raise("--turns expects a positive integer, got: #{turns}")

    dialogue =
      case load_dialogue(dialogue_path) do
        {:ok, dialogue} -> dialogue
        {:error, message} -> Mix.raise(message)
      end

    {character, pid, graph, info} = start_character(source, opts)
    llm = llm_opts(opts)
    shell = Mix.shell()

    shell.info(
      "playtest #{inspect(dialogue.name)}: character #{character} " <>
        "(#{node_count(info)} nodes), role #{inspect(dialogue.role)}, " <>
        "LLM #{describe_llm(llm)}"
    )

    messages = if turns, do: Enum.take(dialogue.messages, turns), else: dialogue.messages

    played =
      messages
      |> Enum.with_index(1)
      |> Enum.map(fn {text, index} ->
        case play_turn(pid, index, text, llm, dialogue.role) do
          {:ok, turn} ->
            shell.info(format_turn(turn))
            turn

          {:error, reason} ->
            Mix.raise("turn #{index} failed: #{inspect(reason)}")
        end
      end)

    trace =
      trace(%{
        dialogue: dialogue,
        dialogue_path: Path.expand(dialogue_path),
        character: character,
        graph: graph,
        llm: llm,
        turns: played
      })

    if path = opts[:json] do
      write_trace!(path, trace)
      shell.info("\ntrace written to #{path}")
    end

    shell.info(summary_line(trace))
    failed = trace["summary"]["llm_errors"]

    if llm != false and played != [] and failed == length(played) do
      Mix.raise("every LLM call failed (last: #{List.last(played)["llm_error"]})")
    end
  end

  @doc """
  Reads a daily-dialogue file (the seed's format, see the moduledoc). Errors name the file and
  what is wrong with it.
  """
  @spec load_dialogue(Path.t()) :: {:ok, dialogue()} | {:error, String.t()}
  def load_dialogue(path) do
    with {:ok, body} <- read(path),
         {:ok, json} <- decode(path, body) do
      parse_dialogue(path, json)
    end
  end

  defp read(path) do
    case File.read(path) do
      {:ok, body} -> {:ok, body}
      {:error, reason} -> {:error, "cannot read dialogue #{path}: #{:file.format_error(reason)}"}
    end
  end

  defp decode(path, body) do
    case SoulMem.JSON.decode(body) do
      {:ok, json} -> {:ok, json}
      {:error, _} -> {:error, "dialogue #{path} is not valid JSON"}
    end
  end

  defp parse_dialogue(path, %{"conversations" => conversations} = json)
       when is_list(conversations) do
    messages =
      conversations
      |> Enum.with_index(1)
      |> Enum.reduce_while({:ok, []}, fn
        {%{"user_message" => text}, _i}, {:ok, acc} when is_binary(text) and text != "" ->
          if String.trim(text) == "",
            do: {:halt, {:error, "conversations[#{length(acc) + 1}]: blank user_message"}},
            else: {:cont, {:ok, [text | acc]}}

        {other, i}, _ ->
          {:halt,
           {:error,
            "conversations[#{i}] needs a non-empty string user_message, " <>
              "got: #{inspect(other, limit: 5, printable_limit: 80)}"}}
      end)

    with {:ok, reversed} <- messages,
         :ok <- non_empty(reversed),
         {:ok, name} <- optional_string(json, "name", Path.basename(path, ".json")),
         {:ok, role} <- optional_string(json, "role", nil) do
      {:ok, %{name: name, role: role, messages: Enum.reverse(reversed)}}
    else
      {:error, message} -> {:error, "malformed dialogue #{path}: #{message}"}
    end
  end

  defp parse_dialogue(path, _json),
    do:
      {:error,
       "malformed dialogue #{path}: expected an object with a \"conversations\" list " <>
         "of {\"user_message\": ...}"}

  defp non_empty([]), do: {:error, "conversations is empty"}
  defp non_empty(_), do: :ok

  defp optional_string(json, key, default) do
    case Map.get(json, key) do
      nil -> {:ok, default}
      value when is_binary(value) -> {:ok, value}
      other -> {:error, "#{key} must be a string, got: #{inspect(other, limit: 5)}"}
    end
  end

  ## Character

  defp start_character(source, opts) do
    name = opts[:character]

    cond do
      File.dir?(source) ->
        graph = Path.join(source, "graph.json")

        unless File.regular?(graph),
          do: Mix.raise("directory #{source} has no graph.json")

        start_from_graph(graph, name || Path.basename(Path.expand(source)))

      File.regular?(source) ->
        start_from_graph(source, name || default_name(source))

      String.ends_with?(source, ".json") or String.contains?(source, "/") ->
        Mix.raise("no graph file at #{source}")

      true ->
        if name, do: Mix.raise("--character only applies to a graph file")
        start_stored(source, opts[:data_dir])
    end
  end

  defp default_name(path) do
    path = Path.expand(path)

    if Path.basename(path) == "graph.json",
      do: path |> Path.dirname() |> Path.basename(),
      else: Path.basename(path, ".json")
  end

  defp start_from_graph(graph, name) do
    graph = Path.expand(graph)

    case SoulMem.ensure_started(name, graph: graph, persist: false) do
      {:ok, pid} -> {name, pid, graph, await_loaded!(name, pid)}
      {:error, reason} -> Mix.raise("cannot start #{name} from #{graph}: #{inspect(reason)}")
    end
  end

  defp start_stored(id, data_dir) do
    started =
      cond do
        pid = SoulMem.whereis(id) ->
          {:ok, pid}

        SoulMem.stored?(id, data_dir) ->
          SoulMem.ensure_started(id, persist: true, data_dir: data_dir)

        true ->
          Mix.raise(
            "no character #{id}: it is not running and has no store in #{data_dir || "the data directory"} " <>
              "(pass a graph.json, or --data-dir)"
          )
      end

    case started do
      {:ok, pid} ->
        info = await_loaded!(id, pid)

        if node_count(info) == 0 do
          Mix.raise("character #{id} has no memories: pass a graph.json instead")
        end

        {id, pid, nil, info}

      {:error, reason} ->
        Mix.raise("cannot start character #{id}: #{inspect(reason)}")
    end
  end

  defp node_count(%{stats: %{nodes: nodes}}), do: nodes
  defp node_count(_info), do: 0

  # Loading and embedding run in the character's handle_continue; a graph that fails to load
  # stops the character, which shows up as a failed first call.
  defp await_loaded!(name, pid) do
    ref = Process.monitor(pid)

    case SoulMem.info(pid, 600_000) do
      {:ok, info} ->
        Process.demonitor(ref, [:flush])
        info

      {:error, _} ->
        reason =
          receive do
            {:DOWN, ^ref, :process, _, reason} -> reason
          after
            1_000 -> :not_running
          end

        Mix.raise("character #{name} did not load: #{inspect(reason)}")
    end
  end

  ## Turns

  defp llm_opts(opts) do
    if opts[:no_llm] do
      false
    else
      for {flag, key} <- @llm_flags, Keyword.has_key?(opts, flag), do: {key, opts[flag]}
    end
  end

  defp describe_llm(false), do: "off (--no-llm)"

  defp describe_llm(llm) do
    config = SoulMem.LLM.Config.merge(SoulMem.LLM.Config.from_env(), llm)

    case config.base_url do
      url when is_binary(url) and url != "" -> "#{config.model || "default"} at #{url}"
      _ -> "not configured (recall only)"
    end
  end

  @doc """
  Plays one turn: `SoulMem.Chat.turn/3` for `text` on the running character `pid`, timed, as a
  JSON-ready map with the queries derived from the text, the recalled memories and actions
  (id, stage, score, seeds, content), the rendered context, the reply or the LLM error and the
  latency in milliseconds.
  """
  @spec play_turn(
          pid() | String.t(),
          pos_integer(),
          String.t(),
          keyword() | false,
          String.t() | nil
        ) ::
          {:ok, turn_trace()} | {:error, term()}
  def play_turn(character, index, text, llm, partner \\ nil) do
    started = System.monotonic_time(:microsecond)

    # The dialogue's role tells the LLM who is talking to the character.
    with {:ok, turn} <-
           SoulMem.Chat.turn(character, text, timeout: 120_000, llm: llm, partner: partner) do
      elapsed = System.monotonic_time(:microsecond) - started

      {:ok,
       %{
         "turn" => index,
         "user" => text,
         "queries" => SoulMem.text_queries(text),
         "memories" => Enum.map(turn.recall.memories, &item/1),
         "actions" => Enum.map(turn.recall.actions, &item/1),
         "context" => turn.recall.context,
         "reply" => turn.reply,
         "llm_error" => llm_error(turn.llm_error),
         "latency_ms" => Float.round(elapsed / 1000, 1)
       }}
    end
  end

  defp item(item) do
    %{
      "id" => item.id,
      "kind" => Map.get(item, :kind),
      "stage" => item.stage,
      "score" => item.score / 1,
      "seeds" => Map.get(item, :seeds, []),
      "channels" => Map.get(item, :channels, []),
      "path" => Map.get(item, :path, []),
      "content" => item.content
    }
  end

  defp llm_error(nil), do: nil
  defp llm_error(:not_configured), do: "not_configured"
  defp llm_error(reason), do: inspect(reason, limit: 20, printable_limit: 300)

  @doc "The printed form of one played turn (see `play_turn/5`)."
  @spec format_turn(turn_trace()) :: String.t()
  def format_turn(turn) do
    queries =
      for q <- turn["queries"] do
        "  [p#{q["priority"]}] #{describe_query(q)}"
      end

    memories =
      for m <- turn["memories"] do
        "  [#{m["stage"]} #{score(m["score"])}] #{m["id"]}: #{String.slice(m["content"], 0, 60)}" <>
          seeds(m["seeds"])
      end

    actions =
      for a <- turn["actions"] do
        "  [#{a["stage"]} #{score(a["score"])}] #{a["id"]}: #{String.slice(a["content"], 0, 60)}"
      end

    reply =
      cond do
        is_binary(turn["reply"]) -> "回复> " <> turn["reply"]
        turn["llm_error"] in [nil, "not_configured"] -> "回复> (no LLM)"
        true -> "回复> (LLM error: #{turn["llm_error"]})"
      end

    Enum.join(
      ["", "── turn #{turn["turn"]} (#{turn["latency_ms"]} ms)", "用户> " <> turn["user"]] ++
        ["queries:" | queries] ++
        ["recalled:" | none(memories)] ++ ["actions:" | none(actions)] ++ [reply],
      "\n"
    )
  end

  defp describe_query(%{"variant" => variant} = q) when is_map(variant) do
    tags = Enum.join(Map.get(q, "tag", []), ",")

    body =
      case Map.to_list(variant) do
        [{"Semantic", units}] when is_list(units) ->
          "Semantic " <> Enum.map_join(units, " + ", &Map.get(&1, "concept_identifier", ""))

        [{kind, value}] ->
          "#{kind} " <> String.slice(compact(value), 0, 60)

        _ ->
          String.slice(compact(variant), 0, 60)
      end

    if tags == "", do: body, else: "#{body}  (tags: #{tags})"
  end

  defp describe_query(q), do: String.slice(compact(q), 0, 80)

  defp compact(value) when is_binary(value), do: value
  defp compact(value), do: SoulMem.JSON.encode!(value)

  defp none([]), do: ["  (none)"]
  defp none(lines), do: lines

  defp seeds([]), do: ""
  defp seeds(list), do: "  ← " <> Enum.join(Enum.take(list, 3), ", ")

  defp score(value), do: :erlang.float_to_binary(value / 1, decimals: 3)

  ## Trace

  @doc """
  The JSON trace of a run: `dialogue` (name, file, role), `character`, `graph` (path or
  `null` for a stored character), `llm` (`model`, `base_url`, or `null` when off), `turns`
  (see `play_turn/5`) and `summary` (turn count, replies, LLM errors, total and mean turn
  latency, recalled memories per stage).
  """
  @spec trace(%{
          dialogue: dialogue(),
          dialogue_path: Path.t(),
          character: String.t(),
          graph: Path.t() | nil,
          llm: keyword() | false,
          turns: [turn_trace()]
        }) :: map()
  def trace(run) do
    turns = run.turns
    latencies = Enum.map(turns, & &1["latency_ms"])

    stages =
      turns
      |> Enum.flat_map(& &1["memories"])
      |> Enum.frequencies_by(& &1["stage"])

    %{
      "dialogue" => %{
        "name" => run.dialogue.name,
        "file" => run.dialogue_path,
        "role" => run.dialogue.role
      },
      "character" => run.character,
      "graph" => run.graph,
      "llm" => llm_trace(run.llm),
      "turns" => turns,
      "summary" => %{
        "turns" => length(turns),
        "replies" => Enum.count(turns, &is_binary(&1["reply"])),
        "llm_errors" =>
          Enum.count(turns, &(&1["llm_error"] != nil and &1["llm_error"] != "not_configured")),
        "total_ms" => Float.round(Enum.sum(latencies) / 1, 1),
        "mean_turn_ms" =>
          if(turns == [], do: nil, else: Float.round(Enum.sum(latencies) / length(turns), 1)),
        "memories_by_stage" => stages
      }
    }
  end

  defp llm_trace(false), do: nil

  defp llm_trace(llm) do
    config = SoulMem.LLM.Config.merge(SoulMem.LLM.Config.from_env(), llm)

    if is_binary(config.base_url) and config.base_url != "" do
      %{
        "base_url" => config.base_url,
        "model" => config.model,
        "temperature" => config.temperature,
        "max_tokens" => config.max_tokens
      }
    end
  end

  defp write_trace!(path, trace) do
    path = Path.expand(path)

    with :ok <- File.mkdir_p(Path.dirname(path)),
         :ok <- File.write(path, SoulMem.JSON.encode!(trace) <> "\n") do
      :ok
    else
      {:error, reason} ->
        Mix.raise("cannot write trace #{path}: #{:file.format_error(reason)}")
    end
  end

  defp summary_line(%{"summary" => s}) do
    "#{s["turns"]} turns, #{s["replies"]} replies, #{s["llm_errors"]} LLM errors, " <>
      "mean turn #{s["mean_turn_ms"]} ms, memories by stage #{inspect(s["memories_by_stage"])}"
  end
end

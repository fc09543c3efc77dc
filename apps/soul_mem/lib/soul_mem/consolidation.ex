defmodule SoulMem.Consolidation do
  @moduledoc """
  Consolidation (巩固): the cumulative summary (and the window still held)
  becomes typed memory nodes, from the character's point of view, in one
  all-or-nothing change of the graph.

  `run/2` does, for one snapshot of a character (`t:SoulMem.Maintenance.snapshot/0`):

    1. picks the most frequently recalled notes since the last consolidation
       (Hebbian frequency f = n / T over the snapshot's records, top-k, in
       Rust) and offers them to the LLM as link targets;
    2. asks the LLM (`SoulMem.LLM.chat/2` with a strict `response_format`
       JSON Schema, `SoulMem.Consolidation.Extraction.schema/0`) for notes and
       links, validates every field strictly and retries up to `:retries`
       times (default 3) with the problems fed back; after that it gives up
       and writes nothing;
    3. applies the change set with `SoulMem.Native.engine_consolidate/3` under
       the graph's write lock: dedupe/merge of Semantic notes (normalised
       names, then embedding similarity), links, Hebbian links to the active
       notes, LTP/LTD, pattern induction (≥ k specific situations sharing a
       participant / location / event, by structured fields and embedding) with
       habits normalised by sum, and a re-index so the next recall finds the
       new notes. A change set the Rust side refuses changes nothing.

  Options (`run/2`, also read from `config :soul_mem, :consolidation`):

    * `:retries` — extra LLM attempts on invalid output (default 3);
    * `:max_tokens` — answer budget (default 2048), `:temperature` (0.2);
    * `:json_mode` — `:json_schema` (default) or `:json_object` for servers
      without json_schema support (see `SoulMem.LLM.chat/2`);
    * `:config` — a map of `soul_mem_core::consolidate::ConsolidateConfig`
      fields (string or atom keys), e.g. `%{top_k: 5, pattern_min_support: 3}`;
    * `:llm` — options for `SoulMem.LLM.chat/2` (default: the snapshot's);
    * `:now` — the consolidation time (default now);
    * `:on_apply` — a function called after a change set was applied, with
      `%{change: json, config: json, report: map}`: the exact JSON handed to
      the core and its report (`mix soul.consolidate --dump-changes` uses it
      to write replayable cases).
  """

  alias SoulMem.{Error, JSON, Memory, Native, Window}
  alias SoulMem.Consolidation.Extraction

  @run_opts [
    :llm,
    :now,
    :on_apply,
    retries: 3,
    max_tokens: 2048,
    temperature: 0.2,
    json_mode: :json_schema,
    config: %{}
  ]

  @typedoc "What one successful consolidation did (the Rust report, decoded)."
  @type result :: %{
          summary: String.t(),
          records_until: DateTime.t() | nil,
          created: [String.t()],
          merged: [String.t()],
          linked: non_neg_integer(),
          induced: [String.t()],
          attempts: pos_integer(),
          report: map()
        }

  @type error_reason ::
          {:invalid_output, [String.t()]}
          | {:llm, SoulMem.LLM.error_reason()}
          | Error.t()

  @doc """
  Consolidates the snapshot's summary and window into its memory. Returns
  `{:ok, :empty}` when the summary and the window hold nothing,
  `{:ok, result}` after the graph was changed, `{:error, reason}` when
  nothing was written.
  """
  @spec run(map(), keyword()) :: {:ok, result() | :empty} | {:error, error_reason()}
  def run(%{memory: %Memory{} = memory, window: %Window{} = window} = snapshot, opts \\ []) do
    opts =
      :soul_mem
      |> Application.get_env(:consolidation, [])
      |> Keyword.merge(opts)
      |> Keyword.validate!(@run_opts)

    summary = String.trim(Window.summary(window))
    messages = Window.visible(window)
    records = Map.get(snapshot, :records, %{})
    now = opts[:now] || DateTime.utc_now()
    config = config_json(opts[:config], memory.character)

    if summary == "" and messages == [] do
      {:ok, :empty}
    else
      with {:ok, active} <- candidates(memory, records, config),
           prompt = prompt(memory.character, summary, messages, active),
           existing = Map.new(active, &{&1["readable_id"], &1["kind"]}),
           {:ok, change, attempts} <- extract(prompt, existing, now, snapshot, opts, config) do
        change =
          Map.merge(change, %{
            "at" => DateTime.to_iso8601(now),
            "happened_at" => happened_at(messages, now),
            "records" => encode_records(records)
          })

        with {:ok, change_json} <- encode(change),
             {:ok, config_json} <- encode(config),
             {:ok, report} <- apply_changes(memory, change_json, config_json) do
          if on_apply = opts[:on_apply],
            do: on_apply.(%{change: change_json, config: config_json, report: report})

          {:ok, result(summary, records, report, attempts)}
        end
      end
    end
  end

  @doc """
  The `top_k` most frequently recalled notes among `records`
  (`%{note_id => [DateTime]}`): maps with `"readable_id"`, `"kind"`,
  `"text"`, `"retrievals"` and `"frequency"` (f = n / T per hour).
  `config` is a config map or its JSON.
  """
  @spec candidates(Memory.t(), %{String.t() => [DateTime.t()]}, map() | String.t()) ::
          {:ok, [map()]} | {:error, Error.t()}
  def candidates(%Memory{ref: ref}, records, config \\ %{}) do
    with {:ok, records_json} <- encode(encode_records(records)),
         {:ok, config_json} <- encode(config),
         {:ok, json} <-
           Error.from_native(Native.engine_consolidate_candidates(ref, records_json, config_json)) do
      {:ok, JSON.decode!(json)}
    end
  end

  @doc """
  Applies a change set (map in the shape of `soul_mem_core::consolidate::ChangeSet`:
  `"at"`, `"happened_at"`, `"notes"`, `"links"`, `"records"`, or its JSON) all or
  nothing; returns the decoded report.
  """
  @spec apply_changes(Memory.t(), map() | String.t(), map() | String.t()) ::
          {:ok, map()} | {:error, Error.t()}
  def apply_changes(%Memory{ref: ref}, change, config \\ %{}) do
    with {:ok, change_json} <- encode(change),
         {:ok, config_json} <- encode(config),
         {:ok, json} <-
           Error.from_native(Native.engine_consolidate(ref, change_json, config_json)) do
      {:ok, JSON.decode!(json)}
    end
  end

  @doc """
  Groups of Semantic notes that share a normalised name (readable ids) —
  duplicates consolidation must not create. `[]` for a clean graph.
  """
  @spec duplicates(Memory.t()) :: {:ok, [[String.t()]]} | {:error, Error.t()}
  def duplicates(%Memory{ref: ref}) do
    with {:ok, json} <- Error.from_native(Native.graph_duplicate_semantics(ref)),
         do: {:ok, JSON.decode!(json)}
  end

  @doc """
  The extraction prompt: the character's summary, the window (as 对方 / 我)
  and the active memories it may link to, from the character's point of view.
  """
  @spec prompt(String.t(), String.t(), [Window.message()], [map()]) :: [
          SoulMem.LLM.chat_message()
        ]
  def prompt(character, summary, messages, active) do
    system = """
    你在帮角色「#{character}」整理记忆。请站在#{character}自己的视角（“我”就是#{character}），\
    把下面这段对话里值得长期记住的内容拆成记忆节点：
    - semantic：我知道的人、物、概念或事实。content 是名称，aliases 是别名，concept_type 为 entity（具体的人/物/地点）或 abstract（抽象概念），description 是一句话描述。
    - specific_situation：我亲身经历的一件具体的事。narrative 用第一人称叙述；time 是发生时间（ISO 8601，不知道就写空字符串）；尽量填写 location、participants、emotions、events；events 的 initiator 写“我”表示我自己做的事。
    - abstract_situation：从多次经历中看出的模式，facet 为 participant / location / event / environment。
    - procedure：我的习惯、口癖或常有的反应，content 是动作，action_type 为 speak / think / skill。
    只记重要的、印象深刻的、反复出现的；琐事不记；不要编造对话里没有的信息。同一个人或物只写一个 semantic 节点。
    links 把节点联系起来：from / to 写节点的 key，或“已有记忆”里方括号中的 id；type 为 relation（关系，relation 写动词，strength 是把握 0~1）、trigger（情境 → 习惯，strength 是概率）或 instance_of（具体情境 → 抽象情境）。
    key 只用字母、数字、下划线或短横线。只输出一个 JSON 对象：{"notes": [...], "links": [...]}。
    """

    active_lines =
      case active do
        [] -> "（无）"
        list -> Enum.map_join(list, "\n", &"- [#{&1["readable_id"]}] #{&1["text"]}")
      end

    user =
      Enum.join(
        [
          "【对话摘要】",
          if(summary == "", do: "（无）", else: summary),
          "",
          "【最近的对话】",
          if(messages == [], do: "（无）", else: Enum.map_join(messages, "\n", &line/1)),
          "",
          "【已有记忆（可用 id 关联）】",
          active_lines
        ],
        "\n"
      )

    [%{role: "system", content: String.trim(system)}, %{role: "user", content: user}]
  end

  defp line(%{role: :user, text: text}), do: "对方：" <> text
  defp line(%{role: :assistant, text: text}), do: "我：" <> text

  ## LLM round trips

  defp extract(prompt, existing, now, snapshot, opts, config) do
    llm =
      (opts[:llm] || Map.get(snapshot, :llm, []))
      |> Keyword.merge(
        json_schema: Extraction.schema(),
        json_mode: opts[:json_mode],
        max_tokens: opts[:max_tokens],
        temperature: opts[:temperature]
      )

    with {:ok, limits} <- limits(config),
         do: attempt(prompt, existing, now, llm, limits, 1, opts[:retries] + 1)
  end

  defp attempt(prompt, existing, now, llm, limits, n, max) do
    with {:ok, %{content: content}} <- chat(prompt, llm) do
      case decode_and_validate(content, existing, now, limits) do
        {:ok, change} ->
          {:ok, change, n}

        {:error, problems} when n < max ->
          # Feed the problems back: small models fix a named field far more often than they
          # get a blind retry right.
          feedback = [
            %{role: "assistant", content: String.slice(content, 0, 4000)},
            %{
              role: "user",
              content:
                "上面的 JSON 无效：\n" <>
                  Enum.map_join(problems, "\n", &("- " <> &1)) <>
                  "\n请改正后重新输出完整的 JSON 对象。"
            }
          ]

          attempt(prompt ++ feedback, existing, now, llm, limits, n + 1, max)

        {:error, problems} ->
          {:error, {:invalid_output, problems}}
      end
    end
  end

  defp chat(prompt, llm) do
    case SoulMem.LLM.client().chat(prompt, llm) do
      {:ok, _} = ok -> ok
      {:error, reason} -> {:error, {:llm, reason}}
    end
  end

  defp decode_and_validate(content, existing, now, limits) do
    case JSON.decode(strip_fence(content)) do
      {:ok, answer} -> Extraction.validate(answer, existing, now, limits)
      {:error, _} -> {:error, ["the answer is not valid JSON"]}
    end
  end

  # Some servers wrap JSON in a Markdown fence even in JSON mode.
  defp strip_fence(content) do
    content = String.trim(content)

    case Regex.run(~r/\A```(?:json)?\s*(.*?)\s*```\z/s, content) do
      [_, inner] -> inner
      nil -> content
    end
  end

  ## Helpers

  defp config_json(config, character) when is_map(config) do
    config = Map.new(config, fn {k, v} -> {to_string(k), v} end)
    names = Enum.uniq([character | Map.get(config, "self_names", [])])
    Map.put(config, "self_names", names)
  end

  # The limits the core enforces on a change set (defined there once), so an
  # extraction answer past them is sent back to the LLM rather than refused later.
  defp limits(config) do
    with {:ok, effective} <- Error.from_native(Native.consolidate_config(config)) do
      {:ok,
       [
         max_notes: effective["max_notes"],
         max_links: effective["max_links"],
         max_text: effective["max_text_chars"],
         max_list: effective["max_list_len"]
       ]}
    end
  end

  defp happened_at([], now), do: DateTime.to_iso8601(now)

  defp happened_at(messages, now) do
    earliest = messages |> Enum.map(& &1.at) |> Enum.min(DateTime)

    earliest
    |> then(&if DateTime.compare(&1, now) == :gt, do: now, else: &1)
    |> DateTime.to_iso8601()
  end

  defp encode_records(records) do
    Map.new(records, fn {id, times} -> {id, Enum.map(times, &DateTime.to_iso8601/1)} end)
  end

  defp records_until(records) do
    records |> Map.values() |> List.flatten() |> Enum.max(DateTime, fn -> nil end)
  end

  defp result(summary, records, report, attempts) do
    induced = Enum.map(report["induced"], & &1["id"]) ++ Enum.map(report["habits"], & &1["id"])

    %{
      summary: summary,
      records_until: records_until(records),
      created: report["created"],
      merged: report["merged"] |> Enum.map(& &1["into"]) |> Enum.uniq(),
      linked: report["linked"],
      induced: Enum.uniq(induced),
      attempts: attempts,
      report: report
    }
  end

  defp encode(term) when is_binary(term), do: {:ok, term}

  defp encode(term), do: JSON.encode_arg(term)
end

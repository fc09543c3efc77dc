defmodule SoulMem.Context do
  @moduledoc """
  Renders a recall result as the Chinese context block given to the
  role-play LLM. The only place that turns memories into prompt text.

  Sections, in order (a section without content is left out):

    * 相关记忆 — core memories first (always shown, e.g. the self node
      `sem_self`), then the recalled memories, by score;
    * 当前行为倾向 — the recalled actions (procedures): what the character
      tends to do now;
    * 最近对话 — the window (including messages waiting for their summary);
    * 对话摘要 — the cumulative summary.

  Every item renders its `content` field (Procedure and AbstractSituation
  nodes included). The templates are configurable, per call (`:templates`)
  or in the application env (`config :soul_mem, SoulMem.Context, templates:
  %{...}`); keys and defaults are in `default_templates/0`. Placeholders:
  `{items}` in section templates, `{content}`/`{id}`/`{kind}` in item
  templates, `{text}` in message templates.

  ## Budget

  The block has a size budget in bytes (`:max_bytes`, default app env
  `:context_max_bytes`, 24,000 — about 8,000 Chinese characters). When
  everything does not fit, the least relevant parts are left out first:
  what is kept is chosen in order of relevance — core memories, the newest
  4 messages, the summary, the best 3 memories and the best action; then
  the other memories and actions by score; then older messages, newest
  first — and rendered in the usual section order. A part that does not fit
  is skipped, smaller later ones may still fit.
  """

  @default_templates %{
    memories: "【相关记忆】\n{items}",
    actions: "【当前行为倾向】\n{items}",
    dialogue: "【最近对话】\n{items}",
    summary: "【对话摘要】\n{items}",
    item: "- {content}",
    action: "- {content}",
    user: "用户：{text}",
    assistant: "角色：{text}",
    separator: "\n\n"
  }

  @typedoc "A recalled memory: at least `:id` and `:content`."
  @type item :: %{required(:content) => String.t(), optional(atom()) => term()}

  @type input :: %{
          optional(:core) => [item()],
          optional(:memories) => [item()],
          optional(:actions) => [item()],
          optional(:window) => [SoulMem.Window.message()],
          optional(:summary) => String.t()
        }

  @doc "The default templates."
  @spec default_templates() :: %{atom() => String.t()}
  def default_templates, do: @default_templates

  @default_max_bytes 24_000
  # The first tier of the budget: the newest messages and best memories and
  # actions that come right after the core memories.
  @newest_messages 4
  @best_memories 3
  @best_actions 1
  # Bytes set aside for the four section headers and the separators between them.
  @section_allowance 4 * 64

  @doc """
  Renders the context block. Options: `:templates` (a map overriding some of
  `default_templates/0`), `:max_bytes` (the budget, see "Budget").
  """
  @spec render(input(), keyword()) :: String.t()
  def render(input, opts \\ []) when is_map(input) do
    opts = Keyword.validate!(opts, [:max_bytes, templates: %{}])
    configured = Application.get_env(:soul_mem, __MODULE__, []) |> Keyword.get(:templates, %{})
    t = @default_templates |> Map.merge(configured) |> Map.merge(opts[:templates] || %{})

    max_bytes =
      opts[:max_bytes] || Application.get_env(:soul_mem, :context_max_bytes, @default_max_bytes)

    core = dedupe(Map.get(input, :core, []))
    core_ids = MapSet.new(core, &key/1)
    memories = input |> Map.get(:memories, []) |> dedupe() |> Enum.reject(&(key(&1) in core_ids))
    actions = dedupe(Map.get(input, :actions, []))
    window = Map.get(input, :window, [])
    summary = Map.get(input, :summary, "") || ""

    lines = %{
      core: Enum.map(core, &item(t.item, &1)),
      memories: Enum.map(memories, &item(t.item, &1)),
      actions: Enum.map(actions, &item(t.action, &1)),
      dialogue: Enum.map(window, &message(t, &1)),
      summary: if(String.trim(summary) == "", do: [], else: [summary])
    }

    kept = within_budget(lines, max_bytes)

    [
      section(t.memories, kept.core ++ kept.memories),
      section(t.actions, kept.actions),
      section(t.dialogue, kept.dialogue),
      section(t.summary, kept.summary)
    ]
    |> Enum.reject(&is_nil/1)
    |> Enum.join(t.separator)
  end

  # Picks lines in order of relevance while they fit, then puts each
  # section's kept lines back in their own order. Section headers and
  # separators are counted as a fixed allowance.
  defp within_budget(lines, max_bytes) do
    indexed = Map.new(lines, fn {section, ls} -> {section, Enum.with_index(ls)} end)
    dialogue = Enum.reverse(indexed.dialogue)

    order =
      Enum.map(indexed.core, &{:core, &1}) ++
        Enum.map(Enum.take(dialogue, @newest_messages), &{:dialogue, &1}) ++
        Enum.map(indexed.summary, &{:summary, &1}) ++
        Enum.map(Enum.take(indexed.memories, @best_memories), &{:memories, &1}) ++
        Enum.map(Enum.take(indexed.actions, @best_actions), &{:actions, &1}) ++
        Enum.map(Enum.drop(indexed.memories, @best_memories), &{:memories, &1}) ++
        Enum.map(Enum.drop(indexed.actions, @best_actions), &{:actions, &1}) ++
        Enum.map(Enum.drop(dialogue, @newest_messages), &{:dialogue, &1})

    empty = Map.new(lines, fn {section, _} -> {section, []} end)

    {chosen, _used} =
      Enum.reduce(order, {empty, @section_allowance}, fn {section, {line, i}}, {acc, used} ->
        size = byte_size(line) + 1

        if used + size <= max_bytes,
          do: {Map.update!(acc, section, &[{i, line} | &1]), used + size},
          else: {acc, used}
      end)

    Map.new(chosen, fn {section, picked} ->
      {section, picked |> Enum.sort() |> Enum.map(&elem(&1, 1))}
    end)
  end

  defp key(item), do: Map.get(item, :id) || Map.get(item, :content)

  defp section(_template, []), do: nil
  defp section(template, lines), do: fill(template, %{"items" => Enum.join(lines, "\n")})

  defp item(template, item) do
    fill(template, %{
      "content" => to_string(Map.get(item, :content, "")),
      "id" => to_string(Map.get(item, :id, "")),
      "kind" => to_string(Map.get(item, :kind, ""))
    })
  end

  defp message(t, %{role: role, text: text}) do
    fill(Map.fetch!(t, role), %{"text" => text})
  end

  defp fill(template, values) do
    Regex.replace(~r/\{(\w+)\}/, template, fn whole, key -> Map.get(values, key, whole) end)
  end

  defp dedupe(items) do
    items
    |> Enum.reject(&(Map.get(&1, :content) in [nil, ""]))
    |> Enum.uniq_by(&key/1)
  end
end

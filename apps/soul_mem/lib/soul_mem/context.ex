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

  @doc """
  Renders the context block. Options: `:templates` (a map overriding some of
  `default_templates/0`).
  """
  @spec render(input(), keyword()) :: String.t()
  def render(input, opts \\ []) when is_map(input) do
    opts = Keyword.validate!(opts, templates: %{})
    configured = Application.get_env(:soul_mem, __MODULE__, []) |> Keyword.get(:templates, %{})
    t = @default_templates |> Map.merge(configured) |> Map.merge(Keyword.fetch!(opts, :templates))

    memories = dedupe(Map.get(input, :core, []) ++ Map.get(input, :memories, []))
    actions = dedupe(Map.get(input, :actions, []))
    window = Map.get(input, :window, [])
    summary = Map.get(input, :summary, "") || ""

    [
      section(t.memories, Enum.map(memories, &item(t.item, &1))),
      section(t.actions, Enum.map(actions, &item(t.action, &1))),
      section(t.dialogue, Enum.map(window, &message(t, &1))),
      section(t.summary, if(String.trim(summary) == "", do: [], else: [summary]))
    ]
    |> Enum.reject(&is_nil/1)
    |> Enum.join(t.separator)
  end

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
    |> Enum.uniq_by(&(Map.get(&1, :id) || Map.get(&1, :content)))
  end
end

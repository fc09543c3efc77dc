defmodule SoulMem.Chat do
  @moduledoc """
  One conversational turn with a character — the only orchestration of one, used by the
  terminal chat, the playtest and the web's `turn` operation: push the user's message and
  recall memories for it (one call), and — when an LLM is configured — ask the LLM for the
  character's reply with the rendered context, then push the reply into the window too.
  Without an LLM the turn still recalls (SoulMem's own job); the reply is `nil`.

  Each step is reported to `:on_event` as it happens: `{:recalled, recall}`, then (with
  `stream: true`) `{:reply_delta, text}` for each piece of the reply as the LLM sends it,
  then `{:reply, text}` and `{:reply_stored, :ok | {:error, reason}}`, or `{:reply_failed,
  reason}`.

  In a group chat (`:scene`, the other characters present) those characters witness the
  user's message and the reply too (`SoulMem.Scene`), each as a line of its speaker.
  """

  @type turn :: %{recall: SoulMem.recall_result(), reply: String.t() | nil, llm_error: term()}

  @doc """
  Runs one turn for `character` (a running character id or pid).

  Options: `:llm` — keyword options for `SoulMem.LLM.chat/2` (default `[]`: application
  config), `false` to skip the reply; `:timeout` — character call timeout (default 30 s: the
  first recall may embed the graph); `:partner` — who is talking to the character (a name;
  small models confuse who did what without it); `:on_event` — a 1-arity function called
  with each step's event (see the moduledoc); `:stream` — stream the reply (default
  `false`); `:scene` — ids of the other characters present, who witness the turn (running
  characters; default none).
  """
  @spec turn(String.t() | pid(), String.t(), keyword()) :: {:ok, turn()} | {:error, term()}
  def turn(character, text, opts \\ []) when is_binary(text) do
    opts =
      Keyword.validate!(opts, [
        :partner,
        scene: [],
        llm: [],
        timeout: 30_000,
        stream: false,
        on_event: fn _ -> :ok end
      ])

    if String.trim(text) == "" do
      {:error, :empty_text}
    else
      message = %{role: :user, text: text, at: DateTime.utc_now()}

      with {:ok, recall} <-
             SoulMem.recall(character, %{messages: [message]}, timeout: opts[:timeout]) do
        opts[:on_event].({:recalled, recall})
        witness(opts, %{text: text, speaker: opts[:partner] || "user", at: message.at})
        {reply, llm_error} = reply(character, recall, text, opts)
        {:ok, %{recall: recall, reply: reply, llm_error: llm_error}}
      end
    end
  end

  defp reply(character, recall, text, opts) do
    if opts[:llm] == false,
      do: {nil, nil},
      else: llm_reply(character, recall, text, opts)
  end

  defp llm_reply(character, recall, text, opts) do
    messages = [
      %{role: :system, content: system_prompt(recall, opts[:partner])},
      %{role: :user, content: text}
    ]

    llm =
      if opts[:stream],
        do: Keyword.put(opts[:llm], :on_delta, &opts[:on_event].({:reply_delta, &1})),
        else: opts[:llm]

    case SoulMem.LLM.client().chat(messages, llm) do
      {:ok, %{content: content}} ->
        opts[:on_event].({:reply, content})
        answer = %{role: :assistant, text: content, at: DateTime.utc_now()}

        opts[:on_event].(
          {:reply_stored, SoulMem.Character.push(character, answer, opts[:timeout])}
        )

        witness(opts, %{text: content, speaker: recall |> self_of() |> elem(0), at: answer.at})

        {content, nil}

      {:error, reason} ->
        opts[:on_event].({:reply_failed, reason})
        {nil, reason}
    end
  end

  # The other characters present hear the line; what they stored is reported.
  defp witness(opts, line) do
    if opts[:scene] != [],
      do: opts[:on_event].({:witnessed, SoulMem.Scene.witness(opts[:scene], line)})
  end

  defp self_of(recall) do
    Enum.find_value(recall.core, {"这个角色", nil}, fn item ->
      if item.id == "sem_self", do: self_description(item.content)
    end)
  end

  @doc """
  The system prompt for the character's reply — its persona: who it is (name and
  self-description from its self note, `sem_self`), who it is talking to (`partner`, when
  known) and the rendered context block (memories, behaviour tendencies, summary, recent
  turns).
  """
  @spec system_prompt(SoulMem.recall_result(), String.t() | nil) :: String.t()
  def system_prompt(recall, partner \\ nil) do
    {name, description} = self_of(recall)

    talking_to =
      if is_binary(partner) and partner != "",
        do: "正在和你说话的是#{partner}（对话里的“用户”就是#{partner}）。",
        else: ""

    about = if description, do: "关于你：#{description}\n", else: ""

    "你是#{name}。" <>
      talking_to <>
      "请始终以#{name}的身份、用第一人称和自然的口语回答，" <>
      "只使用下面的记忆与对话，不要编造记忆里没有的经历。\n" <> about <> "\n" <> recall.context
  end

  # The self note reads "名字：描述".
  defp self_description(content) do
    case String.split(content, "：", parts: 2) do
      [name, description] -> {name, String.trim(description)}
      [name] -> {name, nil}
    end
  end
end

defmodule SoulMem.Completion do
  @moduledoc """
  An OpenAI chat-completions request from a role-play frontend (SillyTavern,
  any OpenAI client) answered with the character's memory: the frontend's
  new turn goes into the character's window, memories are recalled for it,
  the memory context is put into the frontend's messages as a system
  message, and the request goes on to the configured LLM with the
  frontend's own sampling parameters; the answer comes back (streamed
  pieces to `:on_delta`) and is kept in the window.

  ## Which messages are new

  A frontend sends the whole chat every turn. The character's window already
  holds the turns it saw, so only what follows them is pushed: the window's
  newest message is looked up among the request's user/assistant messages
  from the end (role and exact text); what comes after it is new. When it is
  not there, the frontend took its last turn back:

    * *regenerate* — the request ends with the window's last user message
      and leaves out the reply after it: that reply is taken back;
    * *edit* — the request's last user message replaces the window's last
      user message (and its reply), when the message before it matches the
      window's message before those.

  Otherwise (a new chat, or a history the character never saw) only the
  request's trailing user messages (after its last assistant message) are
  pushed: the character does not swallow a history it did not live.

  ## Where the memory goes

  `:position` (default app env `:completion_context_position`, `:after`):
  `:before` the frontend's first system message, `:after` its leading system
  messages, or `{:depth, n}` — before the n-th message from the end (0 = at
  the end, after the last user message).
  """

  alias SoulMem.{Context, LLM}

  # Sampling parameters forwarded to the LLM as the frontend sent them.
  @forwarded ~w(temperature top_p max_tokens max_completion_tokens stop presence_penalty
                frequency_penalty seed logit_bias top_k min_p repetition_penalty typical_p)

  @max_messages 2_000

  @typedoc "A chat message as OpenAI clients send it (string keys)."
  @type message :: %{String.t() => term()}

  @type result :: %{
          content: String.t(),
          recall: SoulMem.recall_result(),
          pushed: non_neg_integer()
        }

  @doc """
  Answers `body` (a decoded chat-completions request: `"messages"` and
  sampling parameters) for `character`. Options: `:on_delta` (stream the
  answer), `:position`, `:timeout` (character calls), `:llm` (client options
  on top of the application env).

  Errors: `{:error, {:bad_request, message}}` for a request it cannot take
  (nothing is stored), the recall's errors, or `{:error, {:llm, reason}}`
  when the LLM fails (the new user turn is kept).
  """
  @spec run(String.t() | pid(), map(), keyword()) :: {:ok, result()} | {:error, term()}
  def run(character, body, opts \\ []) do
    opts = Keyword.validate!(opts, [:on_delta, :position, timeout: 30_000, llm: []])

    with {:ok, messages} <- messages(body),
         {:ok, params} <- params(body),
         {:ok, history} <- SoulMem.history(character),
         {:ok, question} <- last_user(messages),
         {retract, new} = new_turns(history.messages, messages),
         {:ok, recall} <- recall(character, new, retract, question, opts) do
      prompt = inject(messages, memory_block(recall), position(opts[:position]))

      llm =
        opts[:llm]
        |> Keyword.put(:params, params)
        |> then(&if opts[:on_delta], do: Keyword.put(&1, :on_delta, opts[:on_delta]), else: &1)

      case LLM.client().chat(prompt, llm) do
        {:ok, %{content: content}} ->
          reply = %{role: :assistant, text: content, at: DateTime.utc_now()}
          _ = SoulMem.Character.push(character, reply, opts[:timeout])
          {:ok, %{content: content, recall: recall, pushed: length(new)}}

        {:error, reason} ->
          {:error, {:llm, reason}}
      end
    end
  end

  @doc """
  Checks a request without running it: `:ok` or `{:error, {:bad_request,
  message}}` (what `run/3` would refuse before storing anything).
  """
  @spec check(map()) :: :ok | {:error, {:bad_request, String.t()}}
  def check(body) do
    with {:ok, messages} <- messages(body),
         {:ok, _params} <- params(body),
         {:ok, _question} <- last_user(messages),
         do: :ok
  end

  @doc """
  Which of `incoming` (the request's messages) are new to a window that
  holds `window` (`%{role, text}`, oldest first): `{retract, new}` — how many
  of the window's newest messages to take back, and the messages (`%{role,
  text}`) to push. See the moduledoc.
  """
  @spec new_turns([map()], [message()]) :: {non_neg_integer(), [map()]}
  def new_turns(window, incoming) do
    turns = for %{"role" => r, "content" => c} <- incoming, r in ["user", "assistant"], do: {r, c}
    seen = Enum.map(window, &{to_string(&1.role), &1.text})

    case {seen, last_index(turns, List.last(seen))} do
      {[], _} -> {0, trailing_user(turns)}
      {_, nil} -> taken_back(seen, turns)
      {_, i} -> {0, turns |> Enum.drop(i + 1) |> to_messages()}
    end
  end

  # The last user message of the window is the request's last message:
  # regenerate (drop the reply after it). The request's last user message
  # follows the window's message before its last user turn: edit.
  defp taken_back(seen, turns) do
    last_user = Enum.find_index(Enum.reverse(seen), &match?({"user", _}, &1))
    trailing = trailing_user(turns)

    cond do
      last_user != nil and List.last(turns) == Enum.at(seen, -(last_user + 1)) ->
        {last_user, []}

      last_user != nil and trailing != [] and
          before_last_user(turns) == Enum.at(seen, -(last_user + 2)) ->
        {last_user + 1, trailing}

      true ->
        {0, trailing}
    end
  end

  defp before_last_user(turns) do
    case Enum.split_while(Enum.reverse(turns), &match?({"user", _}, &1)) do
      {_users, [previous | _]} -> previous
      _ -> nil
    end
  end

  defp trailing_user(turns) do
    turns
    |> Enum.reverse()
    |> Enum.take_while(&match?({"user", _}, &1))
    |> Enum.reverse()
    |> to_messages()
  end

  defp last_index(_turns, nil), do: nil

  defp last_index(turns, turn) do
    turns
    |> Enum.with_index()
    |> Enum.reverse()
    |> Enum.find_value(fn {t, i} -> t == turn && i end)
  end

  defp to_messages(turns), do: for({r, c} <- turns, do: %{role: r, text: c})

  # The request must end with the user's turn: that is what is answered.
  defp last_user(messages) do
    case messages |> Enum.reject(&(&1["role"] == "system")) |> List.last() do
      %{"role" => "user", "content" => text} when text != "" -> {:ok, text}
      _ -> bad("the last message must be the user's (with text)")
    end
  end

  # Recalled for the user's last message, also when it is not pushed again
  # (a regenerate, or a retry after a failed answer).
  defp recall(character, new, retract, question, opts) do
    now = DateTime.utc_now()
    messages = Enum.map(new, &Map.put(&1, :at, now))

    SoulMem.recall(character, %{messages: messages, text: question},
      retract: retract,
      timeout: opts[:timeout]
    )
  end

  # The memories, habits and summary; the recent dialogue is the frontend's own.
  defp memory_block(recall) do
    Context.render(%{
      core: recall.core,
      memories: recall.memories,
      actions: recall.actions,
      window: [],
      summary: recall.summary
    })
  end

  @doc """
  `messages` with a system message holding `block` put at `position`
  (`:before`, `:after` or `{:depth, n}`; see the moduledoc). An empty block
  changes nothing.
  """
  @spec inject([message()], String.t(), :before | :after | {:depth, non_neg_integer()}) ::
          [map()]
  def inject(messages, "", _position), do: Enum.map(messages, &plain/1)

  def inject(messages, block, position) do
    memory = %{role: "system", content: "以下是你作为这个角色的记忆，回答时自然地用上：\n" <> block}
    messages = Enum.map(messages, &plain/1)

    index =
      case position do
        :before ->
          Enum.find_index(messages, &(&1.role == "system")) || 0

        :after ->
          Enum.find_index(messages, &(&1.role != "system")) || length(messages)

        {:depth, n} ->
          max(length(messages) - n, 0)
      end

    List.insert_at(messages, index, memory)
  end

  defp plain(%{"role" => role, "content" => content}), do: %{role: role, content: content}

  defp position(nil), do: Application.get_env(:soul_mem, :completion_context_position, :after)
  defp position(p), do: p

  ## Request checks

  defp messages(%{"messages" => messages}) when is_list(messages) and messages != [] do
    cond do
      length(messages) > @max_messages ->
        bad("at most #{@max_messages} messages")

      not Enum.all?(messages, &valid_message?/1) ->
        bad("every message needs a role (system, user or assistant) and text content")

      true ->
        {:ok, Enum.map(messages, &text_content/1)}
    end
  end

  defp messages(_body), do: bad("messages must be a non-empty list")

  defp valid_message?(%{"role" => role, "content" => content})
       when role in ["system", "user", "assistant"],
       do: is_binary(content) or text_parts?(content)

  defp valid_message?(_), do: false

  defp text_parts?(parts) when is_list(parts),
    do: Enum.all?(parts, &match?(%{"type" => "text", "text" => t} when is_binary(t), &1))

  defp text_parts?(_), do: false

  # Content given as parts ([{type: "text", text}]) is joined into one text.
  defp text_content(%{"content" => parts} = m) when is_list(parts),
    do: %{"role" => m["role"], "content" => Enum.map_join(parts, "", & &1["text"])}

  defp text_content(m), do: %{"role" => m["role"], "content" => m["content"]}

  defp params(body) do
    cond do
      Map.get(body, "n", 1) != 1 ->
        bad("n must be 1: a character answers once")

      Map.has_key?(body, "tools") or Map.has_key?(body, "functions") ->
        bad("tools are not supported")

      true ->
        {:ok, Map.take(body, @forwarded)}
    end
  end

  defp bad(message), do: {:error, {:bad_request, message}}
end

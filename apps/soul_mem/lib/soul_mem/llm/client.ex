defmodule SoulMem.LLM.Client do
  @moduledoc """
  What the runtime needs from an LLM — one chat completion — so the client
  can be swapped: `SoulMem.LLM` (any OpenAI-compatible endpoint over
  `:httpc`) by default, another module through the app env `:llm_client`
  (an in-process model, a recorder for tests). Summaries, forgetting
  revisions, consolidation and the chat turn all ask through
  `SoulMem.LLM.client/0`.
  """

  @typedoc "A chat message: `%{role: :system | :user | :assistant, content: String.t()}`."
  @type message :: %{role: atom() | String.t(), content: String.t()}

  @doc """
  One completion for `messages` with `opts` (`SoulMem.LLM.chat/2`'s
  options: model, endpoint, timeout, retries, JSON mode …).
  """
  @callback chat([message()], keyword()) ::
              {:ok, %{required(:content) => String.t(), optional(atom()) => term()}}
              | {:error, term()}

  @doc """
  Whether a chat with `opts` could be sent at all (an endpoint is configured):
  work that is only worth doing with an answer (a forgetting revision on the
  recall path) is skipped when it is not, instead of failing once per call.
  """
  @callback configured?(keyword()) :: boolean()
end

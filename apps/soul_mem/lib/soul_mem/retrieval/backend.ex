defmodule SoulMem.Retrieval.Backend do
  @moduledoc """
  What `SoulMem.recall/3` needs from retrieval: `SoulMem.Retrieval` (the
  engine's pipeline) in production, another module through the `:retrieval`
  option or app env (tests, experiments). A module that is not loaded counts
  as no retrieval: recall then returns the core memories only.
  """

  alias SoulMem.{Error, Memory}

  @typedoc """
  A recall: `text` (turned into sub-queries by the backend), seed-shaped
  `queries`, and the `short` context (`%{messages: [String.t()], summary:
  String.t()}`).
  """
  @type request :: %{
          optional(:text) => String.t() | nil,
          optional(:queries) => [map()],
          optional(:short) => %{messages: [String.t()], summary: String.t() | nil} | nil
        }

  @typedoc """
  Recalled items by list: `:memories`, `:actions`, `:self_knowledge`,
  `:core`. A memory item may carry `:forgetting`, its forgetting view (see
  `SoulMem.Retrieval.recall/3`).
  """
  @type result :: %{optional(atom()) => term()}

  @doc """
  Recalls for `request`. Options: `:config` (pipeline options of this
  recall, `nil` for the character's), `:forgetting` (forgetting parameter
  overrides to set, or `nil`), `:views` (attach forgetting views), `:now`.
  """
  @callback recall(Memory.t(), request(), keyword()) :: {:ok, result()} | {:error, Error.t()}

  @doc """
  Counts one retrieval of each note `ids` at `at` in the graph. Runs in the character's
  process after each recall that returned notes, so it also finishes what a recall leaves for
  after its answer (`SoulMem.Retrieval`: working memory's release over its cap).
  """
  @callback record(Memory.t(), [String.t()], DateTime.t()) ::
              {:ok, non_neg_integer()} | :ok | {:error, Error.t()}
end

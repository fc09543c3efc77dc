defmodule SoulMem.Embedding.Backend do
  @moduledoc """
  What a character needs from an embedder to make its graph searchable:
  `SoulMem.Embedding` (the e5 model, with the lexical hash embedder as its
  fallback) in production; a test may pass another through the character's
  `:embedding_module` option.
  """

  alias SoulMem.{Error, Memory}

  @doc "Loads the model unless it is loaded; its id."
  @callback ensure_loaded(keyword()) :: {:ok, String.t()} | {:error, Error.t()}

  @doc """
  Embeds every note of the graph (`embedder: :model | :hash`) and rebuilds
  its search index; progress goes to `progress:` as
  `{:soul_mem_embed_progress, done, total}`.
  """
  @callback embed_graph(Memory.t(), keyword()) :: {:ok, String.t()} | {:error, Error.t()}

  @doc "Computes the model vectors the cache lacks, ahead of `c:embed_graph/2`."
  @callback prefill(Memory.t(), keyword()) :: {:ok, non_neg_integer()} | {:error, Error.t()}
end

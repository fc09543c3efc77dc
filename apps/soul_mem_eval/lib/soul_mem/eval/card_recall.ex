defmodule SoulMem.Eval.CardRecall do
  @moduledoc """
  Does a character made from a SillyTavern card remember its lorebook? A
  card is imported (`SoulMem.Card`) into a fresh, unpersisted character and
  every enabled lorebook entry is asked about twice, as a user would in
  chat (`SoulMem.recall/3` with the message text): once with a question
  that uses one of its keys, once with a paraphrase that does not. A case
  hits when the entry's note is among the recalled memories.

  Queries file (`fixtures/cards/queries.json`): a list of
  `{"note", "enabled", "key_query", "paraphrase_query"}`; disabled entries
  must not come back as notes at all (they are skipped at import) and are
  only counted.
  """

  alias SoulMem.{Card, Characters, JSON, Memory}

  @typedoc "Hits of one kind of question."
  @type tally :: %{hits: non_neg_integer(), cases: non_neg_integer(), misses: [map()]}

  @doc """
  Runs the cards' questions. Options: `:embedder` (`:model` or `:hash`,
  default `:model`), `:timeout` (ms to wait for the graph's embedding,
  default 120 s). Returns the tallies by key and by paraphrase, with each
  miss's question and the memories it got instead.
  """
  @spec run(binary(), [map()], keyword()) ::
          {:ok, %{key: tally(), paraphrase: tally(), disabled: non_neg_integer(), report: map()}}
          | {:error, term()}
  def run(card, queries, opts \\ []) do
    opts = Keyword.validate!(opts, embedder: :model, timeout: 120_000)
    id = "card-recall-#{System.unique_integer([:positive])}"

    with {:ok, %{graph: graph, report: report}} <- Card.parse(card),
         {:ok, memory} <- Memory.import_json(id, graph),
         {:ok, pid} <-
           Characters.ensure_started(id,
             memory: memory,
             persist: false,
             embedder: opts[:embedder],
             idle_after: 600_000
           ) do
      try do
        {:ok, _} = SoulMem.info(pid, opts[:timeout])
        enabled = Enum.filter(queries, & &1["enabled"])

        {:ok,
         %{
           key: tally(pid, enabled, "key_query"),
           paraphrase: tally(pid, enabled, "paraphrase_query"),
           disabled: length(queries) - length(enabled),
           report: report
         }}
      after
        Characters.stop(pid)
      end
    end
  end

  defp tally(pid, cases, field) do
    results =
      for c <- cases do
        {:ok, recall} = SoulMem.recall(pid, %{text: c[field]}, forgetting: [enabled: false])
        ids = Enum.map(recall.memories, & &1.id)
        %{note: c["note"], query: c[field], hit: c["note"] in ids, got: Enum.take(ids, 5)}
      end

    %{
      hits: Enum.count(results, & &1.hit),
      cases: length(results),
      misses: Enum.reject(results, & &1.hit)
    }
  end

  @doc "Reads a queries file."
  @spec read_queries(Path.t()) :: {:ok, [map()]} | {:error, term()}
  def read_queries(path) do
    with {:ok, text} <- File.read(path),
         {:ok, list} when is_list(list) <- JSON.decode(text) do
      {:ok, list}
    else
      {:ok, _} -> {:error, :not_a_list}
      error -> error
    end
  end
end

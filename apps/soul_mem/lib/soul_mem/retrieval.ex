defmodule SoulMem.Retrieval do
  @moduledoc """
  Recall over a character's memory graph: fused similarity finds seed memories, weighted
  Personalized PageRank spreads from them, trigger→action links give behaviour tendencies
  (the seed's DefaultPipeline). Every item carries a trace: the stage that found it
  (`"Similarity"`, `"Ppr"`, `"Both"`, `"Action"`), its score and the seed memories it came from.

  Queries have the shape of the seed's Query JSON `sub_queries` (string keys):

      %{"priority" => 1, "tag" => ["小白"],
        "variant" => %{"Semantic" => [%{"concept_identifier" => "小白", "description" => ""}]}}

  Plain text becomes such queries without an LLM, see `text_queries/2`.
  The graph must be embedded first (`SoulMem.Embedding.embed_graph/2`).
  """

  alias SoulMem.{Error, JSON, Memory, Native}

  @doc "The configured retrieval module (app env `:retrieval`, default this one)."
  @spec backend() :: module()
  def backend, do: Application.get_env(:soul_mem, :retrieval, __MODULE__)

  @typedoc "A recalled item (string keys in `:memories`/`:actions`/`:core` lists are atoms)."
  @type item :: %{
          id: String.t(),
          uuid: String.t(),
          kind: String.t(),
          content: String.t(),
          score: float(),
          stage: String.t(),
          seeds: [String.t()],
          channels: [String.t()],
          path: [String.t()]
        }

  @type result :: %{
          memories: [item()],
          actions: [item()],
          self_knowledge: [item()],
          core: [item()]
        }

  @doc """
  Turns plain text into sub-queries: the whole text as a Situation narrative query plus one
  Semantic identifier query per jieba TF-IDF keyword (at most `max_keywords`, default 4).
  """
  @spec text_queries(String.t(), non_neg_integer()) :: [map()]
  def text_queries(text, max_keywords \\ 4)
      when is_binary(text) and is_integer(max_keywords) and max_keywords >= 0 do
    text |> Native.text_queries(max_keywords) |> JSON.decode!()
  end

  @doc """
  Segments text into words with jieba (HMM on).
  """
  @spec tokens(String.t()) :: [String.t()]
  def tokens(text) when is_binary(text), do: Native.text_tokens(text)

  @doc """
  Runs the pipeline for `queries`.

  Options: `:short` — `%{messages: [String.t()], summary: String.t() | nil}` (window and
  summary, handed to the ShortOnly stage); `:config` — pipeline options in the seed's config
  shape, as a map (string or atom keys) or a keyword list, nested the same way
  (`config: [similarity: [max_results: 10]]`); unknown keys and out-of-range values are
  errors.
  """
  @spec run(Memory.t(), [map()], keyword()) :: {:ok, result()} | {:error, Error.t()}
  def run(%Memory{} = memory, queries, opts \\ []) when is_list(queries) do
    opts = Keyword.validate!(opts, short: nil, config: %{})

    with {:ok, queries_json} <- encode(queries),
         {:ok, config_json} <- encode(config_map(opts[:config])),
         {:ok, short_json} <- encode(short(opts[:short])),
         {:ok, json} <- recall(memory, queries_json, config_json, short_json) do
      decoded = JSON.decode!(json)

      {:ok,
       %{
         memories: items(decoded["memories"]),
         actions: items(decoded["actions"]),
         self_knowledge: items(decoded["self_knowledge"]),
         core: items(decoded["core"])
       }}
    end
  end

  @doc """
  The core memories (notes flagged core, e.g. the self node `sem_self`) as recall items with
  stage `"Core"`, in graph order: what a recall lists under `:core`, for a recall that runs
  no retrieval.
  """
  @spec core(Memory.t()) :: {:ok, [item()]} | {:error, Error.t()}
  def core(%Memory{ref: ref}) do
    with {:ok, json} <- Error.from_native(Native.engine_core(ref)) do
      {:ok, items(JSON.decode!(json))}
    end
  end

  @doc """
  Records one retrieval of each note (readable ids or UUIDs) at `at`: the retrieval count and
  last-access time the forgetting curve and consolidation use. Unknown ids are skipped.
  """
  @spec record(Memory.t(), [String.t()], DateTime.t()) ::
          {:ok, non_neg_integer()} | {:error, Error.t()}
  def record(%Memory{ref: ref}, ids, %DateTime{} = at) when is_list(ids) do
    Error.from_native(Native.engine_record(ref, ids, DateTime.to_unix(at, :millisecond)))
  end

  # Activation mode: working memory first brings the neighbourhood of the
  # queries' seeds in from the store, then the same pipeline runs.
  defp recall(%Memory{working: nil, ref: ref}, queries, config, short),
    do: Error.from_native(Native.engine_recall(ref, queries, config, short))

  defp recall(%Memory{working: working}, queries, config, short) do
    with {:ok, {json, _report}} <-
           Error.from_native(Native.working_recall(working, queries, config, short)),
         do: {:ok, json}
  end

  defp short(nil), do: nil

  defp short(%{} = s) do
    %{"messages" => Map.get(s, :messages, []), "summary" => Map.get(s, :summary)}
  end

  defp encode(term), do: JSON.encode_arg(term)

  # Keyword lists and atom keys become the string-keyed objects the native side reads;
  # anything else passes through and is judged there.
  defp config_map([{k, _} | _] = kw) when is_atom(k) do
    if Keyword.keyword?(kw), do: config_map(Map.new(kw)), else: kw
  end

  defp config_map(%{} = map) when not is_struct(map) do
    Map.new(map, fn {k, v} -> {if(is_atom(k), do: Atom.to_string(k), else: k), config_map(v)} end)
  end

  defp config_map(other), do: other

  @keys Map.new(
          ~w(id uuid kind content score stage seeds channels path core action_type)a,
          &{Atom.to_string(&1), &1}
        )

  defp items(list) when is_list(list) do
    Enum.map(list, fn item ->
      for {k, v} <- item, Map.has_key?(@keys, k), into: %{}, do: {Map.fetch!(@keys, k), v}
    end)
  end
end

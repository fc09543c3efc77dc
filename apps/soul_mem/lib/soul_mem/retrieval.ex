defmodule SoulMem.Retrieval do
  @moduledoc """
  Recall over a character's memory graph: fused similarity finds seed memories, weighted
  Personalized PageRank spreads from them, trigger→action links give behaviour tendencies
  (the seed's DefaultPipeline). Every item carries a trace: the stage that found it
  (`"Similarity"`, `"Ppr"`, `"Both"`, `"Action"`), its score and the seed memories it came from.

  Queries have the shape of the seed's Query JSON `sub_queries` (string keys):

      %{"priority" => 1, "tag" => ["小白"],
        "variant" => %{"Semantic" => [%{"concept_identifier" => "小白", "description" => ""}]}}

  Plain text becomes such queries without an LLM, inside the same native call
  (`text_queries/2` shows them). The graph must be embedded first
  (`SoulMem.Embedding.embed_graph/2`).

  A recall is one call into the engine (`Native.engine_recall/2`): the
  request and the result cross as typed maps, and configuration (the
  character's recall defaults and forgetting parameters) is set when it
  changes (`configure/2`), not per recall. The pipeline runs under the
  graph's read lock while its index and decay factors are current, so
  recalls of one character run side by side (`:lock` in the result).
  """

  @behaviour SoulMem.Retrieval.Backend

  alias SoulMem.{Error, Memory, Native}

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
          core: [item()],
          queries: non_neg_integer(),
          lock: :read | :write
        }

  @doc """
  Turns plain text into sub-queries: the whole text as a Situation narrative query plus one
  Semantic identifier query per jieba TF-IDF keyword (at most `max_keywords`, default 4).
  """
  @spec text_queries(String.t(), non_neg_integer()) :: [map()]
  def text_queries(text, max_keywords \\ 4)
      when is_binary(text) and is_integer(max_keywords) and max_keywords >= 0 do
    {:ok, queries} = Native.text_queries(text, max_keywords)
    queries
  end

  @doc """
  Segments text into words with jieba (HMM on).
  """
  @spec tokens(String.t()) :: [String.t()]
  def tokens(text) when is_binary(text), do: Native.text_tokens(text)

  @doc """
  Recalls for `request` in one native call: `text` becomes sub-queries there
  (next to the request's own `queries`), the pipeline runs, and each memory
  gets its forgetting view when `views: true` (`%{id, missing_degree, band,
  action, visible_text, needs_revision, prompt}`, see `SoulMem.Forgetting`).

  Options: `:config` — pipeline options of this recall in the seed's config
  shape (a map with string or atom keys, or a nested keyword list); `nil` or
  empty uses the character's defaults (`configure/2`); unknown keys and
  out-of-range values are errors. `:forgetting` — forgetting parameters
  (`SoulMem.Forgetting.config/1` shape) to set on the character first, or
  `nil`. `:views` (default `false`), `:now` (`DateTime`, default now).

  The result has `:memories`, `:actions`, `:self_knowledge`, `:core`,
  `:queries` (how many sub-queries ran) and `:lock` (`:read` or `:write`).
  """
  @impl true
  @spec recall(Memory.t(), SoulMem.Retrieval.Backend.request(), keyword()) ::
          {:ok, result()} | {:error, Error.t()}
  def recall(%Memory{} = memory, request, opts \\ []) do
    opts = Keyword.validate!(opts, [:config, :forgetting, :now, views: false])

    native = %{
      text: Map.get(request, :text),
      max_keywords: nil,
      queries: Map.get(request, :queries, []),
      short: short(Map.get(request, :short)),
      config: config_arg(opts[:config]),
      forgetting: opts[:forgetting],
      views: opts[:views],
      now_ms: opts[:now] && DateTime.to_unix(opts[:now], :millisecond)
    }

    native_recall(memory, native)
  end

  @doc """
  Runs the pipeline for seed-shaped `queries` (`recall/3` without text).

  Options: `:short` — `%{messages: [String.t()], summary: String.t() | nil}`
  (window and summary, handed to the ShortOnly stage); `:config` — as in
  `recall/3`.
  """
  @spec run(Memory.t(), [map()], keyword()) :: {:ok, result()} | {:error, Error.t()}
  def run(%Memory{} = memory, queries, opts \\ []) when is_list(queries) do
    opts = Keyword.validate!(opts, short: nil, config: nil)
    recall(memory, %{queries: queries, short: opts[:short]}, config: opts[:config])
  end

  @doc """
  Sets the character's recall defaults (`recall:`, pipeline options as in
  `recall/3`) and/or forgetting parameters (`forgetting:`, a
  `SoulMem.Forgetting.config/1` map): what recalls use until they change.
  Invalid ones change nothing.
  """
  @spec configure(Memory.t(), keyword()) :: :ok | {:error, Error.t()}
  def configure(%Memory{ref: ref}, opts) do
    opts = Keyword.validate!(opts, [:recall, :forgetting])
    configuration = %{recall: config_arg(opts[:recall]), forgetting: opts[:forgetting]}
    with {:ok, _} <- Error.from_native(Native.engine_configure(ref, configuration)), do: :ok
  end

  @doc """
  The core memories (notes flagged core, e.g. the self node `sem_self`) as recall items with
  stage `"Core"`, in graph order: what a recall lists under `:core`, for a recall that runs
  no retrieval.
  """
  @spec core(Memory.t()) :: {:ok, [item()]} | {:error, Error.t()}
  def core(%Memory{ref: ref}) do
    with {:ok, items} <- Error.from_native(Native.engine_core(ref)),
         do: {:ok, Enum.map(items, &drop_nil_view/1)}
  end

  @doc """
  Records one retrieval of each note (readable ids or UUIDs) at `at`: the retrieval count and
  last-access time the forgetting curve and consolidation use. Unknown ids are skipped.

  In activation mode it then settles working memory: the notes the recall brought in over
  the cap are released (changed ones written first) — work a recall leaves for after its
  answer (the character's process runs this once the recall has returned). A failed settle
  is retried by the next recall.
  """
  @impl true
  @spec record(Memory.t(), [String.t()], DateTime.t()) ::
          {:ok, non_neg_integer()} | {:error, Error.t()}
  def record(%Memory{ref: ref} = memory, ids, %DateTime{} = at) when is_list(ids) do
    with {:ok, count} <-
           Error.from_native(Native.engine_record(ref, ids, DateTime.to_unix(at, :millisecond))),
         :ok <- settle(memory),
         do: {:ok, count}
  end

  defp settle(%Memory{working: nil}), do: :ok

  defp settle(%Memory{working: working}) do
    with {:ok, _report} <- Error.from_native(Native.working_settle(working)), do: :ok
  end

  # Activation mode: working memory first brings the neighbourhood of the
  # queries' seeds in from the store, then the same pipeline runs.
  defp native_recall(%Memory{working: nil, ref: ref}, request),
    do:
      with(
        {:ok, outcome} <- Error.from_native(Native.engine_recall(ref, request)),
        do: {:ok, tidy(outcome)}
      )

  defp native_recall(%Memory{working: working}, request) do
    with {:ok, {outcome, _report}} <- Error.from_native(Native.working_recall(working, request)),
         do: {:ok, tidy(outcome)}
  end

  # Only a memory of a recall with views has a forgetting view: the others lose the key.
  defp tidy(outcome) do
    Map.new(outcome, fn
      {list, items} when list in [:memories, :actions, :self_knowledge, :core] ->
        {list, Enum.map(items, &drop_nil_view/1)}

      other ->
        other
    end)
  end

  defp drop_nil_view(%{forgetting: nil} = item), do: Map.delete(item, :forgetting)
  defp drop_nil_view(item), do: item

  defp short(nil), do: nil
  defp short(%{} = s), do: %{messages: Map.get(s, :messages, []), summary: Map.get(s, :summary)}

  defp config_arg(nil), do: nil
  defp config_arg(empty) when empty == %{} or empty == [], do: nil
  defp config_arg(config), do: config_map(config)

  # Keyword lists and atom keys become the string-keyed maps the engine reads; anything else
  # passes through and is judged there.
  defp config_map([{k, _} | _] = kw) when is_atom(k) do
    if Keyword.keyword?(kw), do: config_map(Map.new(kw)), else: kw
  end

  defp config_map(%{} = map) when not is_struct(map),
    do:
      Map.new(map, fn {k, v} ->
        {if(is_atom(k), do: Atom.to_string(k), else: k), config_map(v)}
      end)

  defp config_map(other), do: other
end

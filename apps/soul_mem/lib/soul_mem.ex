defmodule SoulMem do
  @moduledoc """
  SoulMem: long-term memory for role-play characters.

  The runtime app. Its public API:

    * `SoulMem.Memory` — a character's memory graph (import, stats, notes,
      export), held by the Rust core;
    * `SoulMem.JSON` — JSON encoding and decoding;
    * `SoulMem.Error` — the error of every failing operation;
    * `SoulMem.Characters` / `SoulMem.Character` — running characters
      (window, summary, Working/Idle, records, events);
    * `recall/3` — push messages and recall memories as a context block;
    * `SoulMem.Admin` — operator helpers.

  `SoulMem.Native` holds the NIF stubs and is private to this app.
  """

  @doc """
  The version of the `:soul_mem` application.
  """
  @spec version() :: String.t()
  def version do
    case Application.spec(:soul_mem, :vsn) do
      nil -> "0.0.0"
      vsn -> List.to_string(vsn)
    end
  end

  @recall_opts [:retrieval, timeout: 5_000, config: %{}, templates: %{}]

  @typedoc """
  A recall request; every key is optional:

    * `:messages` — messages pushed into the window first (see
      `SoulMem.Character.push/3`);
    * `:queries` — seed Query JSON sub_query maps (string keys `"priority"`,
      `"tag"`, `"variant"`);
    * `:text` — plain text, turned into queries without an LLM by
      `SoulMem.Retrieval.text_queries/1`.

  Without queries and text, the text of the last pushed message is used.
  """
  @type request :: %{
          optional(:messages) => [map()],
          optional(:queries) => [map()],
          optional(:text) => String.t()
        }

  @type recall_result :: %{
          memories: [map()],
          actions: [map()],
          core: [map()],
          window: [SoulMem.Window.message()],
          summary: String.t(),
          context: String.t()
        }

  @doc """
  Recalls memories for `character` (id or pid of a running character).

  Pushes `request.messages`, runs retrieval on the character's graph with
  the queries, records the returned notes (`SoulMem.Character.records/2`)
  and renders the context block (`SoulMem.Context`). Core memories (the self
  node `sem_self`) are always included. The window includes messages whose
  summary is still being written.

  Options: `:timeout` (ms, default 5000) for the character call, `:config`
  (retrieval config map), `:templates` (see `SoulMem.Context`),
  `:retrieval` (the retrieval module, default app env `:retrieval` or
  `SoulMem.Retrieval`; when it is not available, recall returns the core
  memories only).
  """
  @spec recall(String.t() | pid(), request(), keyword()) ::
          {:ok, recall_result()} | {:error, term()}
  def recall(character, request, opts \\ []) do
    opts = Keyword.validate!(opts, @recall_opts)

    retrieval = opts[:retrieval] || Application.get_env(:soul_mem, :retrieval, SoulMem.Retrieval)

    with {:ok, request} <- validate_request(request),
         {:ok, snap} <-
           SoulMem.Character.prepare_recall(character, request.messages, opts[:timeout]),
         {:ok, found} <- retrieve(retrieval, snap, request, opts[:config]) do
      ids = Enum.map(found.memories ++ found.actions, & &1.id)
      if ids != [], do: SoulMem.Character.record(character, ids, DateTime.utc_now(), retrieval)

      core = if found.core == [], do: fallback_core(snap.memory), else: found.core

      context =
        SoulMem.Context.render(
          %{
            core: core,
            memories: found.memories,
            actions: found.actions,
            window: snap.window,
            summary: snap.summary
          },
          templates: opts[:templates]
        )

      {:ok,
       %{
         memories: found.memories,
         actions: found.actions,
         core: core,
         window: snap.window,
         summary: snap.summary,
         context: context
       }}
    end
  end

  defp validate_request(request) when is_map(request) do
    messages = Map.get(request, :messages, [])
    queries = Map.get(request, :queries, [])
    text = Map.get(request, :text)

    cond do
      Map.keys(request) -- [:messages, :queries, :text] != [] -> {:error, :invalid_request}
      not is_list(messages) -> {:error, :invalid_messages}
      not (is_list(queries) and Enum.all?(queries, &is_map/1)) -> {:error, :invalid_queries}
      not (is_nil(text) or is_binary(text)) -> {:error, :invalid_text}
      true -> {:ok, %{messages: messages, queries: queries, text: text}}
    end
  end

  defp validate_request(_request), do: {:error, :invalid_request}

  defp retrieve(retrieval, snap, request, config) do
    if Code.ensure_loaded?(retrieval) and function_exported?(retrieval, :run, 3) do
      text =
        cond do
          is_binary(request.text) and String.trim(request.text) != "" -> request.text
          request.queries == [] and request.messages != [] -> last_text(request.messages)
          true -> nil
        end

      queries = request.queries ++ if(text, do: retrieval.text_queries(text), else: [])

      if queries == [] do
        {:ok, %{memories: [], actions: [], core: []}}
      else
        short = %{messages: Enum.map(snap.window, & &1.text), summary: snap.summary}

        case retrieval.run(snap.memory, queries, short: short, config: config) do
          {:ok, result} ->
            {:ok,
             %{
               memories: Map.get(result, :memories, []),
               actions: Map.get(result, :actions, []),
               core: Map.get(result, :core, []) ++ Map.get(result, :self_knowledge, [])
             }}

          {:error, _} = error ->
            error
        end
      end
    else
      {:ok, %{memories: [], actions: [], core: []}}
    end
  end

  defp last_text(messages) do
    messages |> List.last() |> Map.get(:text)
  end

  defp fallback_core(memory) do
    case SoulMem.Memory.get_note(memory, "sem_self") do
      {:ok, %{"id" => id} = note} ->
        [
          %{
            id: id,
            uuid: note["uuid"],
            kind: "semantic",
            content: note_content(note),
            score: 1.0,
            stage: "Core",
            seeds: []
          }
        ]

      {:error, _} ->
        []
    end
  end

  defp note_content(%{"mem_type" => %{"Semantic" => semantic}}) do
    case {semantic["content"], semantic["description"]} do
      {content, description} when is_binary(description) and description != "" ->
        "#{content}：#{description}"

      {content, _} ->
        to_string(content)
    end
  end

  defp note_content(_note), do: ""
end

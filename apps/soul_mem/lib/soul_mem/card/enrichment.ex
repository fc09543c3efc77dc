defmodule SoulMem.Card.Enrichment do
  @moduledoc """
  The optional LLM pass over a card's graph: the situations, habits and
  people a long card description tells of become notes and links of their
  own. It is the consolidation extraction (`SoulMem.Consolidation`: strict
  JSON schema, validated, deduplicated against the card's notes, all or
  nothing) run over the card's own text — the self description, the
  scenario and the long lorebook entries — instead of a conversation
  summary.

  Without an LLM, or when it fails, nothing changes: the card's
  deterministic graph (`SoulMem.Card.parse/2`) is complete and usable.
  """

  alias SoulMem.{Consolidation, JSON, Memory, Window}

  # Lorebook entries shorter than this say one fact, which the card's
  # mapping already holds; longer ones tell stories worth extracting.
  @long_entry_chars 120
  # The text handed to the LLM at most (its answer budget is the
  # consolidation's).
  @max_chars 8_000

  @typedoc "What an enrichment added."
  @type result :: %{
          created: [String.t()],
          merged: [String.t()],
          linked: non_neg_integer(),
          attempts: pos_integer()
        }

  @doc """
  Runs the extraction over the card text of `memory` (a graph imported from
  a card) and applies it. Options: `:llm` (options for `SoulMem.LLM.chat/2`,
  default the application's), `:retries`, `:now`. Returns what was added;
  `{:ok, :empty}` when the card has no text to read; `{:error, reason}`
  (nothing changed) when the LLM is missing, fails or keeps answering
  invalid JSON.
  """
  @spec run(Memory.t(), keyword()) :: {:ok, result() | :empty} | {:error, term()}
  def run(%Memory{} = memory, opts \\ []) do
    opts = Keyword.validate!(opts, [:now, :retries, llm: []])

    with {:ok, text} <- card_text(memory) do
      snapshot = %{
        memory: memory,
        window: Window.new(summary: text),
        records: %{},
        llm: opts[:llm]
      }

      case Consolidation.run(snapshot, Keyword.take(opts, [:now, :retries])) do
        {:ok, :empty} -> {:ok, :empty}
        {:ok, r} -> {:ok, Map.take(r, [:created, :merged, :linked, :attempts])}
        {:error, _} = error -> error
      end
    end
  end

  @doc """
  The card text of a card's graph, as the extraction reads it: the self
  description, the scenario, then the lorebook entries of at least
  #{@long_entry_chars} characters, each under its name; at most
  #{@max_chars} characters.
  """
  @spec card_text(Memory.t()) :: {:ok, String.t()} | {:error, term()}
  def card_text(%Memory{} = memory) do
    with {:ok, json} <- Memory.export_json(memory),
         {:ok, notes} <- JSON.decode(json) do
      text =
        notes
        |> Enum.flat_map(&section/1)
        |> Enum.join("\n\n")
        |> String.slice(0, @max_chars)

      {:ok, text}
    end
  end

  defp section(%{"id" => "sem_self", "mem_type" => %{"Semantic" => s}}),
    do: ["【#{s["content"]}】\n#{s["description"]}"]

  defp section(%{"id" => "abs_scenario", "mem_type" => %{"Situation" => situation}}),
    do: ["【场景】\n#{situation |> Map.values() |> scenario_text()}"]

  defp section(%{"id" => "sem_lore_" <> _, "mem_type" => %{"Semantic" => s}}) do
    if String.length(s["description"] || "") >= @long_entry_chars,
      do: ["【#{s["content"]}】\n#{s["description"]}"],
      else: []
  end

  defp section(_note), do: []

  # The scenario is an abstract situation (an environment): its texts.
  defp scenario_text([%{} = facet]) do
    facet
    |> Map.values()
    |> Enum.flat_map(fn
      v when is_binary(v) -> [v]
      %{} = m -> m |> Map.values() |> Enum.filter(&is_binary/1)
      _ -> []
    end)
    |> Enum.reject(&(&1 == ""))
    |> Enum.join("\n")
  end

  defp scenario_text(_), do: ""
end

defmodule Mix.Tasks.Soul.CardRecall do
  @shortdoc "Measures recall of a card's lorebook entries by key and by paraphrase"

  @moduledoc """
  Imports a SillyTavern card into a fresh, unpersisted character and asks
  about each lorebook entry by one of its keys and by a paraphrase
  (`SoulMem.Eval.CardRecall`); prints the hit rates and the misses.

      mix soul.card_recall [CARD] [QUERIES] [--embedder model|hash]

  Defaults: `fixtures/cards/su_wan.png` and `fixtures/cards/queries.json`.
  Exits non-zero when the card cannot be read.
  """

  use Mix.Task

  alias SoulMem.Eval.CardRecall

  @requirements ["app.start"]

  @impl Mix.Task
  def run(args) do
    {opts, paths} = OptionParser.parse!(args, strict: [embedder: :string])
    root = Path.expand("../../../../..", __DIR__)

    [card, queries] =
      case paths do
        [] -> ["su_wan.png", "queries.json"] |> Enum.map(&Path.join([root, "fixtures/cards", &1]))
        [card] -> [card, Path.join([root, "fixtures/cards/queries.json"])]
        [card, queries] -> [card, queries]
      end

    embedder =
      case opts[:embedder] || "model" do
        "model" -> :model
        "hash" -> :hash
        other -> Mix.raise("--embedder is model or hash, got #{other}")
      end

    with {:ok, bytes} <- File.read(card),
         {:ok, cases} <- CardRecall.read_queries(queries),
         {:ok, result} <- CardRecall.run(bytes, cases, embedder: embedder) do
      print(card, embedder, result)
    else
      {:error, reason} -> Mix.raise("card recall failed: #{inspect(reason)}")
    end
  end

  defp print(card, embedder, result) do
    shell = Mix.shell()
    shell.info("#{Path.basename(card)} (#{result.report.format}), embedder #{embedder}")

    shell.info(
      "notes #{result.report.notes}, links #{result.report.links}, " <>
        "lore entries #{result.report.lore_entries}, disabled skipped #{result.disabled}"
    )

    for {label, t} <- [{"by key", result.key}, {"by paraphrase", result.paraphrase}] do
      pct = if t.cases > 0, do: Float.round(100 * t.hits / t.cases, 1), else: 0.0
      shell.info("#{label}: #{t.hits}/#{t.cases} (#{pct}%)")
      for m <- t.misses, do: shell.info("  miss #{m.note}: #{m.query} → #{inspect(m.got)}")
    end
  end
end

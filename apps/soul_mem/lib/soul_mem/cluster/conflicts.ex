defmodule SoulMem.Cluster.Conflicts do
  @moduledoc """
  Copies of a character that lost to a newer one, kept and reported.

  Two primary copies of one character meet when a home that was down comes
  back after its replica took over, or when a network split heals after
  both sides served it. The copy with the higher epoch wins — a replica
  that took over is one epoch ahead of the home it replaced — and, at equal
  epochs, the copy on the node ranked first for the character. The winner
  serves from then on; the loser is never deleted: its store file goes to
  `<data_dir>/conflicts/<id>-e<epoch>-<time>.db` with a JSON report beside
  it (what it held: notes, window messages, the newest message's time, its
  newest 50 window messages; the winner), a warning is logged, and `list/0` (`SoulMem.Cluster.conflicts/0`)
  shows every report. After a crash the loser holds at most the writes the
  home committed but never acknowledged; after a split, the writes its side
  acknowledged while cut off: they are in the kept file, exportable with
  `SoulMem.Store`, not merged silently into the winner.
  """

  require Logger

  alias SoulMem.Store

  # Window messages of the losing copy listed in its report.
  @tail_messages 50

  @doc "The directory of set-aside copies and their reports."
  @spec dir() :: Path.t()
  def dir, do: Path.join(Store.data_dir(), "conflicts")

  @doc """
  Whether a copy at epoch `theirs` on node `their_node` beats this node's
  copy at epoch `mine` for character `id`.
  """
  @spec beats?(String.t(), {non_neg_integer(), node()}, non_neg_integer()) :: boolean()
  def beats?(id, theirs, mine), do: newer?(id, theirs, {mine, node()})

  @doc "Whether copy `{epoch, node}` `a` of character `id` beats copy `b`."
  @spec newer?(String.t(), {non_neg_integer(), node()}, {non_neg_integer(), node()}) ::
          boolean()
  def newer?(id, {epoch_a, node_a}, {epoch_b, node_b}),
    do: epoch_a > epoch_b or (epoch_a == epoch_b and rank(id, node_a) < rank(id, node_b))

  defp rank(id, node) do
    Enum.find_index(SoulMem.Cluster.Placement.ranking(id), &(&1 == node)) || 1_000_000
  end

  @doc """
  Sets this node's (closed) store of `id` aside as the loser to `winner` (a
  node) at `winner_epoch`, with its report. `{:ok, report}`; `:none` when
  there is no store here. The caller holds the character's lock
  (`SoulMem.Cluster.Moves.locked/2`) and has checked that it lost.
  """
  @spec set_aside(String.t(), node(), non_neg_integer()) :: {:ok, map()} | :none
  def set_aside(id, winner, winner_epoch) do
    store = Store.path(Store.data_dir(), id)

    case Store.peek(store) do
      {:ok, peek} ->
        tail = window_tail(id)
        stamp = DateTime.utc_now() |> DateTime.to_unix(:millisecond)
        base = Path.basename(store, ".db") <> "-e#{peek.epoch}-#{stamp}"
        kept = Path.join(dir(), base <> ".db")
        :ok = Store.rename_file(store, kept)

        report = %{
          "id" => id,
          "node" => Atom.to_string(node()),
          "epoch" => peek.epoch,
          "winner" => Atom.to_string(winner),
          "winner_epoch" => winner_epoch,
          "kept" => kept,
          "notes" => peek.notes,
          "window" => peek.window,
          "last_message_at" => peek.last_message_at && DateTime.to_iso8601(peek.last_message_at),
          "window_tail" => tail,
          "at" => DateTime.utc_now() |> DateTime.to_iso8601()
        }

        :ok =
          SoulMem.JSON.write_file_atomic(
            Path.join(dir(), base <> ".json"),
            SoulMem.JSON.encode!(report)
          )

        Logger.warning(
          "cluster: #{id}: the copy here (epoch #{peek.epoch}) lost to #{winner} " <>
            "(epoch #{winner_epoch}); kept at #{kept}"
        )

        {:ok, report}

      {:error, _} ->
        :none
    end
  end

  # The newest window messages of the losing copy (the writes acknowledged on its side since
  # a split are the newest), for the report; [] when it cannot be read.
  defp window_tail(id) do
    with {:ok, store} <- Store.open(Store.data_dir(), id, in_use_retries: 9) do
      try do
        case Store.load(store, graph: false) do
          {:ok, state} ->
            for m <- Enum.take(state.window, -@tail_messages),
                do: %{"role" => m.role, "text" => m.text, "at" => DateTime.to_iso8601(m.at)}

          {:error, _} ->
            []
        end
      after
        Store.close(store)
      end
    else
      {:error, _} -> []
    end
  end

  @doc "Every report of a set-aside copy on this node, oldest first."
  @spec list() :: [map()]
  def list do
    dir()
    |> Path.join("*.json")
    |> Path.wildcard()
    |> Enum.flat_map(fn file ->
      with {:ok, json} <- File.read(file),
           {:ok, %{} = report} <- SoulMem.JSON.decode(json),
           do: [report],
           else: (_ -> [])
    end)
    |> Enum.sort_by(& &1["at"])
  end
end

defmodule SoulMem.Admin do
  @moduledoc """
  Operator views for a remote shell (`iex --remsh`) that the façade
  `SoulMem` has no place for: the running characters at a glance, a
  window, a summary, a backup file. Everything else (notes, maintenance
  and write-back with `SoulMem.force/2`, push, recall) is `SoulMem`. Every function returns
  data; nothing prints.
  """

  alias SoulMem.{Character, Characters, Window}

  @doc """
  The running characters with their state (`:working`/`:idle`), window size,
  pending messages, summary jobs, summary length and graph node counts
  (`SoulMem.Memory.stats/1`). Characters that stop while being listed are
  left out.
  """
  @spec list() :: [map()]
  def list do
    for {_id, pid} <- Characters.list(),
        {:ok, info} <- [Character.info(pid)],
        do: info
  end

  @doc "The messages visible to recall (pending + window), oldest first."
  @spec window(String.t() | pid()) :: {:ok, [Window.message()]} | {:error, term()}
  def window(character) do
    with {:ok, window} <- Character.window(character), do: {:ok, Window.visible(window)}
  end

  @doc "The cumulative summary."
  @spec summary(String.t() | pid()) :: {:ok, String.t()} | {:error, term()}
  def summary(character), do: Character.summary(character)

  @doc """
  Writes the character's export document (`SoulMem.Character.export/2`: the
  graph with archived notes, window, summary, records, feedback, forgetting
  state) to `path` — via a temporary file and a rename, so `path` never holds
  a half-written backup. `SoulMem.import/3` restores it.
  """
  @spec export(String.t() | pid(), Path.t()) :: :ok | {:error, term()}
  def export(character, path) do
    with {:ok, json} <- Character.export(character),
         do: SoulMem.JSON.write_file_atomic(path, json)
  end
end

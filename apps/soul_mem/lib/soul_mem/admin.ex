defmodule SoulMem.Admin do
  @moduledoc """
  Operator helpers for a remote shell (`iex --remsh`): inspect and poke the
  running characters. Every function returns data; nothing prints.
  """

  alias SoulMem.{Character, Characters, Memory, Window}

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
  Runs a maintenance task now (`:consolidate | :persist | :forget |
  :summarize_pending`), whatever the character's state. The shipped
  implementations, all in the default `config :soul_mem, :maintenance` list:
  `SoulMem.Maintenance.SummarizePending` (`:summarize_pending`),
  `SoulMem.Maintenance.Consolidate` (`:consolidate`) and
  `SoulMem.Maintenance.ForgetSweep` (`:forget`); `:persist` writes the store
  synchronously (see `persist/1`). `{:error, :unsupported}` when no
  configured implementation handles the task (or, for `:persist`, the
  character has no store).
  """
  @spec force(String.t() | pid(), SoulMem.Maintenance.task()) :: :ok | {:error, term()}
  def force(character, task), do: Character.force(character, task)

  @doc "One note of the character's graph, by readable id or UUID."
  @spec get_note(String.t() | pid(), String.t()) :: {:ok, map()} | {:error, term()}
  def get_note(character, note_id) do
    with {:ok, memory} <- Character.memory(character), do: Memory.get_note(memory, note_id)
  end

  @doc """
  Inserts or replaces one note (Graph JSON node shape); durable once it
  returns for a persisted character. See `SoulMem.Memory.put_note/3`.
  """
  @spec put_note(String.t() | pid(), map() | binary()) :: {:ok, map()} | {:error, term()}
  def put_note(character, note), do: Character.put_note(character, note)

  @doc """
  Writes the character's graph, window and summary to its store now.
  """
  @spec persist(String.t() | pid()) :: :ok | {:error, term()}
  def persist(character), do: Character.force(character, :persist)

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

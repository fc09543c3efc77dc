defmodule SoulMem.Scene do
  @moduledoc """
  Group chats: each character keeps only what it witnessed. A scene is the
  list of character ids present; a line said in it is pushed into the
  window of every character present and of no other.

  A line names its speaker. For the character who spoke it, it is its own
  line (`:assistant`, as said); every other character present hears it as
  `:user` with the speaker's name in front (`"Alice: …"`), so summaries and
  later replies know who said what. A line without a speaker keeps its role
  and text for everyone.
  """

  @typedoc "A line said in a scene."
  @type line :: %{
          required(:text) => String.t(),
          optional(:role) => :user | :assistant,
          optional(:speaker) => String.t() | nil,
          optional(:at) => DateTime.t()
        }

  @max_present 16

  @doc "How many characters a scene may hold."
  @spec max_present() :: pos_integer()
  def max_present, do: @max_present

  @doc """
  The message `character` witnesses when `line` is said (pure): see the
  module doc. `speaker` is matched against the character's id.
  """
  @spec as_witnessed(String.t(), line()) :: SoulMem.Window.message() | map()
  def as_witnessed(character, %{text: text} = line) do
    at = Map.get(line, :at) || DateTime.utc_now()

    case Map.get(line, :speaker) do
      speaker when speaker in [nil, ""] ->
        %{role: Map.get(line, :role, :user), text: text, at: at}

      ^character ->
        %{role: :assistant, text: text, at: at}

      speaker ->
        %{role: :user, text: "#{speaker}: #{text}", at: at}
    end
  end

  @doc """
  Pushes `line` into the window of each running character in `present`
  (`SoulMem.push/2`; duplicates ignored). Each push is acknowledged on its
  own: the result lists the characters that stored it and those that did
  not, with the reason (e.g. `:not_running`, `:backlog_full`).
  """
  @spec witness([String.t()], line()) ::
          {:ok, %{pushed: [String.t()], failed: %{String.t() => term()}}}
          | {:error, :too_many_present}
  def witness(present, line) when is_list(present) do
    present = Enum.uniq(present)

    if length(present) > @max_present do
      {:error, :too_many_present}
    else
      line = Map.put_new(line, :at, DateTime.utc_now())

      {pushed, failed} =
        Enum.reduce(present, {[], %{}}, fn id, {pushed, failed} ->
          case SoulMem.push(id, as_witnessed(id, line)) do
            :ok -> {[id | pushed], failed}
            {:error, reason} -> {pushed, Map.put(failed, id, reason)}
          end
        end)

      {:ok, %{pushed: Enum.reverse(pushed), failed: failed}}
    end
  end
end

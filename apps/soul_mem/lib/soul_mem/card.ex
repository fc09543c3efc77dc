defmodule SoulMem.Card do
  @moduledoc """
  SillyTavern character cards and World Info files as SoulMem memory graphs.

  `parse/2` reads a card — a PNG with a `ccv3` or `chara` text chunk, a CHARX
  zip with `card.json`, or JSON (V1, V2 `chara_card_v2`, V3 `chara_card_v3`) —
  or a SillyTavern World Info file (`{"entries": {...}}`) and returns a Graph
  JSON document that `SoulMem.Memory.import_json/3` loads, plus a report:

      {:ok, %{graph: json, report: report}} = SoulMem.Card.parse(File.read!("ann.png"))
      {:ok, memory} = SoulMem.Memory.import_json("ann", json)

  The mapping (the native core documents it in full, `card/mapping.rs`): the
  name, nickname, description and personality become the core note
  `sem_self`; the scenario the abstract situation `abs_scenario`; the
  greetings Speak procedures `proc_greeting_<i>` triggered by the situation
  `spec_first_meeting`; the character's lines of the example dialogue Speak
  procedures `proc_example_<k>`; each enabled lorebook entry a semantic note
  `sem_lore_<uid>` (comment or first key as content, keys as aliases, text as
  description, leading `@@` decorators as `decorator:` tags, constant entries
  core); notes whose text mentions another note's name or key link to it
  (`mentions`, at most 16 per note). `{{char}}` becomes the name (`我` in the
  self description of Chinese text) and `{{user}}` becomes `user`.

  Limits: the file at most 20 MiB, each text field at most 256 KiB, at most
  10,000 lorebook entries, compressed text at most 16 MiB once inflated. Bad
  input fails with `{:error, %SoulMem.Error{}}`: reason `:invalid_card`
  (corrupt or truncated PNG, bad CRC, no card chunk, path traversal in a
  CHARX, a decompression bomb, a missing name, duplicate entry ids …),
  `:limit_exceeded` (a field or the lorebook too large) or `:too_large` (the
  file), with a message naming the chunk, field or entry.

  `SoulMem.Memory.export_world_info/1` and `SoulMem.Memory.export_card/1` go
  the other way; a card imported, exported and imported again gives the same
  notes.
  """

  alias SoulMem.{Error, Native}

  @typedoc """
  `format` is `"<container>_<spec>"`: container `png`, `charx` or `json`, spec
  `v1`, `v2` or `v3` (e.g. `"png_v3"`, `"json_v2"`, `"charx_v3"`); a World
  Info JSON file is `"world_info"`.
  """
  @type report :: %{
          format: String.t(),
          name: String.t(),
          notes: non_neg_integer(),
          links: non_neg_integer(),
          lore_entries: non_neg_integer(),
          skipped_disabled: non_neg_integer(),
          skipped_empty: non_neg_integer(),
          core_notes: non_neg_integer()
        }

  @typedoc """
  Options:

    * `:name` — the character's name; required for a World Info file (which
      has none), ignored for cards.
  """
  @type opts :: [name: String.t() | nil]

  @doc """
  Reads a card or World Info file (its bytes) into a Graph JSON document and a
  report. See the module documentation for formats, mapping and errors.
  """
  @spec parse(binary(), opts()) ::
          {:ok, %{graph: binary(), report: report()}} | {:error, Error.t()}
  def parse(bytes, opts \\ []) when is_binary(bytes) do
    opts = Keyword.validate!(opts, name: nil)
    name = Keyword.fetch!(opts, :name)

    unless is_nil(name) or is_binary(name) do
      raise ArgumentError, "expected :name to be a string or nil, got: #{inspect(name)}"
    end

    bytes |> Native.card_import(%{name: name}) |> Error.from_native()
  end

  @doc """
  Reads a card like `parse/2` and imports the graph for `character`:
  `{:ok, memory, report}`.
  """
  @spec import(String.t(), binary(), opts()) ::
          {:ok, SoulMem.Memory.t(), report()} | {:error, Error.t()}
  def import(character, bytes, opts \\ []) when is_binary(character) and is_binary(bytes) do
    with {:ok, %{graph: graph, report: report}} <- parse(bytes, opts),
         {:ok, memory} <- SoulMem.Memory.import_json(character, graph) do
      {:ok, memory, report}
    end
  end
end

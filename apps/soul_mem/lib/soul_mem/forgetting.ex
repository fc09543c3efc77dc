defmodule SoulMem.Forgetting do
  @moduledoc """
  Forgetting as a first-class citizen: memories blur along an Ebbinghaus curve
  instead of vanishing, and a heavily forgotten memory is guessed back by the
  LLM the way a person reconstructs it.

  The curve and the decisions live in the Rust core (`forget.rs`): a note's
  missing degree is `1 − e^(−t/τ)` with `τ = half_life × (1 + 0.1 ×
  min(recalls, 50)) / ln 2`, `t` in hours since creation (or since the last
  recall, `clock: "since_last_access"`). Only SpecificSituation and Semantic
  notes forget (not core notes such as `sem_self`); Procedure and
  AbstractSituation notes never do.

  On recall (`on_recall/3`, called by `SoulMem.recall/3`):

    * `md < mask_threshold` (0.05) — `:no_action`, the character sees the memory;
    * `md < revise_threshold` (0.15) — `:mask_only`, it sees the masked text
      (jieba words replaced by ` [masked] `, the same words at the same degree,
      more words as the degree grows, never fewer);
    * otherwise — `:revised`: the LLM reconstructs the masked text in the
      character's voice (a semantic note's aliases, description and concept
      type are aligned in the same call). The revision is cached in the
      engine for the degree's band (`floor(md × 10)`), so the LLM is asked
      again only when forgetting moves to another band. When the LLM fails,
      the character sees the masked text (`:mask_only`) and the next recall
      tries again. A recall waits for revisions at most a short budget
      (`:budget`, default 1 s): past it the character sees the masked text,
      and the revision goes on in the background, for the next recall (which
      waits on it rather than asking the LLM a second time).

  The original text is never put in the character's context; it stays in the
  graph and in the note's forgetting state (`state/2`) for operators.

  The idle sweep (`sweep/2`, run by `SoulMem.Maintenance.ForgetSweep`) prunes
  links whose decayed intensity fell below `prune_threshold`, refreshes the
  forgetting states and lists archive candidates, without any LLM.

  ## Configuration

  Forgetting parameters come from the application env, overridable per call
  with `config:` (keys, all optional, with the seed's defaults):

      config :soul_mem, :forgetting,
        base_half_life_hours: 24.0, active_factor: 0.1, max_activation_cap: 50,
        mask_threshold: 0.05, revise_threshold: 0.15, alias_growth_threshold: 0.6,
        prune_threshold: 0.05, archive_threshold: 0.95, clock: :since_creation

  Unknown keys and out-of-range values are `{:error, %SoulMem.Error{reason:
  :invalid_json | :invalid_argument}}`.
  """

  require Logger

  alias SoulMem.{Error, Memory, Native}

  @config_keys ~w(base_half_life_hours active_factor max_activation_cap mask_threshold
                  revise_threshold alias_growth_threshold prune_threshold archive_threshold
                  clock)a

  @typedoc "Forgetting parameters (see the moduledoc); a map or keyword list."
  @type config :: map() | keyword()

  @type action :: :no_action | :mask_only | :revised

  @typedoc "What forgetting did to a recalled memory."
  @type info :: %{missing_degree: float(), action: action(), band: non_neg_integer()}

  @typedoc "A note's forgetting view (string keys, see `view/3`)."
  @type view :: %{String.t() => term()}

  @typedoc "A note's forgetting state: the revision cache and the kept original."
  @type state :: %{
          id: String.t(),
          missing_degree: float(),
          band: non_neg_integer(),
          revised_text: String.t() | nil,
          original_text: String.t() | nil,
          updated_at: String.t()
        }

  @apply_opts [:llm, :now, :budget, max_concurrency: 4, llm_timeout: 20_000]

  @doc """
  The effective forgetting parameters: the application env `:forgetting`
  with `overrides` on top, as a string-keyed map (the core's ForgetConfig
  JSON object). Raises `ArgumentError` on a key that is not a parameter.
  """
  @spec config(config()) :: %{String.t() => term()}
  def config(overrides \\ []) do
    env = Application.get_env(:soul_mem, :forgetting, [])
    Map.merge(normalize(env), normalize(overrides))
  end

  defp normalize(config) when is_list(config) or is_map(config) do
    Map.new(config, fn {key, value} ->
      name = to_string(key)

      unless name in Enum.map(@config_keys, &Atom.to_string/1),
        do:
          raise(
            ArgumentError,
            "unknown forgetting parameter #{inspect(key)}; expected one of #{inspect(@config_keys)}"
          )

      {name,
       if(is_atom(value) and not is_boolean(value) and value != nil,
         do: to_string(value),
         else: value
       )}
    end)
  end

  defp normalize(other),
    do:
      raise(
        ArgumentError,
        "expected forgetting parameters as a map or keyword list, got: #{inspect(other)}"
      )

  @doc """
  Sets the parameters the engine of `memory` forgets with — retrieval's link
  decay and recall's forgetting views — to the application env with
  `overrides`, until they are set again (a character sets them when it
  loads). Setting the parameters it has changes nothing. Invalid parameters
  change nothing.
  """
  @spec configure(Memory.t(), config()) :: :ok | {:error, Error.t()}
  def configure(%Memory{} = memory, overrides \\ []),
    do: SoulMem.Retrieval.configure(memory, forgetting: config(overrides))

  @doc """
  The forgetting view of the notes `ids` (readable ids or UUIDs) at `now`:
  per note `"id"`, `"kind"`, `"forgettable"`, `"missing_degree"`, `"band"`,
  `"action"` (`"NoAction" | "MaskOnly" | "Revised"`), `"visible_text"` (what
  the character sees now: original, masked, or the revision cached for this
  band), `"masked_text"`, `"original_text"` (operators only),
  `"cached_revision"`, `"needs_revision"` and `"prompt"` (`%{"system",
  "user"}` when a revision is due). Read-only. An unknown id is
  `{:error, %SoulMem.Error{reason: :not_found}}`.

  Options: `:now` (default now), `:config` (overrides).
  """
  @spec view(Memory.t(), [String.t()], keyword()) :: {:ok, [view()]} | {:error, Error.t()}
  def view(%Memory{ref: ref}, ids, opts \\ []) when is_list(ids) do
    opts = Keyword.validate!(opts, [:now, config: []])

    Error.from_native(Native.forget_view(ref, ids, now_ms(opts[:now]), config(opts[:config])))
  end

  @doc """
  Stores `answer`, an LLM's reply to a note's revision prompt, as the
  revision of note `id` for the band it is in at `now` (semantic notes: the
  reply's `Aliases:`/`Description:`/`ConceptType:` lines are aligned into the
  note). Returns `%{"visible_text" => ..., "band" => ..., "note_changed" =>
  ...}`. Fails, changing nothing, when the note is not due for revision or
  the answer holds no revision (`:invalid_argument`).

  Options: `:now` (default now), `:config` (overrides).
  """
  @spec store_revision(Memory.t(), String.t(), String.t(), keyword()) ::
          {:ok, map()} | {:error, Error.t()}
  def store_revision(%Memory{ref: ref}, id, answer, opts \\ [])
      when is_binary(id) and is_binary(answer) do
    opts = Keyword.validate!(opts, [:now, config: []])

    Error.from_native(
      Native.forget_store_revision(ref, id, answer, now_ms(opts[:now]), config(opts[:config]))
    )
  end

  @doc """
  Applies lazy forgetting to recalled memory items (maps with at least `:id`
  and `:content`, as returned by `SoulMem.Retrieval.recall/3`), with the
  parameters the character forgets with (`configure/2`): each item's
  `:content` becomes what the character sees (unchanged for `:no_action`)
  and it gains `:forgetting` (`t:info/0`). An item that carries its
  forgetting view (a recall with `views: true`) needs no further call into
  the engine unless a revision is due. Revisions due are asked of the LLM in
  parallel (system prompt from the core, in the character's voice) and
  cached per band; a failed call, or one still running when the budget is
  spent, leaves the masked text (`:mask_only`). A revision still running
  goes on in the background and is cached when it lands; one note is never
  revised by two calls at once. Without a configured LLM
  (`c:SoulMem.LLM.Client.configured?/1`) no revision is asked: the masked
  text stands.

  Options: `:budget` — ms the recall waits for revisions (default app env
  `:forget_budget_ms`, 1000); `:llm` — options for `SoulMem.LLM.chat/2`
  (the character's; one attempt by default, `retries:` overrides);
  `:llm_timeout` — ms a revision may take in the background (default
  20000); `:max_concurrency` — most revisions started by one recall
  (default 4; the rest wait for a later recall); `:now`.
  """
  @spec on_recall(Memory.t(), [map()], keyword()) :: {:ok, [map()]} | {:error, Error.t()}
  def on_recall(%Memory{} = memory, items, opts \\ []) when is_list(items) do
    opts = Keyword.validate!(opts, @apply_opts)
    now = opts[:now] || DateTime.utc_now()
    ids = Enum.map(items, & &1.id)

    with {:ok, views} <- views(memory, items, now),
         {:ok, views} <- revise(memory, ids, views, now, opts) do
      {:ok,
       Enum.zip_with(items, views, fn item, v ->
         {content, action} = seen(item, v)

         item
         |> Map.delete(:forgetting)
         |> Map.put(:content, content)
         |> Map.put(:forgetting, %{missing_degree: v.missing_degree, action: action, band: v.band})
       end)}
    end
  end

  # The views the items carry (a recall with views: true), else the engine's.
  defp views(memory, items, now) do
    if items != [] and Enum.all?(items, &match?(%{forgetting: %{visible_text: _}}, &1)),
      do: {:ok, Enum.map(items, & &1.forgetting)},
      else: engine_views(memory, Enum.map(items, & &1.id), now)
  end

  defp engine_views(_memory, [], _now), do: {:ok, []}

  defp engine_views(%Memory{ref: ref}, ids, now),
    do: Error.from_native(Native.forget_recall_views(ref, ids, now_ms(now)))

  # What the character sees of a view and the action that produced it: a memory that did not
  # forget keeps the content retrieval gave it; a revision still due (failed or not landed in
  # time) leaves the masked text (MaskOnly); a cached one counts as Revised.
  defp seen(item, %{action: :no_action}), do: {item.content, :no_action}
  defp seen(_item, %{action: :mask_only} = v), do: {v.visible_text, :mask_only}
  defp seen(_item, %{needs_revision: true} = v), do: {v.visible_text, :mask_only}
  defp seen(_item, v), do: {v.visible_text, :revised}

  # Starts (or joins) the due revisions, waits for them up to the budget, then reads the views
  # again: the engine's revision cache is the one place a landed revision is found.
  # Without a configured LLM nothing is asked: the masked text stands (no task, no warning
  # per recalled memory, no second read of the views).
  defp revise(memory, ids, views, now, opts) do
    llm = Keyword.merge([retries: 0, timeout: opts[:llm_timeout]], opts[:llm] || [])
    due = Enum.filter(views, & &1.needs_revision) |> Enum.take(opts[:max_concurrency])

    cond do
      due == [] or not SoulMem.LLM.client().configured?(llm) ->
        {:ok, views}

      true ->
        budget = opts[:budget] || Application.get_env(:soul_mem, :forget_budget_ms, 1_000)
        deadline = System.monotonic_time(:millisecond) + budget

        due
        |> Enum.map(&start_revision(memory, &1, llm, now))
        |> Enum.each(&await_until(&1, deadline))

        engine_views(memory, ids, now)
    end
  end

  # A revision runs in a task of its own under SoulMem.TaskSupervisor (not linked: it outlives
  # a recall that stops waiting). The task claims the note in SoulMem.Registry; a note already
  # claimed is not asked again, the task waits for the running one instead.
  defp start_revision(memory, %{id: id} = due, llm, now) do
    key = {__MODULE__, :revising, memory.ref, id}

    {:ok, pid} =
      Task.Supervisor.start_child(SoulMem.TaskSupervisor, fn ->
        case Registry.register(SoulMem.Registry, key, nil) do
          {:ok, _} ->
            log_failure(id, revise_one(memory, due, llm, now))

          {:error, {:already_registered, running}} ->
            running |> Process.monitor() |> await_until(:infinity)
        end
      end)

    Process.monitor(pid)
  end

  # Waits for the monitored process to end, until `deadline` (monotonic ms or
  # :infinity); past it the monitor is dropped and the process left running.
  defp await_until(monitor, deadline) do
    wait =
      if deadline == :infinity,
        do: :infinity,
        else: max(deadline - System.monotonic_time(:millisecond), 0)

    receive do
      {:DOWN, ^monitor, :process, _pid, _reason} -> :ok
    after
      wait -> Process.demonitor(monitor, [:flush])
    end
  end

  defp log_failure(_id, {:ok, _text}), do: :ok

  defp log_failure(id, {:error, reason}) do
    Logger.warning(
      "forgetting: revision of #{id} failed (#{inspect(reason, limit: 5)}); showing the masked text"
    )
  end

  # The revision is stored with the parameters the engine forgets with (nil config), those its
  # view was made with.
  defp revise_one(%Memory{ref: ref}, %{id: id, prompt: %{system: system, user: user}}, llm, now) do
    messages = [%{role: :system, content: system}, %{role: :user, content: user}]

    with {:ok, %{content: answer}} <- SoulMem.LLM.client().chat(messages, llm),
         {:ok, out} <-
           Error.from_native(Native.forget_store_revision(ref, id, answer, now_ms(now), nil)),
         do: {:ok, out["visible_text"]}
  rescue
    # Bad LLM options raise: degrade to the mask instead.
    error -> {:error, {:raised, Exception.message(error)}}
  end

  @doc """
  The idle sweep at `now` (no LLM): prunes links whose decayed intensity
  (`intensity × R(source)`) is below `prune_threshold`, refreshes the
  forgetting states, and lists archive candidates (forgettable notes left
  with no link whose missing degree reaches `archive_threshold`; they stay
  in the graph — the caller archives them). Report keys: `"notes"`,
  `"actions"`, `"mean_missing_degree"`, `"pruned"` (`from`, `to`, `link_id`,
  `intensity`, `decayed_intensity`), `"archive"` (readable ids),
  `"states_updated"`.

  Options: `:now` (default now), `:config` (overrides).
  """
  @spec sweep(Memory.t(), keyword()) :: {:ok, map()} | {:error, Error.t()}
  def sweep(%Memory{ref: ref}, opts \\ []) do
    opts = Keyword.validate!(opts, [:now, config: []])

    Error.from_native(Native.forget_sweep(ref, now_ms(opts[:now]), config(opts[:config])))
  end

  @doc "The forgetting state of note `id` (`nil` when it has none)."
  @spec state(Memory.t(), String.t()) :: {:ok, state() | nil} | {:error, Error.t()}
  def state(%Memory{ref: ref}, id) when is_binary(id) do
    with {:ok, state} <- Error.from_native(Native.forget_state(ref, id)),
         do: {:ok, atomize(state)}
  end

  @doc "Every forgetting state, by readable id."
  @spec states(Memory.t()) :: {:ok, [state()]} | {:error, Error.t()}
  def states(%Memory{ref: ref}) do
    with {:ok, states} <- Error.from_native(Native.forget_states(ref)),
         do: {:ok, Enum.map(states, &atomize/1)}
  end

  @doc """
  Masks `text` to `missing_degree` (0..1) as forgetting does: jieba words
  (HMM on) replaced by ` [masked] `, deterministically and monotonically.
  Returns the masked text, the number of masked words and the number of
  maskable words.
  """
  @spec mask_text(String.t(), number()) ::
          {:ok, {String.t(), non_neg_integer(), non_neg_integer()}} | {:error, Error.t()}
  def mask_text(text, missing_degree) when is_binary(text) and is_number(missing_degree),
    do: Error.from_native(Native.forget_mask_text(text, missing_degree / 1))

  @state_keys Map.new(
                ~w(id missing_degree band revised_text original_text updated_at)a,
                &{Atom.to_string(&1), &1}
              )

  defp atomize(nil), do: nil

  defp atomize(map),
    do: for({k, v} <- map, Map.has_key?(@state_keys, k), into: %{}, do: {@state_keys[k], v})

  defp now_ms(nil), do: System.system_time(:millisecond)
  defp now_ms(%DateTime{} = now), do: DateTime.to_unix(now, :millisecond)

  defp now_ms(other),
    do: raise(ArgumentError, "expected :now to be a DateTime, got: #{inspect(other)}")
end

defmodule SoulMem.Character.StateTest do
  # The character's transitions without a process: state + event → state + effects.
  use ExUnit.Case, async: true

  alias SoulMem.Character.State
  alias SoulMem.Window

  @now ~U[2026-06-01 12:00:00.000Z]

  defmodule Consolidates do
    @moduledoc false
    @behaviour SoulMem.Maintenance
    @impl true
    def tasks, do: [:consolidate, :summarize_pending]
    @impl true
    def run(_task, _snapshot), do: {:ok, []}
  end

  @config %{
    idle_after: 1_000,
    stop_after: 60_000,
    maintenance: [Consolidates],
    maintenance_interval: 10_000,
    summary_retry: 100,
    summary_max_retry: 1_000
  }

  defp new(opts \\ []) do
    window = Window.new(capacity: opts[:capacity] || 2, interval: opts[:interval] || 2)

    State.new(
      "ann",
      window,
      Map.merge(@config, Map.new(opts[:config] || [])),
      Keyword.get(opts, :persisted?, true)
    )
  end

  defp loaded(opts \\ []) do
    {state, _effects} = State.apply_event(new(opts), {:loaded, :model})
    state
  end

  defp user(text), do: %{role: :user, text: text, at: @now}

  # Pushes as the process does: the window first, then (stored under seqs
  # 100, 101, …) the :pushed event.
  defp push(state, texts) do
    {:ok, window, rows} = State.push(state, Enum.map(texts, &user/1), @now)

    stored =
      rows
      |> Enum.with_index(100 + length(state.stored))
      |> Enum.map(fn {{w, _}, s} -> {w, s} end)

    State.apply_event(state, {:pushed, window, stored})
  end

  defp effect(effects, pattern_fun), do: Enum.find(effects, pattern_fun)

  test "loading ends Idle with a stop timer; only a persisted character has one" do
    {state, effects} = State.apply_event(new(), {:loaded, :model})
    assert state.status == :idle and state.embedding == :model
    assert {:set_timer, :stop, 60_000} in effects

    {_state, effects} = State.apply_event(new(persisted?: false), {:loaded, :hash})
    refute Enum.any?(effects, &match?({:set_timer, :stop, _}, &1))

    {state, _} = State.apply_event(new(), {:loaded, :partial})
    assert state.running == [:embed_model]
  end

  test "a push makes the character Working, arms the idle timer and disarms the stop timer" do
    {state, effects} = push(loaded(), ["a"])
    assert state.status == :working
    assert {:set_timer, :idle, 1_000} in effects
    assert {:cancel_timer, :stop} in effects
    assert {:notify, :state_changed, :working} in effects

    # A second push does not announce Working again.
    {_state, effects} = push(state, ["b"])
    refute {:notify, :state_changed, :working} in effects
  end

  test "a tagged message sliding out runs one summary job; its answer is saved and announced" do
    {state, effects} = push(loaded(), ["a", "b", "c"])
    assert {:run_summary, job_id, prompt} = effect(effects, &match?({:run_summary, _, _}, &1))
    assert is_list(prompt)
    assert state.running == [{:summary, job_id}]
    # The message that left the window stays (pending) until its summary lands.
    assert state.pop_to == nil
    assert [%{message: %{text: "a"}}] = state.window.pending

    {state, effects} =
      State.apply_event(state, {:task_done, {:summary, job_id}, {:ok, %{content: " s1 "}}})

    assert Window.summary(state.window) == "s1"
    assert {:save_summary, "s1", 100} in effects
    assert {:notify, :summary_updated, "s1"} in effects
    assert state.running == []

    {state, []} = State.apply_event(state, {:saved, :summary, :ok})
    assert state.pop_to == nil
  end

  test "a failed summary is retried with backoff; a blank answer is a failure" do
    {state, effects} = push(loaded(), ["a", "b", "c"])
    {:run_summary, job_id, _} = effect(effects, &match?({:run_summary, _, _}, &1))

    {state, effects} =
      State.apply_event(state, {:task_done, {:summary, job_id}, {:ok, %{content: "  "}}})

    assert {:notify, :summary_failed, %{job: ^job_id, reason: :empty_summary, retry_in: delay}} =
             effect(effects, &match?({:notify, :summary_failed, _}, &1))

    assert {:set_timer, :retry, ^delay} = effect(effects, &match?({:set_timer, :retry, _}, &1))
    assert state.retry_attempts == 1 and Window.summary(state.window) == ""

    # The retry timer requeues and runs the job again.
    {state, effects} = State.apply_event(state, {:timeout, :retry})
    assert {:run_summary, ^job_id, _} = effect(effects, &match?({:run_summary, _, _}, &1))

    {state, _} = State.apply_event(state, {:task_done, {:summary, job_id}, {:error, :down}})
    assert state.retry_attempts == 2
  end

  test "going Idle writes a changed graph back and starts maintenance; requests cancel its timers" do
    {state, _} = push(loaded(), ["a"])
    {state, _} = State.apply_event(state, {:record, ["sem_a"], @now})
    assert state.dirty and state.records == %{"sem_a" => [@now]}

    {state, effects} = State.apply_event(state, {:timeout, :idle})
    assert state.status == :idle
    assert {:notify, :state_changed, :idle} in effects

    assert {:checkpoint, %{archive: [], then: []}} =
             effect(effects, &match?({:checkpoint, _}, &1))

    assert {:run_maintenance, tasks, []} = effect(effects, &match?({:run_maintenance, _, _}, &1))
    assert Enum.sort(tasks) == [:consolidate, :summarize_pending]

    assert State.maintaining?(state)
    assert State.can_force(state, :consolidate) == {:error, :busy}
    assert State.can_force(state, :forget) == {:error, :unsupported}

    {state, []} = State.apply_event(state, {:saved, {:checkpoint, []}, :ok})
    refute state.dirty

    # Maintenance done while Idle: the next run is scheduled.
    {state, effects} =
      State.apply_event(state, {:task_done, :maintenance, [{:consolidate, {:ok, []}}]})

    refute State.maintaining?(state)
    assert {:set_timer, :maintenance, 10_000} in effects

    assert {:notify, :maintenance_done, %{tasks: ^tasks}} =
             effect(effects, &match?({:notify, :maintenance_done, _}, &1))

    {_state, effects} = State.apply_event(state, :request)
    assert {:cancel_timer, :maintenance} in effects
  end

  test "a consolidation clears the summary it folded in and the records before it" do
    {state, effects} = push(loaded(), ["a", "b", "c"])
    {:run_summary, job_id, _} = effect(effects, &match?({:run_summary, _, _}, &1))

    {state, _} =
      State.apply_event(state, {:task_done, {:summary, job_id}, {:ok, %{content: "s1"}}})

    {state, _} = State.apply_event(state, {:record, ["old"], ~U[2026-05-01 00:00:00.000Z]})
    {state, _} = State.apply_event(state, {:record, ["new"], @now})
    {state, _} = State.apply_event(state, {:force, :consolidate})

    change =
      {:consolidated, %{summary: "s1", records_until: ~U[2026-05-02 00:00:00Z], report: :x}}

    {state, effects} =
      State.apply_event(state, {:task_done, :maintenance, [{:consolidate, {:ok, [change]}}]})

    assert Window.summary(state.window) == ""
    assert Map.keys(state.records) == ["new"]

    assert {:notify, :consolidated, %{summary: "s1"}} =
             effect(effects, &match?({:notify, :consolidated, _}, &1))

    # The graph changed: one checkpoint, carrying the (now empty) summary.
    assert {:checkpoint, %{summary: ""}} = effect(effects, &match?({:checkpoint, _}, &1))
  end

  test "a failed checkpoint keeps the graph dirty and runs its fallback" do
    {state, {:checkpoint, %{archive: ["x"], then: [_]}}} =
      State.checkpoint(loaded(), ["x"], [{:save_summary, "s", nil}])

    {state, effects} =
      State.apply_event(
        state,
        {:saved, {:checkpoint, [{:save_summary, "s", nil}]}, {:error, :disk_full}}
      )

    assert state.dirty
    assert effects == [{:save_summary, "s", nil}]
  end

  test "an idle persisted character stops once nothing runs" do
    state = loaded()

    assert {_, [{:notify, :state_changed, :stopped}, :stop]} =
             State.apply_event(state, {:timeout, :stop})

    busy = %{state | running: [{:summary, 1}]}
    assert {_, [{:set_timer, :stop, 60_000}]} = State.apply_event(busy, {:timeout, :stop})

    # The atom from operators: only an idle persisted character.
    assert {_, []} = State.apply_event(loaded(persisted?: false), {:force_idle_stop})
    {working, _} = State.apply_event(state, :request)
    assert {_, []} = State.apply_event(working, {:force_idle_stop})
  end

  test "feedback and records keep the newest 256 per note; history lists them oldest first" do
    state =
      Enum.reduce(1..300, loaded(), fn i, acc ->
        {acc, _} =
          State.apply_event(
            acc,
            {:feedback, "n", if(rem(i, 2) == 0, do: 1, else: -1), DateTime.add(@now, i)}
          )

        acc
      end)

    history = State.history(state, :feedback)["n"]
    assert length(history) == 256
    assert List.first(history) == {-1, DateTime.add(@now, 45)}
    assert List.last(history) == {1, DateTime.add(@now, 300)}
  end

  test "a stored window is restored into a fresh one; invalid pushes change nothing" do
    stored = %{
      summary: "before",
      window:
        for(
          {t, i} <- Enum.with_index(~w(a b c)),
          do: %{role: "user", text: t, at: @now, seq: 7 + i}
        ),
      records: [{"n", @now}],
      feedback: [{"n", 1, @now}]
    }

    {:ok, state} = State.restore(new(), stored)
    assert Enum.map(Window.messages(state.window), & &1.text) == ~w(b c)
    assert Window.summary(state.window) == "before"
    assert state.records == %{"n" => [@now]}

    assert {:error, _} = State.push(state, [%{role: :user, text: ""}], @now)
    assert {:error, :invalid_message} = State.push(state, :nope, @now)
  end
end

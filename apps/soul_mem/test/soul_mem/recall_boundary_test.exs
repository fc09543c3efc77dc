defmodule SoulMem.RecallBoundaryTest do
  # The Elixir↔Rust boundary of one recall, counted by tracing: how many NIF
  # calls a recall makes (the caller's and the character's), that no JSON is
  # encoded or decoded on the way, and that an unchanged character reuses its
  # decay factors.
  use ExUnit.Case, async: false

  import SoulMem.TestSupport

  alias SoulMem.{Character, Memory}

  @moduletag :capture_log

  setup do
    id = "boundary-#{System.unique_integer([:positive])}"

    pid =
      start_supervised!(
        {Character, id: id, graph: demo_fixture(), embedder: :hash, persist: false},
        id: id
      )

    {:ok, _} = Character.info(id)
    {:ok, id: id, pid: pid}
  end

  # Calls into SoulMem.Native and SoulMem.JSON made by `fun` (in a process of
  # its own: a process does not trace itself) and by the character, until the
  # character has handled the recall's record cast.
  defp traced(pid, fun) do
    caller = self()

    runner =
      spawn_link(fn ->
        receive do
          :go -> send(caller, {:ran, fun.()})
        end
      end)

    :erlang.trace_pattern({SoulMem.Native, :_, :_}, true, [:global])
    :erlang.trace_pattern({SoulMem.JSON, :_, :_}, true, [:global])
    :erlang.trace(runner, true, [:call])
    :erlang.trace(pid, true, [:call])

    try do
      send(runner, :go)
      assert_receive {:ran, _}, 10_000
      # The record cast is handled before this call's reply.
      {:ok, _} = Character.records(pid)
    after
      :erlang.trace(pid, false, [:call])
      :erlang.trace_pattern({SoulMem.Native, :_, :_}, false, [:global])
      :erlang.trace_pattern({SoulMem.JSON, :_, :_}, false, [:global])
    end

    collect([])
  end

  defp collect(acc) do
    receive do
      {:trace, _pid, :call, {module, name, _args}} -> collect([{module, name} | acc])
    after
      0 -> Enum.reverse(acc)
    end
  end

  test "a recall from text crosses into Rust twice (recall, record) and encodes no JSON",
       %{id: id, pid: pid} do
    calls =
      traced(pid, fn ->
        assert {:ok, result} =
                 SoulMem.recall(id, %{
                   messages: [%{role: :user, text: "你还记得和小白吃麻辣烫那次吗？"}]
                 })

        assert result.memories != []
        assert Enum.all?(result.memories, &match?(%{forgetting: %{action: _}}, &1))
      end)

    assert Enum.filter(calls, &match?({SoulMem.Native, _}, &1)) ==
             [{SoulMem.Native, :engine_recall}, {SoulMem.Native, :engine_record}]

    assert Enum.filter(calls, &match?({SoulMem.JSON, _}, &1)) == []
  end

  test "100 recalls of an unchanged character reuse its decay factors", %{id: id} do
    {:ok, memory} = Character.memory(id)
    %{hits: hits0, misses: misses0} = Memory.decay_cache(memory)

    # Each recall records what it returned (retrieval counts change retention): the cached
    # factors are patched for those notes, not recomputed.
    for i <- 1..100, do: {:ok, _} = SoulMem.recall(id, %{text: "麻辣烫 #{rem(i, 7)}"})

    %{hits: hits, misses: misses} = Memory.decay_cache(memory)
    assert hits + misses - hits0 - misses0 == 100
    # At most one miss per decay time bucket (60 s) the run spans.
    assert misses - misses0 <= 2
  end

  test "recalls of an unchanged character run under the graph's read lock", %{id: id} do
    {:ok, memory} = Character.memory(id)

    locks =
      for i <- 1..100 do
        {:ok, result} = SoulMem.Retrieval.recall(memory, %{text: "小白 #{rem(i, 5)}"}, views: true)
        # What SoulMem.recall does next: the character records the recalled notes.
        :ok = Character.record(id, Enum.map(result.memories, & &1.id), DateTime.utc_now())
        result.lock
      end

    # The first recall may build the decay factors (write lock); a new decay time bucket
    # (60 s) during the run may cost one more.
    assert Enum.count(locks, &(&1 == :write)) <= 2
  end
end

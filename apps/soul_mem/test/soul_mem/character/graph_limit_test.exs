defmodule SoulMem.Character.GraphLimitTest do
  # Changes the application env: not async.
  use ExUnit.Case, async: false

  import SoulMem.TestSupport

  alias SoulMem.{Character, Characters}

  @moduletag :capture_log

  setup :tmp_dir

  setup do
    before = Application.get_env(:soul_mem, :graph_max_bytes)

    on_exit(fn ->
      if before,
        do: Application.put_env(:soul_mem, :graph_max_bytes, before),
        else: Application.delete_env(:soul_mem, :graph_max_bytes)
    end)
  end

  test "a graph file over :graph_max_bytes is refused; under it the character starts", context do
    size = File.stat!(demo_fixture()).size
    id = "graph-limit-#{System.unique_integer([:positive])}"
    opts = [id: id, graph: demo_fixture(), persist: true, data_dir: context.tmp_dir]

    Application.put_env(:soul_mem, :graph_max_bytes, size - 1)
    {:ok, pid} = Characters.ensure_started(id, opts)
    ref = Process.monitor(pid)
    assert_receive {:DOWN, ^ref, :process, ^pid, reason}, 30_000
    assert inspect(reason) =~ "too_large", inspect(reason)

    Application.put_env(:soul_mem, :graph_max_bytes, size)
    {:ok, pid} = Characters.ensure_started(id, opts)
    assert {:ok, _info} = Character.info(pid, 30_000)
    {:ok, memory} = Character.memory(pid)
    assert SoulMem.Memory.stats(memory).nodes == 53
    Characters.stop(id)
  end
end

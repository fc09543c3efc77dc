defmodule SoulMem.NativeTest do
  # Not async: the leak test counts live graph handles across the VM.
  use ExUnit.Case, async: false

  import SoulMem.TestSupport

  alias SoulMem.{Memory, Native}

  test "the NIF is loaded from priv/native" do
    assert is_integer(Native.live_graph_handles())
    assert File.regular?(Path.join(:code.priv_dir(:soul_mem), "native/libsoul_mem_nif.so"))
  end

  test "a wrong argument type raises ArgumentError" do
    assert_raise ArgumentError, fn -> Native.graph_new(:not_a_binary) end
    assert_raise ArgumentError, fn -> Native.graph_stats(make_ref()) end
  end

  test "a panic inside a NIF raises in the caller and leaves the VM working" do
    error = assert_raise ErlangError, fn -> Native.debug_panic("on purpose") end
    assert error.original == :nif_panicked

    # Same process, then another process: the NIF keeps working.
    assert %{nodes: 2} = Memory.stats(Memory.import_json!("p", two_nodes()))

    task = Task.async(fn -> Memory.stats(Memory.new("after-panic")) end)
    assert %{nodes: 0} = Task.await(task)
  end

  test "a panic in another process raises there and leaves the caller alone" do
    {pid, ref} =
      spawn_monitor(fn ->
        # Exit with the caught error rather than crash: same signal, no crash report.
        try do
          Native.debug_panic("in a child")
        catch
          kind, reason -> exit({:shutdown, {kind, reason}})
        end
      end)

    assert_receive {:DOWN, ^ref, :process, ^pid, {:shutdown, {:error, :nif_panicked}}}
    assert %{nodes: 0} = Memory.stats(Memory.new("caller"))
  end

  describe "graph handles are freed" do
    test "when the process that held them exits" do
      baseline = Native.live_graph_handles()
      parent = self()

      {pid, ref} =
        spawn_monitor(fn ->
          handles = for i <- 1..1_000, do: Native.graph_new("leak-#{i}")
          send(parent, {:live, Native.live_graph_handles(), length(handles)})
        end)

      assert_receive {:live, live, 1_000}
      assert live >= baseline + 1_000
      assert_receive {:DOWN, ^ref, :process, ^pid, :normal}

      assert_back_to(baseline)
    end

    test "when the holder drops them and collects garbage" do
      baseline = Native.live_graph_handles()

      handles = for i <- 1..1_000, do: Native.graph_new("leak-#{i}")
      assert Native.live_graph_handles() >= baseline + 1_000
      assert length(handles) == 1_000

      # Drop the only reference, then collect this process's garbage.
      handles = nil
      refute handles
      :erlang.garbage_collect()

      assert_back_to(baseline)
    end

    test "imported graphs too" do
      baseline = Native.live_graph_handles()
      json = two_nodes()

      task =
        Task.async(fn ->
          memories = for _ <- 1..200, do: Memory.import_json!("leak", json)
          {Native.live_graph_handles(), length(memories)}
        end)

      assert {live, 200} = Task.await(task)
      assert live >= baseline + 200
      assert_back_to(baseline)
    end
  end

  defp two_nodes, do: graph_json([semantic("a", ["b"]), semantic("b")])

  # Resource destructors run when the terms' owner heap is collected or freed;
  # poll with garbage collections first and only then back off briefly.
  defp assert_back_to(baseline, attempt \\ 0) do
    live = Native.live_graph_handles()

    cond do
      live <= baseline ->
        assert live == baseline

      attempt < 100 ->
        :erlang.garbage_collect()
        :erlang.yield()
        assert_back_to(baseline, attempt + 1)

      attempt < 200 ->
        Process.sleep(10)
        assert_back_to(baseline, attempt + 1)

      true ->
        flunk("#{live - baseline} graph handles still alive (baseline #{baseline})")
    end
  end
end

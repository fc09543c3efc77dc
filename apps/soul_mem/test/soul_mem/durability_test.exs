defmodule SoulMem.DurabilityTest do
  # The durability contract end to end: the service runs as a separate OS
  # process, streams acknowledged writes, and is killed with SIGKILL at a
  # random point; every acknowledged write must be in the store afterwards.
  use ExUnit.Case, async: true

  import SoulMem.TestSupport

  alias SoulMem.Store

  @moduletag :durability
  @moduletag timeout: 300_000

  @writer Path.expand("../support/durability_writer.exs", __DIR__)

  setup :tmp_dir

  defp elixir!, do: System.find_executable("elixir") || flunk("elixir is not on PATH")

  # The test VM's code paths (build dirs of the umbrella apps included), so
  # the child runs exactly the code under test.
  defp code_path_args do
    :code.get_path()
    |> Enum.map(&List.to_string/1)
    |> Enum.filter(&String.contains?(&1, "_build"))
    |> Enum.flat_map(&["-pa", &1])
  end

  # Runs the writer for writes from..to and kills it with SIGKILL after
  # `kill_after` acknowledged writes. Returns the acknowledged writes and
  # feedbacks.
  defp run_and_kill(dir, id, from, to, kill_after) do
    args = code_path_args() ++ [@writer, dir, id, demo_fixture(), "#{from}", "#{to}"]

    port =
      Port.open({:spawn_executable, elixir!()}, [
        :binary,
        :exit_status,
        {:line, 4096},
        args: args
      ])

    {:os_pid, os_pid} = Port.info(port, :os_pid)
    collect(port, os_pid, kill_after, %{acks: [], fbs: [], killed: false})
  end

  defp collect(port, os_pid, kill_after, acc) do
    receive do
      {^port, {:data, {:eol, "ack " <> i}}} ->
        acc = %{acc | acks: [String.to_integer(i) | acc.acks]}

        if length(acc.acks) == kill_after and not acc.killed do
          {_, 0} = System.cmd("kill", ["-KILL", "#{os_pid}"])
          collect(port, os_pid, kill_after, %{acc | killed: true})
        else
          collect(port, os_pid, kill_after, acc)
        end

      {^port, {:data, {:eol, "fb " <> i}}} ->
        collect(port, os_pid, kill_after, %{acc | fbs: [String.to_integer(i) | acc.fbs]})

      {^port, {:data, _other}} ->
        collect(port, os_pid, kill_after, acc)

      {^port, {:exit_status, status}} ->
        assert acc.killed, "writer exited on its own with status #{status} before the kill"
        # 128 + SIGKILL
        assert status == 137
        %{acks: Enum.reverse(acc.acks), fbs: Enum.reverse(acc.fbs)}
    after
      120_000 -> flunk("writer stalled after #{length(acc.acks)} acknowledged writes")
    end
  end

  defp stored(dir, id) do
    {:ok, store} = Store.open(dir, id)
    {:ok, state} = Store.load(store)
    Store.close(store)
    texts = MapSet.new(state.window, & &1.text)
    feedbacks = Enum.count(state.feedback, &match?({"sem_self", 1, _}, &1))
    {texts, feedbacks}
  end

  test "1,000 acknowledged writes survive kill -9 at random points, across restarts", ctx do
    id = "durable-#{System.unique_integer([:positive])}"
    # Two rounds: 1..1000 killed at a random point, then a restart that
    # continues and is killed again.
    k1 = 100 + :rand.uniform(700)
    first = run_and_kill(ctx.tmp_dir, id, 1, 1_000, k1)
    assert length(first.acks) >= k1

    {texts, feedbacks} = stored(ctx.tmp_dir, id)
    missing = Enum.reject(first.acks, &MapSet.member?(texts, "w#{&1}"))
    assert missing == [], "acknowledged but lost: #{inspect(Enum.take(missing, 10))}"
    assert feedbacks >= length(first.fbs)

    from = List.last(first.acks) + 1
    k2 = 50 + :rand.uniform(200)
    second = run_and_kill(ctx.tmp_dir, id, from, from + 999, k2)

    {texts, feedbacks} = stored(ctx.tmp_dir, id)
    missing = Enum.reject(first.acks ++ second.acks, &MapSet.member?(texts, "w#{&1}"))
    assert missing == [], "acknowledged but lost: #{inspect(Enum.take(missing, 10))}"
    assert feedbacks >= length(first.fbs) + length(second.fbs)
  end

  test "SIGTERM stops the service gracefully and the graph is written back", ctx do
    id = "sigterm-#{System.unique_integer([:positive])}"
    args = code_path_args() ++ [@writer, ctx.tmp_dir, id, demo_fixture(), "1", "5", "serve"]

    port =
      Port.open({:spawn_executable, elixir!()}, [:binary, :exit_status, {:line, 4096}, args: args])

    {:os_pid, os_pid} = Port.info(port, :os_pid)
    recalled = await_serving(port, nil)
    assert recalled != []
    {_, 0} = System.cmd("kill", ["-TERM", "#{os_pid}"])
    assert_receive {^port, {:exit_status, 0}}, 60_000

    {:ok, store} = Store.open(ctx.tmp_dir, id)
    {:ok, state} = Store.load(store)
    Store.close(store)
    assert Enum.map(state.window, & &1.text) == Enum.map(1..5, &"w#{&1}")

    for note_id <- recalled do
      {:ok, note} = SoulMem.Memory.get_note(state.memory, note_id)
      assert note["retrieval_count"] >= 1, "#{note_id} lost its retrieval count"
    end
  end

  defp await_serving(port, recalled) do
    receive do
      {^port, {:data, {:eol, "recalled " <> ids}}} -> await_serving(port, String.split(ids, ","))
      {^port, {:data, {:eol, "serving"}}} -> recalled
      {^port, {:data, _}} -> await_serving(port, recalled)
      {^port, {:exit_status, status}} -> flunk("service exited with #{status} before serving")
    after
      120_000 -> flunk("service did not start")
    end
  end
end

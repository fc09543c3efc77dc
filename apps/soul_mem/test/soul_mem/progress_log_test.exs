defmodule SoulMem.ProgressLogTest do
  # Not async: the test config logs warnings only; these tests lower the level briefly.
  use ExUnit.Case, async: false

  import ExUnit.CaptureLog

  alias SoulMem.ProgressLog

  setup do
    level = Logger.level()
    Logger.configure(level: :info)
    on_exit(fn -> Logger.configure(level: level) end)
  end

  test "logs progress lines and the total when the job is long enough" do
    log =
      capture_log([level: :info], fn ->
        pid = ProgressLog.start("job", every_ms: 0)
        send(pid, {:soul_mem_embed_progress, 64, 256})
        send(pid, {:soul_mem_embed_progress, 128, 256})
        send(pid, {:soul_mem_embed_progress, 256, 256})
        assert :ok = ProgressLog.stop(pid)
      end)

    assert log =~ "job: 64/256 (25%)"
    assert log =~ "job: 128/256 (50%)"
    # The last report is the summary line, not a progress line.
    refute log =~ "256/256 (100%)"
    assert log =~ ~r/job: 256\/256 done in \d+ ms/
  end

  test "a short job logs nothing" do
    log =
      capture_log([level: :info], fn ->
        pid = ProgressLog.start("quick", every_ms: 60_000)
        send(pid, {:soul_mem_embed_progress, 10, 20})
        send(pid, {:soul_mem_embed_progress, 20, 20})
        ProgressLog.stop(pid)
      end)

    refute log =~ "quick"
  end

  test "options are validated" do
    assert_raise ArgumentError, fn -> ProgressLog.start("x", every_ms: -1) end
    assert_raise ArgumentError, fn -> ProgressLog.start("x", bogus: 1) end
  end
end

defmodule SoulMem.BackoffTest do
  use ExUnit.Case, async: true

  alias SoulMem.Backoff

  test "the base delay doubles from base and stops at the cap" do
    assert Enum.map(0..8, &Backoff.base_delay(&1, 5_000, 300_000)) ==
             [5_000, 10_000, 20_000, 40_000, 80_000, 160_000, 300_000, 300_000, 300_000]

    # A long outage does not build huge numbers.
    assert Backoff.base_delay(10_000, 5_000, 300_000) == 300_000
    assert Backoff.base_delay(3, 0, 100) == 0
  end

  test "jitter adds less than a quarter of the base delay" do
    for attempt <- 0..7, _ <- 1..50 do
      base = Backoff.base_delay(attempt, 40, 2_000)
      delay = Backoff.delay(attempt, 40, 2_000)
      assert delay >= base and delay <= base + div(base, 4)
    end

    assert Backoff.delay(0, 0, 0) == 0
  end

  test "invalid arguments raise" do
    assert_raise FunctionClauseError, fn -> Backoff.base_delay(-1, 1, 1) end
    assert_raise FunctionClauseError, fn -> Backoff.delay(0, -5, 1) end
  end
end

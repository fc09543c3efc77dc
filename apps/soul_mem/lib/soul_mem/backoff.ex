defmodule SoulMem.Backoff do
  @moduledoc """
  Exponential backoff with jitter, shared by the LLM client's request
  retries and a character's summary retries. Pure: no processes, no sleeps.
  """

  # 2^32 × any sane base is already past every cap: bounding the exponent
  # keeps a long outage from building huge integers.
  @max_exponent 32

  @doc """
  The delay in ms before retry number `attempt` (0 for the first retry),
  without jitter: `base * 2^attempt`, capped at `max`.
  """
  @spec base_delay(non_neg_integer(), non_neg_integer(), non_neg_integer()) :: non_neg_integer()
  def base_delay(attempt, base, max)
      when is_integer(attempt) and attempt >= 0 and is_integer(base) and base >= 0 and
             is_integer(max) and max >= 0 do
    min(base * Integer.pow(2, min(attempt, @max_exponent)), max)
  end

  @doc """
  `base_delay/3` plus a random jitter below a quarter of it, so that callers
  failing together (one LLM outage, many characters) do not retry in
  lockstep. The result is in `d..d + div(d, 4)` for `d = base_delay(...)`.
  """
  @spec delay(non_neg_integer(), non_neg_integer(), non_neg_integer()) :: non_neg_integer()
  def delay(attempt, base, max) do
    delay = base_delay(attempt, base, max)
    delay + :rand.uniform(max(div(delay, 4), 1)) - 1
  end
end

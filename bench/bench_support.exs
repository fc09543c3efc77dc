# Helpers shared by the bench scripts: `Code.require_file("bench_support.exs", __DIR__)`.
defmodule BenchSupport do
  @moduledoc false

  @doc "The `p` quantile (0..1) of `list`, by nearest rank."
  @spec percentile([number()], float()) :: number()
  def percentile(list, p) do
    sorted = Enum.sort(list)
    Enum.at(sorted, min(length(sorted) - 1, floor(p * length(sorted))))
  end
end

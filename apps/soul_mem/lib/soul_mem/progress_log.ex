defmodule SoulMem.ProgressLog do
  @moduledoc """
  Logs the progress of a long native job (embedding a large graph takes minutes) while the
  caller is blocked in the NIF: a linked process receives the job's
  `{:soul_mem_embed_progress, done, total}` messages and logs at most every `:every_ms`
  (default 2 s), so small graphs stay quiet and large ones show they are alive.

      log = SoulMem.ProgressLog.start("character alice: embedding")
      SoulMem.Embedding.embed_graph(memory, progress: log)
      SoulMem.ProgressLog.stop(log)
  """

  require Logger

  @doc """
  Starts a logger process for the job `label`; pass its pid as the job's progress receiver.
  Options: `:every_ms` — minimum interval between lines (default 2000).
  """
  @spec start(String.t(), keyword()) :: pid()
  def start(label, opts \\ []) when is_binary(label) do
    opts = Keyword.validate!(opts, every_ms: 2_000)
    every = opts[:every_ms]

    unless is_integer(every) and every >= 0,
      do: raise(ArgumentError, ":every_ms must be a non-negative integer, got: #{inspect(every)}")

    now = System.monotonic_time(:millisecond)
    spawn_link(fn -> loop(%{label: label, every: every, started: now, last: now, seen: nil}) end)
  end

  @doc """
  Stops the logger, logging the total time when the job was long enough to be reported.
  Waits until the process has written its last line.
  """
  @spec stop(pid()) :: :ok
  def stop(pid) when is_pid(pid) do
    ref = Process.monitor(pid)
    send(pid, :stop)

    receive do
      {:DOWN, ^ref, :process, ^pid, _} -> :ok
    end
  end

  defp loop(state) do
    receive do
      {:soul_mem_embed_progress, done, total} ->
        now = System.monotonic_time(:millisecond)
        state = %{state | seen: {done, total}}

        if now - state.last >= state.every and done < total do
          Logger.info("#{state.label}: #{done}/#{total} (#{percent(done, total)}%)")
          loop(%{state | last: now})
        else
          loop(state)
        end

      :stop ->
        elapsed = System.monotonic_time(:millisecond) - state.started

        case state.seen do
          {done, total} when elapsed >= state.every ->
            Logger.info("#{state.label}: #{done}/#{total} done in #{elapsed} ms")

          _ ->
            :ok
        end
    end
  end

  defp percent(_done, 0), do: 100
  defp percent(done, total), do: div(done * 100, total)
end

defmodule SoulMem.LLM.Profile do
  @moduledoc """
  Owns the `:soul_mem_llm` httpc profile: starts it (under `:inets`) when the
  application supervisor starts this worker, with
  `max_keep_alive_length: 0` so that concurrent LLM calls each get their own
  connection, and stops it on shutdown.
  """

  use GenServer

  @doc "Starts the worker (and the profile)."
  @spec start_link(keyword()) :: GenServer.on_start()
  def start_link(opts \\ []) do
    opts = Keyword.validate!(opts, max_sessions: 16)
    GenServer.start_link(__MODULE__, opts, name: __MODULE__)
  end

  @impl true
  def init(opts) do
    Process.flag(:trap_exit, true)
    profile = SoulMem.LLM.profile()

    case :inets.start(:httpc, profile: profile) do
      {:ok, _pid} -> :ok
      {:error, {:already_started, _pid}} -> :ok
    end

    :ok =
      :httpc.set_options(
        [max_keep_alive_length: 0, max_sessions: opts[:max_sessions]],
        profile
      )

    {:ok, profile}
  end

  @impl true
  def terminate(_reason, profile) do
    :inets.stop(:httpc, profile)
    :ok
  end
end

defmodule SoulMemWeb.Application do
  @moduledoc false

  use Application

  require Logger

  # The endpoint is served only when configured (`config :soul_mem_web,
  # server: true`, set by `mix soul.server`), so that tests and `mix` tasks of
  # the umbrella never bind the port; tests start it with start_supervised!.
  @impl true
  def start(_type, _args) do
    demo = Application.get_env(:soul_mem, :demo_token)
    configured = if is_binary(demo) and demo != "", do: %{"demo" => demo}, else: %{}

    children =
      [
        {Registry, keys: :duplicate, name: SoulMemWeb.Tokens.Subscribers},
        {Registry, keys: :duplicate, name: SoulMemWeb.Socket.Registry},
        SoulMemWeb.RateLimit,
        {SoulMemWeb.Tokens,
         configured: configured, operator: Application.get_env(:soul_mem_web, :operator_token)}
      ] ++ served()

    with {:ok, pid} <-
           Supervisor.start_link(children, strategy: :one_for_one, name: SoulMemWeb.Supervisor) do
      if Application.get_env(:soul_mem_web, :generate_demo_token, false) do
        if configured == %{}, do: ensure_demo_token()
        ensure_operator_token()
      end

      {:ok, pid}
    end
  end

  # The endpoint, and the MessagePack data plane when a port is configured for
  # it (SOUL_MEM_DATA_PORT): both only when serving.
  defp served do
    if Application.get_env(:soul_mem_web, :server, false) do
      [SoulMemWeb.Endpoint] ++
        if SoulMemWeb.DataPlane.configured?(), do: [SoulMemWeb.DataPlane], else: []
    else
      []
    end
  end

  # Likewise the operator token of the page's operator view.
  defp ensure_operator_token do
    unless SoulMemWeb.Tokens.operators?() do
      case SoulMemWeb.Tokens.create_operator() do
        {:ok, token} ->
          IO.puts(
            "SoulMem: the operator token (shown once; for the page's operator view): #{token}"
          )

        {:error, reason} ->
          Logger.error("SoulMem: could not create the operator token: #{inspect(reason)}")
      end
    end
  end

  # A release has no well-known token: at first start the demo character gets a
  # random one, stored hashed like any other and shown once, here.
  defp ensure_demo_token do
    if "demo" not in SoulMemWeb.Tokens.characters() do
      case SoulMemWeb.Tokens.create("demo") do
        {:ok, token} ->
          IO.puts(
            "SoulMem: the demo character's token (shown once; revoke with " <>
              "`mix soul.token --revoke demo`): #{token}"
          )

        {:error, reason} ->
          Logger.error("SoulMem: could not create the demo token: #{inspect(reason)}")
      end
    end
  end
end

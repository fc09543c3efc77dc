defmodule SoulMemWeb.Application do
  @moduledoc false

  use Application

  # The endpoint is served only when configured (`config :soul_mem_web,
  # server: true`, set by `mix soul.server`), so that tests and `mix` tasks of
  # the umbrella never bind the port; tests start it with start_supervised!.
  @impl true
  def start(_type, _args) do
    demo = Application.get_env(:soul_mem, :demo_token)
    configured = if is_binary(demo) and demo != "", do: %{"demo" => demo}, else: %{}

    children =
      [{SoulMemWeb.Tokens, configured: configured}] ++
        if Application.get_env(:soul_mem_web, :server, false), do: [SoulMemWeb.Endpoint], else: []

    Supervisor.start_link(children, strategy: :one_for_one, name: SoulMemWeb.Supervisor)
  end
end

defmodule SoulMemWeb.MixProject do
  use Mix.Project

  def project do
    [
      app: :soul_mem_web,
      version: "0.1.0",
      build_path: "../../_build",
      config_path: "../../config/config.exs",
      deps_path: "../../deps",
      lockfile: "../../mix.lock",
      elixir: "~> 1.14",
      start_permanent: Mix.env() == :prod,
      deps: deps()
    ]
  end

  def application do
    [
      mod: {SoulMemWeb.Application, []},
      extra_applications: [:logger]
    ]
  end

  defp deps do
    [
      {:soul_mem, in_umbrella: true}
    ]
  end
end

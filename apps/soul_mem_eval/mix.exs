defmodule SoulMemEval.MixProject do
  use Mix.Project

  # Evaluation tools over the runtime (`mix soul.playtest`, `mix soul.consolidate` and the
  # consolidation suite behind it): they use the `SoulMem` façade like any client and are
  # not part of the release.
  def project do
    [
      app: :soul_mem_eval,
      version: "0.1.0",
      build_path: "../../_build",
      config_path: "../../config/config.exs",
      deps_path: "../../deps",
      lockfile: "../../mix.lock",
      elixir: "~> 1.14",
      deps: [{:soul_mem, in_umbrella: true}]
    ]
  end

  def application do
    [extra_applications: [:logger]]
  end
end

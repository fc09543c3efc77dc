# The NIF compiler runs before this project's own sources are compiled (see
# `compilers:` below), so Mix cannot find it in ebin/ on a fresh checkout: it
# is loaded from source here, every time Mix loads this file. It is also left
# out of `elixirc_paths` (a second definition of the same module would warn,
# and build tooling has no place in the release).
unless Code.ensure_loaded?(Mix.Tasks.Compile.SoulMemNif) do
  Code.require_file("lib/mix/tasks/compile.soul_mem_nif.ex", __DIR__)
end

defmodule SoulMem.MixProject do
  use Mix.Project

  @nif_compiler "lib/mix/tasks/compile.soul_mem_nif.ex"

  def project do
    [
      app: :soul_mem,
      version: "0.1.0",
      build_path: "../../_build",
      config_path: "../../config/config.exs",
      deps_path: "../../deps",
      lockfile: "../../mix.lock",
      elixir: "~> 1.14",
      start_permanent: Mix.env() == :prod,
      # The NIF is built before the Elixir sources: compiling SoulMem.Native
      # runs its @on_load in this VM, which must find the fresh library.
      compilers: [:soul_mem_nif | Mix.compilers()],
      elixirc_paths: elixirc_paths(),
      deps: []
    ]
  end

  # Everything under lib/ except the NIF compiler (loaded above). Evaluated on
  # every Mix run, so new files under lib/ are picked up as usual.
  defp elixirc_paths do
    Path.wildcard("lib/**/*.ex") -- [@nif_compiler]
  end

  def application do
    [
      mod: {SoulMem.Application, []},
      extra_applications: [:logger, :jiffy, :inets, :ssl, :public_key]
    ]
  end
end

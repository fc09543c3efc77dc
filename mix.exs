defmodule SoulMem.Umbrella.MixProject do
  use Mix.Project

  def project do
    [
      apps_path: "apps",
      version: "0.1.0",
      start_permanent: Mix.env() == :prod,
      deps: [],
      aliases: aliases(),
      releases: releases()
    ]
  end

  # Everything the project needs comes from OTP, Debian's erlang-* packages and
  # the Rust workspace in native/: there are no Hex dependencies, ever.

  defp aliases do
    [
      # `mix lint`: the Elixir half of scripts/test.sh.
      lint: ["format --check-formatted", "compile --warnings-as-errors"]
    ]
  end

  defp releases do
    [
      soul_mem: [
        applications: [soul_mem: :permanent, soul_mem_web: :permanent],
        include_executables_for: [:unix],
        steps: [:assemble, &copy_demo_character/1, &copy_yaws_headers/1, &copy_page_vendor/1]
      ]
    ]
  end

  # The demo character's graph ships inside the release (priv of soul_mem), so
  # a release serves `demo` without the checkout.
  defp copy_demo_character(release) do
    vsn = release.applications[:soul_mem][:vsn]
    dest = Path.join([release.path, "lib", "soul_mem-#{vsn}", "priv", "characters"])
    File.mkdir_p!(dest)
    File.cp!("fixtures/characters/demo.json", Path.join(dest, "demo.json"))
    release
  end

  # The page's npm libraries (phoenix.js, cytoscape) ship inside the release,
  # so it serves the page without the checkout's node_modules.
  defp copy_page_vendor(release) do
    vsn = release.applications[:soul_mem_web][:vsn]
    dest = Path.join([release.path, "lib", "soul_mem_web-#{vsn}", "priv", "static", "vendor"])
    File.mkdir_p!(dest)

    for {name, source} <- SoulMemWeb.Assets.vendor_files() do
      if File.regular?(source),
        do: File.cp!(source, Path.join(dest, name)),
        else: Mix.raise("#{source} is missing: run scripts/setup.sh (npm ci) before mix release")
    end

    release
  end

  # yaws compiles a small module at start that includes its own headers;
  # `mix release` copies ebin and priv only, so the headers come along here.
  defp copy_yaws_headers(release) do
    vsn = release.applications[:yaws][:vsn]
    src = Path.join(:code.lib_dir(:yaws), "include")
    dest = Path.join([release.path, "lib", "yaws-#{vsn}", "include"])
    File.mkdir_p!(dest)
    File.cp_r!(src, dest)
    release
  end
end

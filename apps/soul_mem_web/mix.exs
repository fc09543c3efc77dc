# Debian's erlang-yaws lives outside OTP's lib dir (/usr/lib/yaws). It is linked
# under _build/<env>/lib/yaws and its ebin prepended here, every time Mix loads
# this file, so that compiling, `mix test` and `mix release` all find it as an
# ordinary library (pointing the code path at /usr/lib directly breaks release
# boot). SOUL_MEM_YAWS_DIR overrides the location.
yaws_dir = System.get_env("SOUL_MEM_YAWS_DIR", "/usr/lib/yaws")
yaws_link = Path.expand("../../_build/#{Mix.env()}/lib/yaws", __DIR__)

if File.dir?(Path.join(yaws_dir, "ebin")) do
  target = Path.expand(yaws_dir)

  case File.read_link(yaws_link) do
    {:ok, ^target} ->
      :ok

    _ ->
      File.mkdir_p!(Path.dirname(yaws_link))
      File.rm(yaws_link)
      File.ln_s!(target, yaws_link)
  end

  Code.prepend_path(Path.join(yaws_link, "ebin"))
end

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
      extra_applications: [:logger, :crypto],
      # yaws runs embedded under SoulMemWeb.Endpoint: started as an OTP
      # application it would read /etc/yaws.conf and stop the VM without one.
      included_applications: [:yaws]
    ]
  end

  defp deps do
    [
      {:soul_mem, in_umbrella: true}
    ]
  end
end

defmodule Mix.Tasks.Compile.SoulMemNifTest do
  use ExUnit.Case, async: true

  import SoulMem.TestSupport

  alias Mix.Tasks.Compile.SoulMemNif

  test "watches the workspace manifests and every crate's sources" do
    native = Path.join(repo_root(), "native")
    inputs = SoulMemNif.inputs(native) |> Enum.map(&Path.relative_to(&1, native))

    assert "Cargo.toml" in inputs
    assert "Cargo.lock" in inputs
    assert "soul_mem_nif/Cargo.toml" in inputs
    assert "soul_mem_nif/src/lib.rs" in inputs
    assert Enum.any?(inputs, &String.starts_with?(&1, "soul_mem_core/src/"))
    refute Enum.any?(inputs, &String.starts_with?(&1, "target/"))
  end

  test "with nothing changed the compiler is a no-op (cargo is not run)" do
    # `mix test` has just compiled the project, so the manifest is current.
    assert SoulMemNif.run([]) == {:noop, []}
  end

  test "the manifest lives under the build path" do
    assert [manifest] = SoulMemNif.manifests()
    assert manifest == Path.join(Mix.Project.manifest_path(), "compile.soul_mem_nif")
  end
end

defmodule Mix.Tasks.Compile.SoulMemNifProjectTest do
  # Drives the compiler through `mix compile` / `mix clean` in a throwaway project with a
  # two-crate Cargo workspace (the NIF crate and a crate it depends on), so rebuilds,
  # failures and cleaning are observed for real without touching the project's own build.
  use ExUnit.Case, async: true

  import SoulMem.TestSupport

  @moduletag :tmp_dir
  @moduletag timeout: 300_000

  test "rebuilds on a dependency's change, fails mix on a cargo error, cleans", %{tmp_dir: dir} do
    cargo = System.find_executable("cargo") || Path.expand("~/.cargo/bin/cargo")
    compiler = Path.join(repo_root(), "apps/soul_mem/lib/mix/tasks/compile.soul_mem_nif.ex")
    app = Path.join(dir, "apps/soul_mem")
    native = Path.join(dir, "native")

    write!(Path.join(app, "mix.exs"), """
    Code.require_file(#{inspect(compiler)})

    defmodule Throwaway.MixProject do
      use Mix.Project

      def project do
        [app: :soul_mem, version: "0.0.1", build_path: "../../_build", deps: [],
         compilers: [:soul_mem_nif]]
      end
    end
    """)

    write!(Path.join(native, "Cargo.toml"), """
    [workspace]
    members = ["soul_mem_nif", "helper"]
    resolver = "2"
    """)

    write!(Path.join(native, "helper/Cargo.toml"), crate_toml("helper", "lib", ""))
    write!(Path.join(native, "helper/src/lib.rs"), "pub fn answer() -> u32 { 41 }\n")

    write!(
      Path.join(native, "soul_mem_nif/Cargo.toml"),
      crate_toml("soul_mem_nif", "cdylib", ~s(helper = { path = "../helper" }))
    )

    write!(
      Path.join(native, "soul_mem_nif/src/lib.rs"),
      "#[no_mangle]\npub extern \"C\" fn answer() -> u32 { helper::answer() }\n"
    )

    {_, 0} = System.cmd(cargo, ["generate-lockfile", "--offline"], cd: native)
    so = Path.join(app, "priv/native/libsoul_mem_nif.so")

    {out, 0} = mix(app, ["compile"])
    assert out =~ "cargo build"
    assert File.regular?(so)
    # Installed by rename, never left as a temporary file.
    assert Path.wildcard(so <> ".tmp-*") == []

    {out, 0} = mix(app, ["compile"])
    refute out =~ "cargo build"

    # A change in the crate the NIF depends on (not in the NIF crate) rebuilds.
    write!(Path.join(native, "helper/src/lib.rs"), "pub fn answer() -> u32 { 42 }\n")
    {out, 0} = mix(app, ["compile"])
    assert out =~ "cargo build"

    # A cargo error fails mix, shows cargo's message and keeps the last good library.
    before = File.read!(so)
    write!(Path.join(native, "helper/src/lib.rs"), "pub fn answer() -> u32 { not_rust }\n")
    {out, status} = mix(app, ["compile"])
    assert status != 0
    assert out =~ "cargo build of soul_mem_nif failed"
    assert out =~ "not_rust"
    assert File.read!(so) == before

    # The failure left the manifest alone, so the fix is built on the next run.
    write!(Path.join(native, "helper/src/lib.rs"), "pub fn answer() -> u32 { 43 }\n")
    {out, 0} = mix(app, ["compile"])
    assert out =~ "cargo build"

    {_, 0} = mix(app, ["clean"])
    refute File.exists?(so)
  end

  defp mix(app, args) do
    System.cmd("mix", args,
      cd: app,
      stderr_to_stdout: true,
      env: [{"MIX_ENV", "dev"}, {"CARGO_TARGET_DIR", nil}, {"SOUL_MEM_SKIP_CARGO", nil}]
    )
  end

  defp crate_toml(name, kind, deps) do
    """
    [package]
    name = "#{name}"
    version = "0.0.1"
    edition = "2021"

    [lib]
    crate-type = ["#{kind}"]

    [dependencies]
    #{deps}
    """
  end

  defp write!(path, contents) do
    File.mkdir_p!(Path.dirname(path))
    File.write!(path, contents)
  end
end

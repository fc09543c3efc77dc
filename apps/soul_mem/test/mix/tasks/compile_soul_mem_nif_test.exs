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

defmodule Mix.Tasks.Compile.SoulMemNif do
  @shortdoc "Builds the soul_mem_nif Rust crate and installs it into priv/native"

  @moduledoc """
  Mix compiler for the Rust NIF of `:soul_mem`.

  Runs `cargo build --release --locked -p soul_mem_nif` in the Cargo
  workspace at `native/` (two levels above the `soul_mem` app) and installs
  `libsoul_mem_nif.so` into `apps/soul_mem/priv/native/` atomically (copy to a
  temporary file, then rename), so a VM that has the old library mapped is
  never handed a half-written file.

  ## When cargo runs

  The compiler fingerprints every input of the workspace:

    * `native/Cargo.toml`, `native/Cargo.lock`, `native/rust-toolchain.toml`,
      `native/.cargo/config.toml`;
    * for every crate `native/*/`: `Cargo.toml`, `build.rs` and every file
      under `src/` (not only `*.rs`: `include_str!`/`include_bytes!` inputs
      live there too).

  The fingerprint (SHA-256 of each file's path and contents) is stored in the
  manifest `compile.soul_mem_nif` under the app's build path. Cargo is invoked
  only when the fingerprint differs from the manifest, when the installed
  library is missing, or with `--force` (`mix compile --force`). With nothing
  changed the compiler returns `:noop` without starting cargo at all.

  A failed build streams cargo's output, reports a diagnostic and leaves the
  manifest untouched, so the next run retries.

  ## Environment

    * `SOUL_MEM_SKIP_CARGO=1` never runs cargo: an installed library is kept,
      or a library already built at `native/target/release/` is installed.
    * `CARGO_TARGET_DIR` is honoured when looking for cargo's output.

  `mix clean` removes the installed library and the manifest.
  """

  use Mix.Task.Compiler

  @recursive true

  @crate "soul_mem_nif"
  @manifest "compile.soul_mem_nif"
  @manifest_vsn 1
  @installed_name "libsoul_mem_nif.so"
  # How much of cargo's output is kept to build the diagnostic on failure.
  @tail_bytes 64 * 1024

  @impl Mix.Task.Compiler
  def run(args) do
    {opts, _argv, _invalid} = OptionParser.parse(args, switches: [force: :boolean])

    if Mix.Project.config()[:app] == :soul_mem do
      compile(Keyword.get(opts, :force, false))
    else
      {:noop, []}
    end
  end

  @impl Mix.Task.Compiler
  def manifests, do: [manifest_path()]

  @impl Mix.Task.Compiler
  def clean do
    File.rm(manifest_path())
    File.rm(installed_path())
    :ok
  end

  defp compile(force?) do
    native = native_dir()

    cond do
      not File.regular?(Path.join(native, "Cargo.toml")) ->
        error("no Cargo workspace at #{native}", native)

      skip_cargo?() ->
        install_prebuilt(native)

      true ->
        fingerprint = fingerprint(native)

        if force? or stale?(fingerprint) do
          build(native, fingerprint)
        else
          {:noop, []}
        end
    end
  end

  defp stale?(fingerprint) do
    not File.regular?(installed_path()) or read_manifest() != fingerprint
  end

  defp build(native, fingerprint) do
    args = ["build", "--release", "--locked", "-p", @crate]
    Mix.shell().info("==> soul_mem_nif: cargo #{Enum.join(args, " ")} (in #{native})")
    started = System.monotonic_time(:millisecond)

    case run_cargo(native, args) do
      {:ok, _tail} ->
        with :ok <- install(built_library(native)) do
          write_manifest(fingerprint)
          elapsed = System.monotonic_time(:millisecond) - started
          Mix.shell().info("==> soul_mem_nif: installed #{installed_path()} (#{elapsed} ms)")
          {:ok, []}
        end

      {:error, reason, tail} ->
        summary = "cargo build of #{@crate} failed (#{reason})"
        Mix.shell().error("==> soul_mem_nif: #{summary}; cargo's output is above")
        error(summary <> "\n" <> extract_errors(tail), Path.join([native, @crate, "Cargo.toml"]))
    end
  end

  defp install_prebuilt(native) do
    source = built_library(native)
    dest = installed_path()

    cond do
      File.regular?(source) and newer?(source, dest) ->
        Mix.shell().info("==> soul_mem_nif: SOUL_MEM_SKIP_CARGO set, installing #{source}")
        with :ok <- install(source), do: {:ok, []}

      File.regular?(dest) ->
        {:noop, []}

      true ->
        error(
          "SOUL_MEM_SKIP_CARGO is set but neither #{dest} nor #{source} exists",
          dest
        )
    end
  end

  defp newer?(source, dest) do
    case {File.stat(source, time: :posix), File.stat(dest, time: :posix)} do
      {{:ok, s}, {:ok, d}} -> s.mtime > d.mtime or s.size != d.size
      _ -> true
    end
  end

  defp install(source) do
    dest = installed_path()
    tmp = "#{dest}.tmp-#{System.unique_integer([:positive])}"

    with :ok <- File.mkdir_p(Path.dirname(dest)),
         :ok <- File.cp(source, tmp),
         :ok <- File.rename(tmp, dest) do
      # On a fresh checkout priv/ did not exist when Mix laid out _build, so
      # the priv symlink in _build is only created now.
      Mix.Project.build_structure()
      :ok
    else
      {:error, reason} ->
        File.rm(tmp)
        error("cannot install #{source} as #{dest}: #{:file.format_error(reason)}", dest)
    end
  end

  ## Cargo

  defp run_cargo(native, args) do
    case System.find_executable("cargo") || home_cargo() do
      nil ->
        {:error, "cargo not found on PATH; run scripts/setup.sh or install Rust", ""}

      cargo ->
        port =
          Port.open({:spawn_executable, cargo}, [
            :binary,
            :exit_status,
            :stderr_to_stdout,
            :hide,
            cd: native,
            args: args
          ])

        stream_port(port, "")
    end
  end

  defp home_cargo do
    path = Path.expand("~/.cargo/bin/cargo")
    if File.regular?(path), do: path
  end

  defp stream_port(port, tail) do
    receive do
      {^port, {:data, data}} ->
        IO.write(data)
        stream_port(port, keep_tail(tail <> data))

      {^port, {:exit_status, 0}} ->
        {:ok, tail}

      {^port, {:exit_status, status}} ->
        {:error, "exit status #{status}", tail}
    end
  end

  defp keep_tail(buffer) when byte_size(buffer) <= @tail_bytes, do: buffer

  defp keep_tail(buffer),
    do: binary_part(buffer, byte_size(buffer) - @tail_bytes, @tail_bytes)

  # The lines of cargo's output that explain the failure: from the first
  # "error" line on, at most 60 lines; the whole tail when there is none.
  defp extract_errors(tail) do
    lines = String.split(tail, "\n")

    case Enum.drop_while(lines, &(not String.starts_with?(&1, "error"))) do
      [] -> lines |> Enum.take(-60) |> Enum.join("\n")
      errors -> errors |> Enum.take(60) |> Enum.join("\n")
    end
  end

  ## Fingerprint and manifest

  # The files whose contents decide whether cargo must run (public for tests).
  @doc false
  @spec inputs(Path.t()) :: [Path.t()]
  def inputs(native) do
    target = target_dir(native)

    [
      "Cargo.toml",
      "Cargo.lock",
      "rust-toolchain.toml",
      "rust-toolchain",
      ".cargo/config.toml",
      ".cargo/config",
      "*/Cargo.toml",
      "*/build.rs",
      "*/src/**/*"
    ]
    |> Enum.flat_map(&Path.wildcard(Path.join(native, &1), match_dot: true))
    |> Enum.reject(&String.starts_with?(&1, target <> "/"))
    |> Enum.filter(&File.regular?/1)
    |> Enum.uniq()
    |> Enum.sort()
  end

  defp fingerprint(native) do
    files =
      for path <- inputs(native) do
        {Path.relative_to(path, native), :crypto.hash(:sha256, File.read!(path))}
      end

    %{vsn: @manifest_vsn, crate: @crate, os: :os.type(), files: files}
  end

  defp read_manifest do
    with {:ok, binary} <- File.read(manifest_path()),
         {:ok, term} <- safe_binary_to_term(binary) do
      term
    else
      _ -> nil
    end
  end

  defp safe_binary_to_term(binary) do
    {:ok, :erlang.binary_to_term(binary, [:safe])}
  rescue
    ArgumentError -> :error
  end

  defp write_manifest(fingerprint) do
    path = manifest_path()
    File.mkdir_p!(Path.dirname(path))
    File.write!(path, :erlang.term_to_binary(fingerprint))
  end

  ## Paths

  defp app_dir, do: Path.dirname(Mix.Project.project_file())

  defp native_dir, do: Path.expand("../../native", app_dir())

  defp manifest_path, do: Path.join(Mix.Project.manifest_path(), @manifest)

  defp installed_path, do: Path.join([app_dir(), "priv", "native", @installed_name])

  defp target_dir(native) do
    case System.get_env("CARGO_TARGET_DIR") do
      dir when dir in [nil, ""] -> Path.join(native, "target")
      dir -> Path.expand(dir, native)
    end
  end

  defp built_library(native) do
    file =
      case :os.type() do
        {:unix, :darwin} -> "lib#{@crate}.dylib"
        {:win32, _} -> "#{@crate}.dll"
        _ -> "lib#{@crate}.so"
      end

    Path.join([target_dir(native), "release", file])
  end

  defp skip_cargo? do
    System.get_env("SOUL_MEM_SKIP_CARGO") in ["1", "true", "yes"]
  end

  defp error(message, file) do
    diagnostic = %Mix.Task.Compiler.Diagnostic{
      compiler_name: "soul_mem_nif",
      file: file,
      position: nil,
      message: message,
      severity: :error
    }

    {:error, [diagnostic]}
  end
end

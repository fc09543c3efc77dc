defmodule SoulMemWeb.Assets do
  @moduledoc """
  The page's static files: `priv/static/<file>` and, for libraries from npm,
  `priv/static/vendor/<file>` (a release copies them there) or the npm
  install of the checkout (`scripts/setup.sh`). No build step.

  Only names made of letters, digits, `-`, `_` and `.` with a known
  extension are served, and only from those directories.
  """

  # Libraries served from the checkout's node_modules when priv/static/vendor
  # has no copy: the file under /assets/vendor/ and its path in node_modules.
  @vendor %{
    "phoenix.js" => "phoenix/priv/static/phoenix.js",
    "cytoscape.min.js" => "cytoscape/dist/cytoscape.min.js"
  }

  @types %{
    ".html" => ~c"text/html; charset=utf-8",
    ".js" => ~c"text/javascript; charset=utf-8",
    ".css" => ~c"text/css; charset=utf-8",
    ".svg" => ~c"image/svg+xml",
    ".png" => ~c"image/png",
    ".json" => ~c"application/json"
  }

  @node_modules Path.expand("../../node_modules", __DIR__)

  @doc """
  The npm files the page loads, by their name under `/assets/vendor/`, with
  their path in the checkout's node_modules (a release copies them into its
  `priv/static/vendor/`).
  """
  @spec vendor_files() :: %{String.t() => Path.t()}
  def vendor_files,
    do: Map.new(@vendor, fn {name, path} -> {name, Path.join(@node_modules, path)} end)

  @doc """
  The file for the asset path segments (`["app.js"]`, `["vendor",
  "phoenix.js"]`): `{:ok, content_type, path}` or `:error`.
  """
  @spec lookup([String.t()]) :: {:ok, charlist(), Path.t()} | :error
  def lookup([file]), do: find(file, [Path.join(static_dir(), file) | vendor(file)])
  def lookup(["vendor", file]), do: find(file, vendor(file))

  def lookup(_segments), do: :error

  defp find(file, candidates) do
    with true <-
           String.match?(file, ~r/\A[A-Za-z0-9_.-]+\z/) and not String.starts_with?(file, "."),
         {:ok, type} <- Map.fetch(@types, Path.extname(file)),
         path when is_binary(path) <- Enum.find(candidates, &File.regular?/1) do
      {:ok, type, path}
    else
      _ -> :error
    end
  end

  defp vendor(file) do
    npm = if path = @vendor[file], do: [Path.join(@node_modules, path)], else: []
    [Path.join([static_dir(), "vendor", file]) | npm]
  end

  defp static_dir, do: Path.join(:code.priv_dir(:soul_mem_web), "static")
end

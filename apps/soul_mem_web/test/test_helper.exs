Code.require_file("support/streaming_llm.ex", __DIR__)

# The Node client tests need node and `npm ci` (scripts/setup.sh); the page
# test needs Debian's chromium. Outside CI they are skipped when missing; in
# CI (CI=true) they always run, and fail when something is missing.
ci? = System.get_env("CI") == "true"
app_dir = Path.expand("..", __DIR__)

node? =
  System.find_executable("node") != nil and
    File.dir?(Path.join(app_dir, "node_modules/phoenix")) and
    File.dir?(Path.join(app_dir, "node_modules/ws"))

chromium? = System.find_executable("chromium") != nil

exclude =
  cond do
    ci? ->
      []

    not node? ->
      IO.puts(
        "soul_mem_web: skipping the Node client tests (node or node_modules missing; run scripts/setup.sh)"
      )

      [:node, :chromium]

    not chromium? ->
      IO.puts("soul_mem_web: skipping the page test (chromium missing; run scripts/setup.sh)")
      [:chromium]

    true ->
      []
  end

ExUnit.start(exclude: exclude)

defmodule SoulMemWeb.TestEnv do
  @moduledoc false

  # Sets an application env value for the current test (or setup_all) and
  # restores the previous one when it ends.
  def put(app, key, value) do
    previous = Application.fetch_env(app, key)
    Application.put_env(app, key, value)

    ExUnit.Callbacks.on_exit(fn ->
      case previous do
        {:ok, old} -> Application.put_env(app, key, old)
        :error -> Application.delete_env(app, key)
      end
    end)
  end
end

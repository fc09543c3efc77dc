defmodule Mix.Tasks.Soul.Server do
  @shortdoc "Serves the chat endpoint (WebSocket + HTTP API + page) with the demo character"

  @moduledoc """
  Starts the chat endpoint and the demo character, prints the URL and the
  demo token, and serves until the VM is stopped (Ctrl-C twice).

      mix soul.server [--port PORT] [--host ADDRESS] [--chat [mix soul.chat options]]

  With `--chat` it also opens the terminal chat (`mix soul.chat`; its
  options `--file`, `--character`, `--say` pass through) in the same VM, so
  the page, the API and the terminal talk to the same character. When the
  chat ends (an empty line, Ctrl-D, or no terminal at all) the endpoint
  keeps serving; with `--say` the task exits after those turns. This is the
  README run command (`scripts/run.sh`).

  The port defaults to `PORT` (4000), the host to 127.0.0.1 (binding any
  other address has to be asked for with `--host` or `config
  :soul_mem_web, host:`). The demo character's token is
  `SOUL_MEM_DEMO_TOKEN` (default `dev-token`); tokens for other characters
  come from `mix soul.token CHARACTER`.

  Without a configured LLM (`SOUL_MEM_LLM_BASE_URL`) it looks for a local
  OpenAI-compatible server on the usual loopback ports
  (`SoulMem.LLM.Probe`: llama.cpp, Ollama, LM Studio, vLLM), uses the first
  that answers and says which; with none it says how to get one (the
  character still recalls, it does not answer). `--no-llm-probe` skips the
  search.
  """

  use Mix.Task

  @requirements ["app.start"]

  @impl Mix.Task
  def run(args) do
    {opts, argv, invalid} =
      OptionParser.parse(args,
        strict: [
          port: :integer,
          host: :string,
          chat: :boolean,
          file: :string,
          character: :string,
          say: :keep,
          llm_probe: :boolean
        ]
      )

    chat_opts = Keyword.take(opts, [:file, :character, :say])

    if argv != [] or invalid != [] or (chat_opts != [] and !opts[:chat]) do
      Mix.raise(
        "usage: mix soul.server [--port PORT] [--host ADDRESS] " <>
          "[--chat [--file PATH] [--character NAME] [--say TEXT]...]"
      )
    end

    if Keyword.get(opts, :llm_probe, true), do: Mix.shell().info(llm_line())

    case SoulMemWeb.serve(Keyword.take(opts, [:port, :host])) do
      {:ok, url} ->
        Mix.shell().info("""
        SoulMem chat endpoint on #{url}
          page:    #{url}/
          socket:  #{String.replace(url, "http", "ws")}/socket/websocket?token=…&vsn=2.0.0 (topic character:demo)
          API:     #{url}/api/characters/demo/{messages,recall,feedback,control,export} (Authorization: Bearer …)
          demo token: #{Application.get_env(:soul_mem, :demo_token)}
        """)

        if opts[:chat], do: chat(url, chat_opts)
        unless iex_running?() or Keyword.has_key?(chat_opts, :say), do: Process.sleep(:infinity)

      {:error, reason} ->
        Mix.raise("cannot start the endpoint: #{inspect(reason)}")
    end
  end

  defp chat(url, chat_opts) do
    args = Enum.flat_map(chat_opts, fn {key, value} -> ["--#{key}", value] end)

    Mix.Task.run("soul.chat", args)

    unless Keyword.has_key?(chat_opts, :say),
      do: Mix.shell().info("chat ended; the endpoint keeps serving on #{url} (Ctrl-C to stop)")
  end

  defp llm_line do
    case SoulMem.LLM.Probe.configure_if_missing() do
      :configured ->
        "LLM: #{Application.get_env(:soul_mem, :llm_base_url)}"

      {:ok, found} ->
        "LLM: found #{found.name} at #{found.base_url} (model #{found.model})"

      :none ->
        ports = Enum.map_join(SoulMem.LLM.Probe.candidates(), ", ", &elem(&1, 0))

        "LLM: none configured and none found on the usual local ports (#{ports}). " <>
          "Set SOUL_MEM_LLM_BASE_URL to an OpenAI-compatible server, or run " <>
          "`bash scripts/run.sh --llm` to install and serve a small local model. " <>
          "Without one the character recalls but does not answer."
    end
  end

  defp iex_running?, do: Code.ensure_loaded?(IEx) and IEx.started?()
end

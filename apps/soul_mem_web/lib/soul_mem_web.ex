defmodule SoulMemWeb do
  @moduledoc """
  The chat endpoint of SoulMem: the Phoenix Channels V2 protocol over
  WebSocket and a JSON HTTP API, served by Debian's yaws embedded in the
  supervision tree, plus a small chat page.

    * `SoulMemWeb.Endpoint` — embedded yaws (host/port, started only when
      `config :soul_mem_web, server: true` or by `mix soul.server`);
    * `SoulMemWeb.Router` — HTTP routes; `SoulMemWeb.Socket` — channels;
    * `SoulMemWeb.Protocol` — the V2 JSON frames;
    * `SoulMemWeb.Operations` — what both transports do, through the
      runtime's public API only (never the NIF);
    * `SoulMemWeb.Tokens` — per-character access tokens, stored hashed.
  """

  @doc """
  Serves the endpoint in this VM (under `SoulMemWeb.Supervisor`) with the
  demo character started, and returns its URL. Idempotent. Options:
  `:host`, `:port` (see `SoulMemWeb.Endpoint`), `:characters` — ids to start
  at once (default `["demo"]`). This is what `mix soul.server` runs; a task
  that wants the endpoint next to its own work (e.g. the terminal chat) can
  call it too.
  """
  @spec serve(keyword()) :: {:ok, String.t()} | {:error, term()}
  def serve(opts \\ []) do
    opts = Keyword.validate!(opts, [:host, :port, characters: ["demo"]])
    endpoint_opts = Keyword.take(opts, [:host, :port])

    started =
      case Supervisor.start_child(SoulMemWeb.Supervisor, {SoulMemWeb.Endpoint, endpoint_opts}) do
        {:ok, _pid} -> :ok
        {:error, {:already_started, _pid}} -> :ok
        {:error, :already_present} -> restart_endpoint()
        {:error, reason} -> {:error, reason}
      end

    with :ok <- started,
         :ok <- start_characters(opts[:characters]) do
      {:ok, SoulMemWeb.Endpoint.url()}
    end
  end

  defp restart_endpoint do
    case Supervisor.restart_child(SoulMemWeb.Supervisor, SoulMemWeb.Endpoint) do
      {:ok, _pid} -> :ok
      {:error, {:already_started, _pid}} -> :ok
      {:error, reason} -> {:error, reason}
    end
  end

  defp start_characters(ids) do
    Enum.reduce_while(ids, :ok, fn id, :ok ->
      case SoulMemWeb.Operations.ensure_character(id) do
        {:ok, _pid} -> {:cont, :ok}
        {:error, error} -> {:halt, {:error, {id, error.code, error.message}}}
      end
    end)
  end
end

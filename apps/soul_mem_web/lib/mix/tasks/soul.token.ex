defmodule Mix.Tasks.Soul.Token do
  @shortdoc "Creates an access token for a character of the chat endpoint"

  @moduledoc """
  Creates a new access token for a character and prints it (the only time
  it is shown; only its SHA-256 is stored, in `<data_dir>/web_tokens.json`).

      mix soul.token CHARACTER

  A running endpoint picks the new token up at its next use. In a remote
  shell of a running node, `SoulMemWeb.Tokens.create("CHARACTER")` does the
  same; `SoulMemWeb.Tokens.revoke("CHARACTER")` ends a character's tokens.
  """

  use Mix.Task

  @requirements ["app.config"]

  @impl Mix.Task
  def run(args) do
    case args do
      [character] ->
        data_dir = Application.fetch_env!(:soul_mem, :data_dir)

        case SoulMemWeb.Tokens.create_offline(data_dir, character) do
          {:ok, token} -> Mix.shell().info(token)
          {:error, reason} -> Mix.raise("cannot create a token: #{inspect(reason)}")
        end

      _ ->
        Mix.raise("usage: mix soul.token CHARACTER")
    end
  end
end

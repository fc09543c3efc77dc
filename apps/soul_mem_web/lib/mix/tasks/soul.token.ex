defmodule Mix.Tasks.Soul.Token do
  @shortdoc "Creates or revokes access tokens of a character of the chat endpoint"

  @moduledoc """
  Creates a new access token for a character and prints it (the only time
  it is shown; only its SHA-256 is stored, in `<data_dir>/web_tokens.json`).

      mix soul.token CHARACTER
      mix soul.token --revoke CHARACTER
      mix soul.token --admin

  `--admin` creates an operator token: it lists, creates and deletes
  characters (`/api/characters`) and manages tokens (`/api/operator`), but
  opens no character's memories.

  Both work on the token file a running node serves from (same data dir):
  the node notices a change within a second — a new token opens the
  character, a revoke refuses the next request and closes the character's
  joined channels. In a remote shell of a running node,
  `SoulMemWeb.Tokens.create/1` and `SoulMemWeb.Tokens.revoke/1` do the same.
  """

  use Mix.Task

  @requirements ["app.config"]

  @impl Mix.Task
  def run(args) do
    case args do
      ["--revoke", character] ->
        data_dir = Application.fetch_env!(:soul_mem, :data_dir)

        case SoulMemWeb.Tokens.revoke_offline(data_dir, character) do
          :ok -> Mix.shell().info("revoked every token of #{character}")
          {:error, reason} -> Mix.raise("cannot revoke: #{inspect(reason)}")
        end

      ["--admin"] ->
        data_dir = Application.fetch_env!(:soul_mem, :data_dir)

        case SoulMemWeb.Tokens.create_operator_offline(data_dir) do
          {:ok, token} -> Mix.shell().info(token)
          {:error, reason} -> Mix.raise("cannot create an operator token: #{inspect(reason)}")
        end

      [character] ->
        data_dir = Application.fetch_env!(:soul_mem, :data_dir)

        case SoulMemWeb.Tokens.create_offline(data_dir, character) do
          {:ok, token} -> Mix.shell().info(token)
          {:error, reason} -> Mix.raise("cannot create a token: #{inspect(reason)}")
        end

      _ ->
        Mix.raise(
          "usage: mix soul.token CHARACTER | mix soul.token --revoke CHARACTER | " <>
            "mix soul.token --admin"
        )
    end
  end
end

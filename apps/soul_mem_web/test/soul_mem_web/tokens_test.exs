defmodule SoulMemWeb.TokensTest do
  # Restarts the application's token store.
  use ExUnit.Case, async: false

  alias SoulMemWeb.Tokens

  # Every id a test creates tokens for is revoked afterwards (the token file
  # lives in the shared test data dir).
  defp unique(prefix) do
    id = "#{prefix}-#{System.unique_integer([:positive])}"
    on_exit(fn -> Tokens.revoke(id) end)
    id
  end

  defp file, do: Tokens.path(Application.fetch_env!(:soul_mem, :data_dir))

  test "a created token opens its character only" do
    a = unique("tok-a")
    b = unique("tok-b")
    assert {:ok, token_a} = Tokens.create(a)
    assert {:ok, token_b} = Tokens.create(b)

    assert Tokens.verify(a, token_a)
    refute Tokens.verify(b, token_a)
    refute Tokens.verify(a, token_b)
    refute Tokens.verify(a, token_a <> "x")
    refute Tokens.verify(a, nil)
    refute Tokens.verify(a, "")
    assert Tokens.known?(token_a)
    refute Tokens.known?("nobody's token")
  end

  test "only the hash is stored, and it survives a restart" do
    id = unique("tok-persist")
    {:ok, token} = Tokens.create(id)
    refute File.read!(file()) =~ token

    hex = Base.encode16(:crypto.hash(:sha256, token), case: :lower)
    assert File.read!(file()) =~ hex

    :ok = Supervisor.terminate_child(SoulMemWeb.Supervisor, Tokens)
    {:ok, _} = Supervisor.restart_child(SoulMemWeb.Supervisor, Tokens)
    assert Tokens.verify(id, token)
  end

  test "revoke ends every stored token of the character" do
    id = unique("tok-revoke")
    {:ok, t1} = Tokens.create(id)
    {:ok, t2} = Tokens.create(id)
    assert :ok = Tokens.revoke(id)
    refute Tokens.verify(id, t1)
    refute Tokens.verify(id, t2)
  end

  test "a revoke by another VM (mix soul.token --revoke) takes effect within a second" do
    id = unique("tok-offline-revoke")
    {:ok, token} = Tokens.create(id)
    assert Tokens.verify(id, token)
    :ok = Tokens.subscribe()
    :ok = Tokens.revoke_offline(Application.fetch_env!(:soul_mem, :data_dir), id)
    # Noticed by the store's own file check, not by a failing lookup.
    assert_receive {Tokens, :changed}, 3_000
    refute Tokens.verify(id, token)
  end

  test "a token created here right after another VM's revoke does not undo the revoke" do
    id = unique("tok-race")
    {:ok, token} = Tokens.create(id)
    :ok = Tokens.revoke_offline(Application.fetch_env!(:soul_mem, :data_dir), id)
    # Before this node's file check could notice, it writes the file itself.
    {:ok, other} = Tokens.create(unique("tok-race-other"))
    refute Tokens.verify(id, token)
    assert File.read!(file()) =~ Base.encode16(:crypto.hash(:sha256, other), case: :lower)
    refute File.read!(file()) =~ Base.encode16(:crypto.hash(:sha256, token), case: :lower)
  end

  test "a token written by another VM (mix soul.token) is picked up" do
    id = unique("tok-offline")
    {:ok, token} = Tokens.create_offline(Application.fetch_env!(:soul_mem, :data_dir), id)
    assert Tokens.verify(id, token)
  end

  test "the configured demo token opens demo, in memory only" do
    demo = Application.fetch_env!(:soul_mem, :demo_token)
    assert Tokens.verify("demo", demo)

    refute File.exists?(file()) and
             File.read!(file()) =~ Base.encode16(:crypto.hash(:sha256, demo), case: :lower)
  end

  test "bad ids and tokens are refused" do
    assert {:error, :invalid_character} = Tokens.create("")
    assert {:error, :invalid_character} = Tokens.create("   ")
    assert {:error, :invalid_character} = Tokens.create("a\u0000b")
    assert {:error, :invalid_character} = Tokens.create("line\nbreak")
    assert {:error, :invalid_character} = Tokens.create(String.duplicate("x", 200))
    assert {:error, :invalid_token} = Tokens.put_configured("x", "")
  end
end

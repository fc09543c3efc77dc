defmodule SoulMem.Store.ReplicaTest do
  # Replication at the store level, without processes: a capturing store's
  # changesets replay on a snapshot; a replica refuses a gap and a foreign
  # base; promotion raises the epoch; the conflict rule.
  use ExUnit.Case, async: true

  alias SoulMem.Store
  alias SoulMem.Store.Replica

  @moduletag :tmp_dir

  defp message(text), do: {%{role: "user", text: text, at: DateTime.utc_now()}, false}

  defp window(data_dir, id) do
    {:ok, store} = Store.open(data_dir, id)
    {:ok, state} = Store.load(store)
    Store.close(store)
    Enum.map(state.window, & &1.text)
  end

  test "writes replay on a snapshot, once, in order", %{tmp_dir: dir} do
    primary_dir = Path.join(dir, "primary")
    replica_dir = Path.join(dir, "replica")
    File.mkdir_p!(replica_dir)
    {:ok, store} = Store.open(primary_dir, "r1")
    {:ok, _} = Store.append_messages(store, [message("before")])
    :ok = Replica.capture(store, true)
    replica = Store.path(replica_dir, "r1")
    assert {:ok, bytes} = Replica.snapshot(store, replica)
    assert bytes > 0
    :ok = Replica.init(replica, "base")

    {:ok, _} = Store.append_messages(store, [message("one"), message("two")])
    :ok = Store.update_window(store, "a summary", nil)
    assert {:ok, [_, _] = first} = Replica.take_changes(store)
    assert {:ok, []} = Replica.take_changes(store)
    {:ok, _} = Store.append_messages(store, [message("three")])
    assert {:ok, second} = Replica.take_changes(store)

    # Out of order and from another base: refused, nothing applied.
    assert {:error, %SoulMem.Error{reason: :replica_mismatch}} =
             Replica.apply(replica, "base", 2, second)

    assert {:error, %SoulMem.Error{reason: :replica_mismatch}} =
             Replica.apply(replica, "other", 1, first)

    assert {:ok, %{base: "base", seq: 0, epoch: 0}} = Replica.state(replica)
    :ok = Replica.apply(replica, "base", 1, first)
    # Again: acknowledged, not applied twice.
    :ok = Replica.apply(replica, "base", 1, first)
    :ok = Replica.apply(replica, "base", 2, second)
    Store.close(store)

    assert window(replica_dir, "r1") == ["before", "one", "two", "three"]
    assert window(replica_dir, "r1") == window(primary_dir, "r1")

    assert {:ok, 1} = Replica.promote(replica)
    assert {:ok, %{epoch: 1}} = Store.peek(replica)
    assert {:error, _} = Replica.state(replica)
  end

  test "a snapshot never overwrites a file", %{tmp_dir: dir} do
    {:ok, store} = Store.open(dir, "r2")
    target = Path.join(dir, "exists.db")
    File.write!(target, "x")
    assert {:error, %SoulMem.Error{reason: :invalid_argument}} = Replica.snapshot(store, target)
    assert File.read!(target) == "x"
    Store.close(store)
  end

  test "a higher epoch beats a lower one, whatever the nodes" do
    assert SoulMem.Cluster.Conflicts.beats?("x", {2, :other@host}, 1)
    refute SoulMem.Cluster.Conflicts.beats?("x", {1, :other@host}, 2)
  end
end

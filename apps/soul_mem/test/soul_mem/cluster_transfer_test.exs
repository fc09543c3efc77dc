defmodule SoulMem.Cluster.TransferTest do
  # Changes the :data_dir app env.
  use ExUnit.Case, async: false

  alias SoulMem.Cluster.Transfer

  setup do
    dir = Path.join(System.tmp_dir!(), "soul_mem_transfer_#{System.unique_integer([:positive])}")
    old = Application.get_env(:soul_mem, :data_dir)
    Application.put_env(:soul_mem, :data_dir, dir)

    on_exit(fn ->
      if old,
        do: Application.put_env(:soul_mem, :data_dir, old),
        else: Application.delete_env(:soul_mem, :data_dir)

      File.rm_rf(dir)
    end)

    %{dir: dir}
  end

  test "copies a file in chunks, verified, and never over an existing store", %{dir: dir} do
    # More than two 1 MiB chunks, to the receiver on this node.
    data = :crypto.strong_rand_bytes(2_500_000)
    source = Path.join(System.tmp_dir!(), "soul_mem_transfer_src_#{System.unique_integer()}")
    File.write!(source, data)
    on_exit(fn -> File.rm(source) end)

    assert {:ok, %{bytes: 2_500_000, sha256: sha}} = Transfer.send_file(source, "x", node())
    assert sha == :crypto.hash(:sha256, data)
    dest = SoulMem.Store.path(dir, "x")
    assert File.read!(dest) == data
    refute File.exists?(dest <> ".incoming")

    assert {:error, :exists} = Transfer.send_file(source, "x", node())
    assert File.read!(dest) == data
  end

  test "a copy that does not match the sender's SHA-256 is removed, not installed", %{dir: dir} do
    assert {:ok, temp} = Transfer.begin("y")
    assert :ok = Transfer.append(temp, "abc")
    assert {:error, :checksum_mismatch} = Transfer.finish("y", temp, :crypto.hash(:sha256, "abd"))
    refute File.exists?(temp)
    refute File.exists?(SoulMem.Store.path(dir, "y"))
  end
end

defmodule SoulMemWeb.HealthTest do
  use ExUnit.Case, async: true

  test "reports ok with the runtime's version" do
    assert %{status: :ok, soul_mem: version} = SoulMemWeb.Health.check()
    assert {:ok, _} = Version.parse(version)
  end

  test "the application's supervisor is running" do
    assert pid = Process.whereis(SoulMemWeb.Supervisor)
    assert Process.alive?(pid)
  end
end

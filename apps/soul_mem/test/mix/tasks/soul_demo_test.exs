defmodule Mix.Tasks.Soul.DemoTest do
  use ExUnit.Case, async: true

  import ExUnit.CaptureIO
  import SoulMem.TestSupport

  alias Mix.Tasks.Soul.Demo

  setup :tmp_dir

  test "finds the demo fixture from inside the umbrella" do
    assert Demo.demo_path() == demo_fixture()
  end

  @tag skip: not File.regular?(SoulMem.TestSupport.demo_fixture())
  test "prints the demo character's stats" do
    output = capture_io(fn -> Demo.run([]) end)
    assert output =~ "character: demo"
    assert output =~ ~r/nodes: \d+/
    assert output =~ ~r/semantic\s+\d+/
    assert output =~ ~r/links: \d+ \(pending: 0\)/
    assert output =~ ~r/abstract_to_specific\s+\d+/
  end

  test "--file and --character", %{tmp_dir: dir} do
    path = Path.join(dir, "g.json")
    File.write!(path, graph_json([semantic("a", ["b"]), semantic("b")]))
    output = capture_io(fn -> Demo.run(["--file", path, "--character", "bob"]) end)
    assert output =~ "character: bob"
    assert output =~ "nodes: 2"
    assert output =~ "links: 1 (pending: 0)"
  end

  test "fails on a missing or invalid file", %{tmp_dir: dir} do
    assert_raise Mix.Error, ~r/no graph file/, fn ->
      Demo.run(["--file", Path.join(dir, "missing.json")])
    end

    path = Path.join(dir, "bad.json")
    File.write!(path, "[")
    assert_raise Mix.Error, ~r/invalid_json/, fn -> Demo.run(["--file", path]) end
  end

  test "rejects unknown arguments" do
    assert_raise Mix.Error, ~r/usage/, fn -> Demo.run(["--bogus"]) end
  end
end

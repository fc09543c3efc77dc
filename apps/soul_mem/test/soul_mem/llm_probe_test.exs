Code.require_file("../support/fake_llm.ex", __DIR__)

defmodule SoulMem.LLMProbeTest do
  use ExUnit.Case, async: true

  alias SoulMem.{FakeLLM, LLM.Probe}

  @moduletag :capture_log

  test "the first server that lists a model is used; silent or odd ones are skipped" do
    silent = start_supervised!({FakeLLM, owner: self()}, id: :silent)
    odd = start_supervised!({FakeLLM, owner: self()}, id: :odd)
    good = start_supervised!({FakeLLM, owner: self()}, id: :good)
    FakeLLM.script(silent, [:hang])
    FakeLLM.script(odd, [{:raw, 200, ~s({"object":"list"})}])
    FakeLLM.script(good, [{:raw, 200, ~s({"object":"list","data":[{"id":"qwen2.5"}]})}])

    candidates = [
      {"refused", FakeLLM.refused_url()},
      {"silent", FakeLLM.url(silent)},
      {"odd", FakeLLM.url(odd)},
      {"good", FakeLLM.url(good)}
    ]

    good_url = FakeLLM.url(good)

    assert {:ok, %{name: "good", base_url: ^good_url, model: "qwen2.5"}} =
             Probe.discover(candidates, 300)

    assert_received {:fake_llm, %{path: "/v1/models"}}
    assert Probe.discover([{"refused", FakeLLM.refused_url()}], 300) == :none
    # Loopback only.
    assert Enum.all?(Probe.candidates(), fn {_, url} -> url =~ "http://127.0.0.1:" end)
  end
end

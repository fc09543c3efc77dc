# Regenerates fixtures/consolidate/*.case.json + *.graph.json: runs
# `mix soul.consolidate fixtures/consolidate/dialogues --dump-changes fixtures/consolidate`
# against the scripted fake LLM of the test suite (one scripted extraction answer per
# session; the sessions are short enough for the window to need no summary call).
#
#   MIX_ENV=test mix run scripts/consolidate_fixtures.exs

Code.require_file("../apps/soul_mem/test/support/fake_llm.ex", __DIR__)

alias SoulMem.{FakeLLM, JSON}

sem = &FakeLLM.semantic_note/2
sit = &FakeLLM.situation_note/4

relation = fn from, to, verb ->
  %{"from" => from, "to" => to, "type" => "relation", "relation" => verb, "strength" => 0.8}
end

day1 =
  JSON.encode!(%{
    "notes" => [
      sem.("lin", "林雨桐"),
      sem.("club", "天文社"),
      # An alias of the demo character's 小白: must be merged, not duplicated.
      sem.("bai", "白白"),
      sit.("d1", "第一次去天文社，在天台观星", "林雨桐", "2026-06-01T20:00:00Z")
    ],
    "links" => [relation.("lin", "club", "属于"), relation.("d1", "club", "发生在")]
  })

day2 =
  JSON.encode!(%{
    "notes" => [
      # Named again on the second day: must be merged into day 1's note (exact name).
      sem.("lin2", "林雨桐"),
      sit.("d2", "和雨桐学姐看月亮", "林雨桐", "2026-06-01T21:00:00Z"),
      sit.("d3", "学姐教我们数流星", "林雨桐", "2026-06-02T20:00:00Z")
    ],
    "links" => [relation.("d3", "lin2", "参与")]
  })

{:ok, server} = FakeLLM.start_link(owner: self())
FakeLLM.script(server, [{:reply, day1}, {:reply, day2}])
root = Path.expand("..", __DIR__)

Mix.Tasks.Soul.Consolidate.run([
  Path.join(root, "fixtures/consolidate/dialogues"),
  "--base-url",
  FakeLLM.url(server),
  "--dump-changes",
  Path.join(root, "fixtures/consolidate")
])

requests = FakeLLM.requests(server)

if length(requests) != 2,
  do: raise("expected 2 LLM calls (one extraction per session), got #{length(requests)}")

# What the OpenAI-compatible endpoint adds to an upstream call: the same non-streamed
# completion asked of the scripted upstream directly (SoulMem.LLM over HTTP) and through
# POST /v1/chat/completions (memory recall with the e5 model, injection, the window write),
# interleaved; and, streamed, the delay from the upstream's first piece to the client's.
#
#   MIX_ENV=test mix run bench/openai_overhead.exs -- [--requests 200]
#
# Needs the e5 model (scripts/setup.sh). The upstream answers at once, so the difference is
# SoulMem's own cost.
Code.require_file("../apps/soul_mem/test/support/fake_llm.ex", __DIR__)

{opts, _, _} = OptionParser.parse(System.argv() -- ["--"], strict: [requests: :integer])
n = opts[:requests] || 200

{:ok, _} = SoulMem.Embedding.ensure_loaded()
{:ok, llm} = SoulMem.FakeLLM.start_link(owner: spawn(fn -> Process.sleep(:infinity) end))
Application.put_env(:soul_mem, :llm_base_url, SoulMem.FakeLLM.url(llm))
Application.put_env(:soul_mem, :llm_retries, 0)

id = "oai-bench-#{System.unique_integer([:positive])}"
demo = Path.expand("../fixtures/characters/demo.json", __DIR__)
Application.put_env(:soul_mem_web, :characters, %{id => [graph: demo, persist: false, embedder: :model]})
{:ok, token} = SoulMemWeb.Tokens.create(id)
{:ok, _} = SoulMemWeb.Endpoint.start_link(port: 0)
{:ok, _} = SoulMemWeb.Operations.ensure_character(id)
{:ok, _} = SoulMem.info(id, 120_000)
url = ~c"http://127.0.0.1:#{SoulMemWeb.Endpoint.port()}/v1/chat/completions"
auth = [{~c"authorization", String.to_charlist("Bearer " <> token)}]
questions = ~w(小白 麻辣烫 辫子 考试 雨天 猫 生日 图书馆 老街 秘密)

Code.require_file("bench_support.exs", __DIR__)
pct = &BenchSupport.percentile/2

time = fn fun ->
  t0 = System.monotonic_time(:microsecond)
  fun.()
  (System.monotonic_time(:microsecond) - t0) / 1000
end

runs =
  for i <- 1..n do
    q = "#{Enum.at(questions, rem(i, 10))}#{:rand.uniform(1_000_000_000)}"
    messages = [%{"role" => "system", "content" => "你是小红。"}, %{"role" => "user", "content" => q}]

    direct = time.(fn -> {:ok, _} = SoulMem.LLM.chat(Enum.map(messages, &%{role: &1["role"], content: &1["content"]})) end)

    body = SoulMem.JSON.encode!(%{"model" => id, "messages" => messages})

    proxied =
      time.(fn ->
        {:ok, {{_, 200, _}, _, _}} =
          :httpc.request(:post, {url, auth, ~c"application/json", body}, [timeout: 30_000], body_format: :binary)
      end)

    {direct, proxied}
  end

directs = Enum.map(runs, &elem(&1, 0))
proxied = Enum.map(runs, &elem(&1, 1))
added = Enum.map(runs, fn {d, p} -> p - d end)
fmt = fn list -> "p50 #{Float.round(pct.(list, 0.5), 1)} ms, p95 #{Float.round(pct.(list, 0.95), 1)} ms" end
IO.puts("requests: #{n} (each question new text)")
IO.puts("upstream directly:        " <> fmt.(directs))
IO.puts("through /v1 (with memory): " <> fmt.(proxied))
IO.puts("added by SoulMem:          " <> fmt.(added))

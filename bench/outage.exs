# Memory while the LLM is down: 100,000 pushes to one character whose summaries cannot land,
# then a recall. Prints the VM's RSS, how many pushes were acknowledged and refused, and the
# rendered context's size.
#
#   mix run bench/outage.exs -- [--pushes 100000]
{opts, _, _} = OptionParser.parse(System.argv() -- ["--"], strict: [pushes: :integer])
pushes = opts[:pushes] || 100_000

rss = fn ->
  "/proc/self/status"
  |> File.read!()
  |> String.split("\n")
  |> Enum.find(&String.starts_with?(&1, "VmRSS"))
  |> String.replace(~r/\s+/, " ")
end

# Nothing listens there: every summary job fails and its messages wait.
Application.put_env(:soul_mem, :llm_base_url, "http://127.0.0.1:1/v1")
demo = Path.expand("../fixtures/characters/demo.json", __DIR__)

{:ok, _} =
  SoulMem.Characters.ensure_started("outage", graph: demo, persist: false, embedder: :hash)

IO.puts("start: #{rss.()}")
text = String.duplicate("今天天气不错我们去散步吧", 20)

{ok, full} =
  Enum.reduce(1..pushes, {0, 0}, fn i, {ok, full} ->
    case SoulMem.Character.push("outage", %{role: :user, text: "#{i}#{text}"}) do
      :ok -> {ok + 1, full}
      {:error, :backlog_full} -> {ok, full + 1}
    end
  end)

:erlang.garbage_collect()
IO.puts("#{pushes} pushes: #{ok} acknowledged, #{full} refused (backlog_full); #{rss.()}")
{:ok, result} = SoulMem.recall("outage", %{text: "散步"})

IO.puts(
  "context: #{byte_size(result.context)} bytes; window in the recall: #{length(result.window)}"
)

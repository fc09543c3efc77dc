# Run by SoulMem.DurabilityTest as a separate OS process (elixir -pa ...):
#
#   elixir durability_writer.exs DATA_DIR CHARACTER GRAPH FROM TO
#
# Starts the soul_mem application, starts the persisted character and streams
# writes FROM..TO: every write is a pushed message "w<i>", every 7th also a
# feedback on sem_self. After a write is acknowledged it prints "ack <i>" (and
# "fb <i>"). The test kills this process with SIGKILL at a random point.
[data_dir, id, graph, from, to] = System.argv()

Application.put_env(:soul_mem, :embedder, :none)
Application.put_env(:soul_mem, :data_dir, data_dir)
{:ok, _} = Application.ensure_all_started(:soul_mem)

{:ok, _pid} =
  SoulMem.Characters.ensure_started(id,
    graph: graph,
    persist: true,
    data_dir: data_dir,
    window: 5_000,
    idle_after: 3_600_000,
    llm: [base_url: "http://127.0.0.1:9/v1"]
  )

{:ok, _} = SoulMem.Character.info(id, 60_000)
IO.puts("ready")

for i <- String.to_integer(from)..String.to_integer(to) do
  :ok = SoulMem.Character.push(id, %{role: :user, text: "w#{i}"}, 60_000)
  IO.puts("ack #{i}")

  if rem(i, 7) == 0 do
    :ok = SoulMem.Character.feedback(id, "sem_self", 1, 60_000)
    IO.puts("fb #{i}")
  end
end

IO.puts("done")

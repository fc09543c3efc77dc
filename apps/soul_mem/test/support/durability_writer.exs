# Run by SoulMem.DurabilityTest as a separate OS process (elixir -pa ...):
#
#   elixir durability_writer.exs DATA_DIR CHARACTER GRAPH FROM TO [serve]
#
# Starts the soul_mem application, starts the persisted character and streams
# writes FROM..TO: every write is a pushed message "w<i>", every 7th also a
# feedback on sem_self. After a write is acknowledged it prints "ack <i>" (and
# "fb <i>"). The test kills this process with SIGKILL at a random point.
# With "serve" it then recalls once (which changes retrieval counts, written
# back only on a graceful stop), prints "serving" and waits for SIGTERM.
[data_dir, id, graph, from, to | mode] = System.argv()

Application.put_env(:soul_mem, :embedder, :hash)
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

# Never exit on its own: the test kills this process, also when every write
# was acknowledged before it read the ack it kills at.
if mode != ["serve"], do: Process.sleep(:infinity)

if mode == ["serve"] do
  {:ok, result} = SoulMem.recall(id, %{text: "麻辣烫"}, timeout: 60_000)
  IO.puts("recalled " <> Enum.map_join(result.memories, ",", & &1.id))
  # Records are cast: this call returns after the cast was handled.
  {:ok, _} = SoulMem.Character.records(id, 60_000)
  IO.puts("serving")
  Process.sleep(:infinity)
end

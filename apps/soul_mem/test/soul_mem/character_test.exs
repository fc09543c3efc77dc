Code.require_file("../support/fake_llm.ex", __DIR__)

defmodule SoulMem.CharacterTest do
  use ExUnit.Case, async: true

  import SoulMem.TestSupport

  alias SoulMem.{Character, Characters, FakeLLM, Window}

  @moduletag :capture_log

  # LLM round trips over loopback can take a while when the suite runs
  # concurrently: wait longer than assert_receive's default 100 ms.
  defmacrop wait(pattern), do: quote(do: assert_receive(unquote(pattern), 5_000))

  defmodule BlockingMaintenance do
    @moduledoc false
    @behaviour SoulMem.Maintenance

    def tasks, do: [:consolidate]

    def run(:consolidate, %{character: id}) do
      [{owner, _}] = Registry.lookup(SoulMem.Registry, "owner-of-" <> id)
      send(owner, {:maintenance_running, self()})

      receive do
        :go -> {:ok, [{:consolidated, id}]}
      end
    end
  end

  defp user(text), do: %{role: :user, text: text}

  defp texts(messages), do: Enum.map(messages, & &1.text)

  defp start_character(context, opts) do
    id = "char-#{System.unique_integer([:positive])}"
    url = Map.get(context, :url) || FakeLLM.refused_url()

    opts =
      Keyword.merge(
        [id: id, graph: demo_fixture(), window: 3, idle_after: 60_000, llm: [base_url: url]],
        opts
      )

    pid = start_supervised!({Character, opts}, id: id)
    :ok = Character.subscribe(id)
    {id, pid}
  end

  setup do
    server = start_supervised!({FakeLLM, owner: self()})
    {:ok, server: server, url: FakeLLM.url(server)}
  end

  describe "summaries" do
    test "a tagged message sliding out sends previous summary + window + popped message",
         context do
      {id, _pid} = start_character(context, [])
      assert :ok = Character.push(id, Enum.map(~w(甲 乙 丙), &user/1))
      refute_received {:fake_llm, _}
      assert :ok = Character.push(id, user("丁"))

      wait({:fake_llm, %{body: %{"messages" => [_system, %{"content" => prompt}]}}})
      assert prompt =~ "（无）"
      assert prompt =~ "【滑出窗口的消息】\n用户：甲"
      for t <- ~w(乙 丙 丁), do: assert(prompt =~ "用户：" <> t)
      wait({:soul_mem, ^id, :summary_updated, "summary 1"})

      assert :ok = Character.push(id, Enum.map(~w(戊 己 庚), &user/1))
      wait({:fake_llm, %{body: %{"messages" => [_, %{"content" => prompt2}]}}})
      assert prompt2 =~ "【之前的摘要】\nsummary 1"
      assert prompt2 =~ "【滑出窗口的消息】\n用户：丁"
      for t <- ~w(戊 己 庚), do: assert(prompt2 =~ "用户：" <> t)
      wait({:soul_mem, ^id, :summary_updated, "summary 2"})

      assert {:ok, "summary 2"} = Character.summary(id)
      {:ok, window} = Character.window(id)
      assert texts(Window.visible(window)) == ~w(戊 己 庚)
    end

    test "500s: the job fails, messages stay visible, maintenance retries it", context do
      FakeLLM.script(context.server, [{:status, 500}, {:status, 500}])
      {id, pid} = start_character(context, llm: [base_url: context.url, retries: 0])

      :ok = Character.push(id, Enum.map(~w(a b c d e f g), &user/1))
      wait({:soul_mem, ^id, :summary_failed, %{job: 1}})
      {:ok, window} = Character.window(id)
      assert texts(Window.visible(window)) == ~w(a b c d e f g)

      # LLM still down during the first maintenance run: nothing is lost.
      send(pid, :idle_timeout)
      wait({:soul_mem, ^id, :state_changed, :idle})

      wait({:soul_mem, ^id, :maintenance_done, %{results: [{:summarize_pending, {:error, _}}]}})

      {:ok, window} = Character.window(id)
      assert texts(Window.visible(window)) == ~w(a b c d e f g)

      # Back up: the forced retry completes both jobs, in order.
      assert :ok = Character.force(id, :summarize_pending)

      wait(
        {:soul_mem, ^id, :maintenance_done, %{results: [{:summarize_pending, {:ok, changes}}]}}
      )

      assert [{:summary_done, 1, "summary 3"}, {:summary_done, 2, "summary 4"}] = changes
      wait({:soul_mem, ^id, :summary_updated, "summary 4"})
      assert {:ok, "summary 4"} = Character.summary(id)

      [_, _, _, retry2] = FakeLLM.requests(context.server)
      prompt = retry2.body["messages"] |> List.last() |> Map.get("content")
      assert prompt =~ "summary 3"
      assert prompt =~ "用户：d"
      {:ok, window} = Character.window(id)
      assert texts(Window.visible(window)) == ~w(e f g)
    end

    test "timeouts and refused connections lose nothing; recall keeps working", context do
      FakeLLM.script(context.server, [:hang])
      {id, _} = start_character(context, llm: [base_url: context.url, timeout: 100, retries: 0])
      :ok = Character.push(id, Enum.map(~w(a b c d), &user/1))
      wait({:soul_mem, ^id, :summary_failed, %{reason: :timeout}})

      # The timed-out job's messages are still in recall's window and context.
      assert {:ok, result} = SoulMem.recall(id, %{messages: [user("e")]}, retrieval: Nope)
      assert texts(result.window) == ~w(a b c d e)
      assert result.summary == ""
      assert result.context =~ "【最近对话】\n用户：a\n用户：b\n用户：c\n用户：d\n用户：e"

      {down, _} = start_character(%{}, llm: [base_url: FakeLLM.refused_url(), retries: 0])
      :ok = Character.push(down, Enum.map(~w(a b c d e), &user/1))
      wait({:soul_mem, ^down, :summary_failed, %{reason: {:connect, _}}})

      assert {:ok, result} = SoulMem.recall(down, %{messages: [user("f")]}, retrieval: Nope)
      assert texts(result.window) == ~w(a b c d e f)
      assert result.context =~ "用户：f"
    end
  end

  describe "summary retries" do
    test "a blank reply does not wipe the summary; the job is retried and lands", context do
      FakeLLM.script(context.server, [{:reply, ""}, {:reply, "  \n "}])

      {id, _pid} =
        start_character(context,
          summary: "旧摘要",
          summary_retry: 5,
          summary_max_retry: 50,
          llm: [base_url: context.url, retries: 0]
        )

      :ok = Character.push(id, Enum.map(~w(a b c d), &user/1))

      wait(
        {:soul_mem, ^id, :summary_failed, %{job: 1, reason: {:invalid_response, :empty_content}}}
      )

      wait({:soul_mem, ^id, :summary_failed, %{job: 1}})
      wait({:soul_mem, ^id, :summary_updated, "summary 3"})
      refute_received {:soul_mem, ^id, :summary_updated, _}

      # Every attempt built on the old summary and held the popped message.
      for request <- FakeLLM.requests(context.server) do
        prompt = request.body["messages"] |> List.last() |> Map.get("content")
        assert prompt =~ "【之前的摘要】\n旧摘要"
        assert prompt =~ "【滑出窗口的消息】\n用户：a"
      end

      {:ok, window} = Character.window(id)
      assert texts(Window.visible(window)) == ~w(b c d)
    end

    test "a character that stays Working retries failed summaries with backoff", context do
      FakeLLM.script(context.server, [
        {:status, 500},
        {:status, 500},
        {:reply, "S"},
        {:status, 500}
      ])

      {id, _pid} =
        start_character(context,
          summary_retry: 30,
          summary_max_retry: 1_000,
          llm: [base_url: context.url, retries: 0]
        )

      :ok = Character.push(id, Enum.map(~w(a b c d), &user/1))
      wait({:soul_mem, ^id, :state_changed, :working})
      wait({:soul_mem, ^id, :summary_failed, %{job: 1, retry_in: first}})
      assert first in 30..37

      # Requests keep coming meanwhile; nothing is lost.
      :ok = Character.push(id, user("e"))
      wait({:soul_mem, ^id, :summary_failed, %{job: 1, retry_in: second}})
      assert second in 60..75
      wait({:soul_mem, ^id, :summary_updated, "S"})
      {:ok, window} = Character.window(id)
      assert texts(Window.visible(window)) == ~w(c d e)

      # A landed summary resets the backoff.
      :ok = Character.push(id, Enum.map(~w(f g), &user/1))
      wait({:soul_mem, ^id, :summary_failed, %{job: 2, retry_in: again}})
      assert again in 30..37
      wait({:soul_mem, ^id, :summary_updated, "summary 5"})

      # Never Idle, no maintenance: the character retried by itself.
      refute_received {:soul_mem, ^id, :state_changed, :idle}
      refute_received {:soul_mem, ^id, :maintenance_done, _}
      assert {:ok, %{state: :working, jobs: 0}} = Character.info(id)
      {:ok, window} = Character.window(id)
      assert texts(Window.visible(window)) == ~w(e f g)

      [_, _, retry | _] = FakeLLM.requests(context.server)
      prompt = retry.body["messages"] |> List.last() |> Map.get("content")
      assert prompt =~ "【滑出窗口的消息】\n用户：a"
    end

    test "a retry in flight is not run twice by maintenance; stale retry timers are ignored",
         context do
      FakeLLM.script(context.server, [{:status, 500}, :hang])

      {id, pid} =
        start_character(context,
          summary_retry: 5,
          summary_max_retry: 5,
          llm: [base_url: context.url, retries: 0, timeout: 60_000]
        )

      :ok = Character.push(id, Enum.map(~w(a b c d), &user/1))
      wait({:soul_mem, ^id, :summary_failed, %{job: 1}})
      # The retry is in flight (the server hangs on it).
      wait({:fake_llm, _})
      wait({:fake_llm, _})

      send(pid, {:summary_retry, make_ref()})
      assert :ok = Character.force(id, :summarize_pending)

      wait({:soul_mem, ^id, :maintenance_done, %{results: [{:summarize_pending, {:ok, []}}]}})

      assert length(FakeLLM.requests(context.server)) == 2
      assert {:ok, %{jobs: 1}} = Character.info(id)
      {:ok, window} = Character.window(id)
      assert [%{id: 1, status: :in_flight}] = Window.jobs(window)
    end
  end

  describe "SummarizePending" do
    test "stops at a blank answer: the jobs before it land, the summary is not wiped",
         context do
      window =
        Window.new(capacity: 2, summary: "旧摘要")
        |> Window.push_all(Enum.map(~w(a b c d e), &Map.put(user(&1), :at, DateTime.utc_now())))
        |> elem(1)

      window = Window.fail(elem(Window.next_job(window), 2), 1)
      {:ok, jobs, window} = Window.checkout_failed(window)
      snapshot = %{window: window, jobs: jobs, llm: [base_url: context.url, retries: 0]}

      FakeLLM.script(context.server, [{:reply, "S1"}, {:reply, " "}])

      assert {:ok, [{:summary_done, 1, "S1"}]} =
               SoulMem.Maintenance.SummarizePending.run(:summarize_pending, snapshot)

      FakeLLM.script(context.server, [{:reply, ""}])

      assert {:error, _} = SoulMem.Maintenance.SummarizePending.run(:summarize_pending, snapshot)
    end
  end

  describe "Working / Idle" do
    test "requests make it working; idle_after later it is idle and maintenance runs",
         context do
      {id, _pid} = start_character(context, idle_after: 1)
      :ok = Character.push(id, user("hi"))
      wait({:soul_mem, ^id, :state_changed, :working})
      wait({:soul_mem, ^id, :state_changed, :idle})
      wait({:soul_mem, ^id, :maintenance_done, %{tasks: [:summarize_pending]}})
      assert {:ok, %{state: :idle}} = Character.info(id)
    end

    test "a request during maintenance is served at once and does not cancel it", context do
      {id, pid} = start_character(context, maintenance: [BlockingMaintenance])
      {:ok, _} = Registry.register(SoulMem.Registry, "owner-of-" <> id, nil)

      :ok = Character.push(id, user("hello"))
      wait({:soul_mem, ^id, :state_changed, :working})
      send(pid, :idle_timeout)
      wait({:soul_mem, ^id, :state_changed, :idle})
      wait({:maintenance_running, task})

      assert :ok = Character.push(id, user("still here?"), 1_000)
      wait({:soul_mem, ^id, :state_changed, :working})
      assert {:ok, %{maintenance_running: true, state: :working}} = Character.info(id)
      assert {:error, :busy} = Character.force(id, :consolidate)

      send(task, :go)

      wait(
        {:soul_mem, ^id, :maintenance_done,
         %{results: [{:consolidate, {:ok, [{:consolidated, ^id}]}}]}}
      )

      assert {:ok, %{maintenance_running: false}} = Character.info(id)
      assert {:error, :unsupported} = Character.force(id, :persist)
    end

    test "while idle, maintenance repeats every maintenance_interval", context do
      {id, pid} = start_character(context, maintenance_interval: 1)
      :ok = Character.push(id, user("x"))
      send(pid, :idle_timeout)
      wait({:soul_mem, ^id, :maintenance_done, _})
      wait({:soul_mem, ^id, :maintenance_done, _})
      :ok = Character.push(id, user("y"))
      wait({:soul_mem, ^id, :state_changed, :working})
    end

    test "a forced tag makes the newest message trigger a summary when it slides out",
         context do
      {id, _pid} = start_character(context, window: 3)
      :ok = Character.push(id, Enum.map(~w(a b), &user/1))
      :ok = Character.tag(id)
      :ok = Character.push(id, Enum.map(~w(c d), &user/1))
      # a (auto tag) slid out: one job.
      wait({:soul_mem, ^id, :summary_updated, "summary 1"})
      :ok = Character.push(id, user("e"))
      # b (forced tag) slid out: a second job, although the interval is 3.
      wait({:fake_llm, %{body: %{"messages" => [_, %{"content" => prompt}]}}})
      wait({:fake_llm, %{body: %{"messages" => [_, %{"content" => prompt2}]}}})
      assert prompt =~ "【滑出窗口的消息】\n用户：a"
      assert prompt2 =~ "【滑出窗口的消息】\n用户：b"
      assert prompt2 =~ "summary 1"
    end

    test "a stale idle timer does not make it idle", context do
      {id, pid} = start_character(context, [])
      :ok = Character.push(id, user("x"))
      send(pid, {:idle_timeout, make_ref()})
      assert {:ok, %{state: :working}} = Character.info(id)
    end
  end

  describe "requests" do
    test "invalid messages are refused and the window is unchanged", context do
      {id, _} = start_character(context, [])
      :ok = Character.push(id, user("ok"))
      assert {:error, :empty_text} = Character.push(id, [user("a"), user("")])
      assert {:error, :invalid_role} = Character.push(id, %{role: :system, text: "x"})
      assert {:error, :invalid_message} = Character.push(id, :nope)
      assert {:error, :too_large} = Character.push(id, user(String.duplicate("x", 20_000)))
      assert :ok = Character.push(id, %{role: "assistant", text: "好呀"})
      {:ok, window} = Character.window(id)
      assert texts(Window.messages(window)) == ["ok", "好呀"]
    end

    test "the LLM key never shows in the state", context do
      {_id, pid} =
        start_character(context, llm: [base_url: context.url, api_key: "sk-top-secret"])

      refute inspect(:sys.get_state(pid)) =~ "sk-top-secret"
    end

    test "feedback is validated and stored", context do
      {id, _} = start_character(context, [])
      assert :ok = Character.feedback(id, "sem_self", 1)
      assert :ok = Character.feedback(id, "sem_self", -1)
      assert {:error, :invalid_feedback} = Character.feedback(id, "sem_self", 2)
      assert {:error, :invalid_note_id} = Character.feedback(id, "", 1)
      assert {:error, :not_found} = Character.feedback(id, "no_such_note", 1)

      assert {:ok, %{"sem_self" => [{1, %DateTime{}}, {-1, %DateTime{}}]}} =
               Character.feedbacks(id)
    end

    test "subscribers are dropped when they exit", context do
      {id, pid} = start_character(context, [])
      test = self()

      sub =
        spawn(fn ->
          :ok = Character.subscribe(id)
          send(test, :subscribed)
          receive do: (:stop -> :ok)
        end)

      assert_receive :subscribed
      ref = Process.monitor(sub)
      send(sub, :stop)
      wait({:DOWN, ^ref, _, _, _})
      # The character's DOWN is processed before this call's reply.
      {:ok, _} = Character.info(id)
      refute Map.has_key?(:sys.get_state(pid).subscribers, sub)
    end

    test "50 concurrent pushes and recalls while summaries land: nothing lost, in order",
         context do
      # Every summary call succeeds ("summary N" for the N-th request), so
      # messages really slide out of the window and are dropped as their
      # summaries land, in the middle of the run.
      {id, _} = start_character(context, window: 12, llm: [base_url: context.url, retries: 0])

      1..10
      |> Task.async_stream(
        fn sender ->
          :ok = Character.subscribe(id)

          for n <- 1..5 do
            # The last message of each sender waits for a landed summary:
            # the 40 messages before it queue summary jobs (window 12).
            if n == 5 and Character.summary(id) == {:ok, ""},
              do: assert_receive({:soul_mem, ^id, :summary_updated, _}, 10_000)

            text = "s#{sender}-#{n}"

            if rem(n, 2) == 0,
              do: {:ok, _} = SoulMem.recall(id, %{messages: [user(text)]}, retrieval: Nope),
              else: :ok = Character.push(id, user(text))
          end
        end,
        max_concurrency: 10,
        timeout: 30_000
      )
      |> Enum.each(fn {:ok, _} -> :ok end)

      # 50 messages, tags every 12: messages 1, 13, 25 and 37 slid out, so
      # four cumulative jobs, run in order.
      wait({:soul_mem, ^id, :summary_updated, "summary 4"})
      {:ok, window} = Character.window(id)
      assert Window.jobs(window) == []
      assert Window.summary(window) == "summary 4"
      visible = texts(Window.visible(window))
      assert length(visible) == 12

      prompts =
        for request <- FakeLLM.requests(context.server),
            do: request.body["messages"] |> List.last() |> Map.get("content")

      assert length(prompts) == 4

      # Each prompt builds on the summary before it.
      for {prompt, n} <- Enum.with_index(prompts) do
        previous = if n == 0, do: "（无）", else: "summary #{n}"
        assert prompt =~ "【之前的摘要】\n" <> previous <> "\n"
      end

      summarised =
        for prompt <- prompts do
          for "用户：" <> text <- String.split(prompt, "\n"), do: text
        end

      covered = summarised |> List.flatten() |> MapSet.new()

      for sender <- 1..10 do
        all = Enum.map(1..5, &"s#{sender}-#{&1}")
        mine = Enum.filter(visible, &String.starts_with?(&1, "s#{sender}-"))

        # The window keeps each sender's newest messages, in order; the older
        # ones are in a summary that was produced.
        assert mine == Enum.take(all, -length(mine))
        assert Enum.all?(all -- mine, &(&1 in covered))

        # And each summary saw a sender's messages in order too.
        for texts <- summarised do
          theirs = Enum.filter(texts, &String.starts_with?(&1, "s#{sender}-"))
          assert theirs == Enum.filter(all, &(&1 in theirs))
        end
      end

      assert Enum.uniq(visible) == visible
    end
  end

  describe "loading" do
    # Embeds only when told to by a {:go, test pid} message to the character.
    defmodule SlowEmbedding do
      @moduledoc false
      def ensure_loaded(_opts), do: {:ok, "slow"}
      def prefill(_memory, _opts), do: {:ok, 0}

      def embed_graph(_memory, _opts) do
        receive do
          {:go, from} -> send(from, :embedding)
        end

        {:ok, "slow"}
      end
    end

    test "a request during loading waits for it, beyond the usual timeout" do
      id = "loading-#{System.unique_integer([:positive])}"

      pid =
        start_supervised!(
          {Character, id: id, embedder: :hash, embedding_module: SlowEmbedding},
          id: id
        )

      push = Task.async(fn -> Character.push(id, user("来了"), 50) end)
      # Past the push's own 50 ms: it still waits, for the load.
      refute Task.yield(push, 200)
      send(pid, {:go, self()})
      assert_receive :embedding
      assert :ok = Task.await(push)
      assert {:ok, window} = Character.window(id)
      assert texts(Window.messages(window)) == ["来了"]
    end

    test "a request whose caller gave up is not applied" do
      {id, pid} = start_character(%{}, [])
      expired = System.monotonic_time(:millisecond) - 1

      assert {:error, :timeout} = GenServer.call(pid, {:before, expired, {:push, [user("太晚了")]}})

      assert {:ok, window} = Character.window(id)
      assert Window.messages(window) == []
    end
  end

  describe "Maintenance.run_all/3" do
    defmodule Raising do
      @moduledoc false
      def tasks, do: [:forget]
      def run(:forget, _snapshot), do: raise("boom")
    end

    defmodule Odd do
      @moduledoc false
      def tasks, do: [:persist]
      def run(:persist, _snapshot), do: :what
    end

    test "a failed task is logged by the character and reported", context do
      {id, pid} = start_character(context, maintenance: [Raising])
      :ok = Character.push(id, user("在吗"))

      log =
        ExUnit.CaptureLog.capture_log(fn ->
          send(pid, :idle_timeout)

          assert_receive {:soul_mem, ^id, :maintenance_done,
                          %{results: [forget: {:error, {:raised, "boom"}}]}},
                         5_000
        end)

      assert log =~ "maintenance task forget failed"
      assert log =~ "boom"
    end

    test "collects results; raising or odd implementations become errors" do
      results =
        SoulMem.Maintenance.run_all([:forget, :persist, :consolidate], %{}, [Raising, Odd])

      assert [forget: {:error, {:raised, "boom"}}, persist: {:error, {:bad_return, :what}}] =
               results

      assert SoulMem.Maintenance.supported?(:forget, [Raising])
      refute SoulMem.Maintenance.supported?(:consolidate, [Raising])
    end
  end

  describe "Characters" do
    test "ensure_started is idempotent; list, whereis, stop" do
      id = "chars-#{System.unique_integer([:positive])}"
      assert {:ok, pid} = Characters.ensure_started(id, graph: demo_fixture())
      on_exit(fn -> Characters.stop(id) end)
      assert {:ok, ^pid} = Characters.ensure_started(id, graph: "/ignored")
      assert Characters.whereis(id) == pid
      assert {id, pid} in Characters.list()

      assert {:ok, %{stats: %{nodes: 53}}} = Character.info(id)
      assert :ok = Characters.stop(id)
      assert Characters.whereis(id) == nil
      assert {:error, :not_running} = Characters.stop(id)
      assert {:error, :not_running} = Character.push(id, user("x"))
      assert {:error, :not_running} = Character.info(pid)
    end

    test "concurrent ensure_started calls start one process" do
      id = "race-#{System.unique_integer([:positive])}"
      on_exit(fn -> Characters.stop(id) end)

      pids =
        1..20
        |> Task.async_stream(fn _ -> Characters.ensure_started(id, window: 4) end)
        |> Enum.map(fn {:ok, {:ok, pid}} -> pid end)
        |> Enum.uniq()

      assert length(pids) == 1
    end

    test "a missing graph file is an error; a memory can be given" do
      assert {:error, {:graph_not_found, "/no/such.json"}} =
               Characters.ensure_started("missing-#{System.unique_integer()}",
                 graph: "/no/such.json"
               )

      memory = SoulMem.Memory.import_file!("mem", demo_fixture())
      id = "mem-#{System.unique_integer([:positive])}"
      assert {:ok, _} = Characters.ensure_started(id, memory: memory)
      on_exit(fn -> Characters.stop(id) end)
      assert {:ok, ^memory} = Character.memory(id)
    end
  end
end

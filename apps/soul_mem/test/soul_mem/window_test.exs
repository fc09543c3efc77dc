defmodule SoulMem.WindowTest do
  use ExUnit.Case, async: true

  alias SoulMem.Window

  @at ~U[2026-06-01 12:00:00Z]

  defp msg(text, role \\ :user), do: %{role: role, text: text, at: @at}

  defp push_texts(window, texts) do
    Enum.reduce(texts, window, fn text, acc ->
      {:ok, acc} = Window.push(acc, msg(text))
      acc
    end)
  end

  defp texts(messages), do: Enum.map(messages, & &1.text)

  describe "new/1" do
    test "defaults: capacity 12, interval = capacity" do
      window = Window.new()
      assert window.capacity == 12 and window.interval == 12
      assert Window.summary(window) == ""
    end

    test "an interval larger than the capacity is refused" do
      assert_raise ArgumentError, ~r/interval/, fn -> Window.new(capacity: 3, interval: 4) end
      assert_raise ArgumentError, ~r/capacity/, fn -> Window.new(capacity: 0) end
      assert_raise ArgumentError, fn -> Window.new(bogus: 1) end
    end
  end

  describe "tags" do
    test "every interval-th message is tagged, starting with the first" do
      window = Window.new(capacity: 10, interval: 3) |> push_texts(~w(a b c d e f g))
      tagged = for e <- Window.entries(window), e.tagged, do: e.message.text
      assert tagged == ~w(a d g)
    end

    test "a forced tag restarts the interval" do
      window = Window.new(capacity: 10, interval: 3) |> push_texts(~w(a b))
      window = window |> Window.tag_last() |> push_texts(~w(c d e f))
      tagged = for e <- Window.entries(window), e.tagged, do: e.message.text
      assert tagged == ~w(a b e)
      assert Window.tag_last(Window.new()) == Window.new()
    end

    test "every message is covered by some summary job (interval <= capacity)" do
      for capacity <- 1..5, interval <- 1..capacity do
        window = Window.new(capacity: capacity, interval: interval)
        all = Enum.map(1..20, &"m#{&1}")
        window = push_texts(window, all)
        popped = Enum.take(all, 20 - capacity)

        covered =
          window
          |> Window.jobs()
          |> Enum.flat_map(&[&1.popped | &1.window])
          |> texts()
          |> MapSet.new()

        assert Enum.all?(popped, &(&1 in covered)),
               "capacity #{capacity} interval #{interval}: #{inspect(popped -- MapSet.to_list(covered))}"
      end
    end
  end

  describe "sliding out" do
    test "a tagged message sliding out queues a job: popped + window, and stays pending" do
      window = Window.new(capacity: 3) |> push_texts(~w(a b c d))
      assert texts(Window.messages(window)) == ~w(b c d)
      assert texts(Window.pending(window)) == ~w(a)
      assert texts(Window.visible(window)) == ~w(a b c d)

      assert [job] = Window.jobs(window)
      assert job.popped.text == "a"
      assert texts(job.window) == ~w(b c d)
    end

    test "untagged messages are dropped once their summary landed" do
      window = Window.new(capacity: 3) |> push_texts(~w(a b c d))
      {:ok, job, window} = Window.next_job(window)
      {:ok, window} = Window.complete(window, job.id, "S1")
      assert Window.pending(window) == []
      assert Window.summary(window) == "S1"

      window = push_texts(window, ~w(e))
      assert texts(Window.visible(window)) == ~w(c d e)
      assert Window.jobs(window) == []
    end

    test "untagged messages stay pending while the summary covering them is in flight" do
      window = Window.new(capacity: 3) |> push_texts(~w(a b c d))
      {:ok, job, window} = Window.next_job(window)
      window = push_texts(window, ~w(e f))
      assert texts(Window.visible(window)) == ~w(a b c d e f)

      {:ok, window} = Window.complete(window, job.id, "S1")
      assert texts(Window.visible(window)) == ~w(d e f)
    end

    test "summaries are cumulative: the next prompt holds the previous summary and its window" do
      window = Window.new(capacity: 3) |> push_texts(~w(a b c d))
      {:ok, job1, window} = Window.next_job(window)
      [_, %{content: first}] = Window.prompt(job1, Window.summary(window))
      assert first =~ "（无）"
      assert first =~ "用户：a"
      {:ok, window} = Window.complete(window, job1.id, "第一次摘要")

      window = push_texts(window, ~w(e f g))
      {:ok, job2, window} = Window.next_job(window)
      assert job2.popped.text == "d"
      assert texts(job2.window) == ~w(e f g)

      [%{role: "system"}, %{role: "user", content: prompt}] =
        Window.prompt(job2, Window.summary(window))

      assert prompt =~ "第一次摘要"
      assert prompt =~ "用户：d"
      for t <- ~w(e f g), do: assert(prompt =~ "用户：" <> t)
      refute prompt =~ "用户：a"
    end

    test "jobs run one at a time; a failed head blocks until retried" do
      window = Window.new(capacity: 2) |> push_texts(~w(a b c d e))
      assert length(Window.jobs(window)) == 2
      {:ok, job1, window} = Window.next_job(window)
      assert Window.next_job(window) == :none

      window = Window.fail(window, job1.id)
      assert Window.next_job(window) == :none
      assert texts(Window.visible(window)) == ~w(a b c d e)

      {:ok, jobs, window} = Window.checkout_failed(window)
      assert Enum.map(jobs, & &1.popped.text) == ~w(a c)
      assert Window.checkout_failed(window) == :none
      {:ok, window} = Window.complete(window, hd(jobs).id, "S1")
      assert {:error, :unknown_job} = Window.complete(window, 999, "x")
      {:ok, window} = Window.complete(window, List.last(jobs).id, "S2")
      assert Window.summary(window) == "S2"
      assert texts(Window.visible(window)) == ~w(d e)
    end
  end

  describe "failures and retries" do
    test "a blank summary is refused: the summary, the job and the pending stay" do
      window = Window.new(capacity: 3, summary: "旧摘要") |> push_texts(~w(a b c d))
      {:ok, job, window} = Window.next_job(window)

      for blank <- ["", "  ", "\n\t"] do
        assert {:error, :empty_summary} = Window.complete(window, job.id, blank)
      end

      window = Window.fail(window, job.id)
      assert Window.summary(window) == "旧摘要"
      assert texts(Window.visible(window)) == ~w(a b c d)
      assert [%{status: :failed}] = Window.jobs(window)
    end

    test "requeue_failed puts failed jobs back in order and leaves in-flight ones alone" do
      window = Window.new(capacity: 2) |> push_texts(~w(a b c d e))
      {:ok, job1, window} = Window.next_job(window)

      # In flight: nothing to requeue, nothing else runs.
      assert Window.requeue_failed(window) == window
      assert Window.next_job(Window.requeue_failed(window)) == :none

      window = window |> Window.fail(job1.id) |> Window.requeue_failed()
      assert Enum.map(Window.jobs(window), & &1.status) == [:queued, :queued]
      {:ok, again, window} = Window.next_job(window)
      assert again.id == job1.id and again.attempts == 2
      assert Window.next_job(window) == :none
    end

    test "fail_jobs fails only the given jobs still in flight" do
      window = Window.new(capacity: 2) |> push_texts(~w(a b c d e))
      {:ok, job1, window} = Window.next_job(window)
      [_, job2] = Window.jobs(window)

      # A maintenance run that checked out nothing does not touch job 1.
      assert Window.fail_jobs(window, []) == window
      assert Window.fail_jobs(window, [job2.id]) == window

      window = Window.fail(window, job1.id)
      {:ok, jobs, window} = Window.checkout_failed(window)
      window = Window.fail_jobs(window, Enum.map(jobs, & &1.id))
      assert Enum.map(Window.jobs(window), & &1.status) == [:failed, :failed]
    end
  end

  describe "validation" do
    test "invalid messages are refused and leave the window unchanged" do
      window = Window.new(capacity: 3, max_bytes: 10) |> push_texts(~w(a))

      assert {:error, :invalid_role} = Window.push(window, %{msg("x") | role: :system})
      assert {:error, :empty_text} = Window.push(window, msg("  "))
      assert {:error, :too_large} = Window.push(window, msg(String.duplicate("x", 11)))
      assert {:error, :not_utf8} = Window.push(window, msg(<<0xFF>>))
      assert {:error, :invalid_at} = Window.push(window, %{msg("x") | at: "now"})
      assert {:error, :invalid_message} = Window.push(window, "hello")
      assert {:error, :invalid_message} = Window.push(window, %{msg("x") | text: 1})

      assert {:error, :empty_text} = Window.push_all(window, [msg("ok"), msg("")])
      assert texts(Window.messages(window)) == ~w(a)

      {:ok, window} = Window.push_all(window, [msg("b"), msg("c", :assistant)])
      assert texts(Window.messages(window)) == ~w(a b c)
      assert {:ok, %{text: "z"}} = Window.validate(window, msg("z"))
    end
  end

  describe "bounded backlog" do
    test "pushes past max_pending waiting messages are refused and change nothing" do
      # capacity 2, every message tagged: each push past 2 queues a job and a
      # pending message that waits (no LLM completes them here).
      window = Window.new(capacity: 2, interval: 1, max_pending: 3) |> push_texts(~w(a b c d e))
      assert length(Window.pending(window)) == 3
      assert {:error, :backlog_full} = Window.push(window, msg("f"))
      assert {:error, :backlog_full} = Window.push_all(window, [msg("f"), msg("g")])
      # A landed summary makes room again.
      {:ok, job, window} = Window.next_job(window)
      {:ok, window} = Window.complete(window, job.id, "摘要")
      assert {:ok, _} = Window.push(window, msg("f"))
      assert_raise ArgumentError, ~r/max_pending/, fn -> Window.new(max_pending: 0) end
    end

    test "a catch-up checks out at most max failed jobs, oldest first" do
      window = Window.new(capacity: 1, interval: 1) |> push_texts(~w(a b c d e))
      {:ok, job, window} = Window.next_job(window)
      window = Window.fail(window, job.id)
      assert {:ok, [j1, j2], window} = Window.checkout_failed(window, 2)
      assert [j1.id, j2.id] == window |> Window.jobs() |> Enum.take(2) |> Enum.map(& &1.id)

      assert window |> Window.jobs() |> Enum.map(& &1.status) == [
               :in_flight,
               :in_flight,
               :queued,
               :queued
             ]
    end
  end
end

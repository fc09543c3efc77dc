defmodule SoulMem.Window do
  @moduledoc """
  A character's sliding window of recent messages with a cumulative summary
  (the seed's 滑动窗口 + 摘要记忆). Pure data: no processes, no LLM calls.

  Rules:

    * the window holds at most `capacity` messages (oldest first);
    * every `interval`-th pushed message gets a summary tag, starting with the
      first one; `interval` is never larger than `capacity`, so every message
      is covered by some summary (seed rule). A tag can also be forced
      (`tag_last/1`: conversation ended, topic switch);
    * when a tagged message slides out, a summary *job* is queued: the
      previous summary + the window at that moment + the popped message. The
      caller runs it (LLM) and reports back with `complete/3` or `fail/2`;
      jobs are cumulative, so they run one at a time, in order;
    * untagged messages that slide out are dropped (forgetting by design) —
      unless a summary covering them has not landed yet: until it does, they
      stay in `pending` and remain visible (`visible/1`), so nothing leaves
      the context between pop and summary.

  Messages are `%{role: :user | :assistant, text: binary, at: DateTime.t()}`.
  """

  alias __MODULE__.Job

  @default_max_bytes 16_000
  @default_max_pending 1_000

  defstruct capacity: 12,
            interval: 12,
            max_bytes: @default_max_bytes,
            max_pending: @default_max_pending,
            seq: 0,
            last_tag_seq: nil,
            messages: [],
            pending: [],
            jobs: [],
            summary: "",
            covered_upto: 0,
            next_job_id: 1

  @type role :: :user | :assistant
  @type message :: %{role: role(), text: String.t(), at: DateTime.t()}

  @typedoc "A message as stored: the message plus its sequence number and tag."
  @type entry :: %{seq: pos_integer(), tagged: boolean(), message: message()}

  @type t :: %__MODULE__{
          capacity: pos_integer(),
          interval: pos_integer(),
          max_bytes: pos_integer(),
          max_pending: pos_integer(),
          seq: non_neg_integer(),
          last_tag_seq: non_neg_integer() | nil,
          messages: [entry()],
          pending: [entry()],
          jobs: [Job.t()],
          summary: String.t(),
          covered_upto: non_neg_integer(),
          next_job_id: pos_integer()
        }

  @type error_reason ::
          :invalid_message
          | :invalid_role
          | :empty_text
          | :not_utf8
          | :too_large
          | :invalid_at
          | :backlog_full

  defmodule Job do
    @moduledoc """
    A queued summary job: summarise `popped` (the tagged message that slid
    out) together with `window` (the window right after it slid out) on top
    of the summary current when the job runs. `upto` is the sequence number
    of the newest message it covers. `status` is `:queued`, `:in_flight` or
    `:failed`.
    """
    @enforce_keys [:id, :popped, :window, :upto]
    defstruct [:id, :popped, :window, :upto, status: :queued, attempts: 0]

    @type t :: %__MODULE__{
            id: pos_integer(),
            popped: SoulMem.Window.message(),
            window: [SoulMem.Window.message()],
            upto: non_neg_integer(),
            status: :queued | :in_flight | :failed,
            attempts: non_neg_integer()
          }
  end

  @doc """
  A new, empty window.

  Options: `:capacity` (default 12), `:interval` (default = capacity; must be
  `1..capacity`), `:max_bytes` (largest message text, default 16000),
  `:max_pending` (most messages that may wait for their summary, default
  1000: past it pushes are refused with `:backlog_full` until summaries land,
  so a long LLM outage cannot grow memory without bound), `:summary`
  (initial summary, default `""`). Invalid options raise `ArgumentError`.
  """
  @spec new(keyword()) :: t()
  def new(opts \\ []) do
    opts = Keyword.validate!(opts, [:capacity, :interval, :max_bytes, :max_pending, summary: ""])
    capacity = Keyword.get(opts, :capacity) || 12
    interval = Keyword.get(opts, :interval) || capacity
    max_bytes = Keyword.get(opts, :max_bytes) || @default_max_bytes
    max_pending = Keyword.get(opts, :max_pending) || @default_max_pending
    summary = Keyword.fetch!(opts, :summary)

    unless is_integer(max_pending) and max_pending >= 1,
      do:
        raise(
          ArgumentError,
          "expected :max_pending to be a positive integer, got: #{inspect(max_pending)}"
        )

    unless is_integer(capacity) and capacity >= 1,
      do:
        raise(
          ArgumentError,
          "expected :capacity to be a positive integer, got: #{inspect(capacity)}"
        )

    unless is_integer(interval) and interval >= 1 and interval <= capacity,
      do:
        raise(
          ArgumentError,
          "expected :interval to be an integer in 1..#{capacity}, got: #{inspect(interval)}"
        )

    unless is_integer(max_bytes) and max_bytes >= 1,
      do:
        raise(
          ArgumentError,
          "expected :max_bytes to be a positive integer, got: #{inspect(max_bytes)}"
        )

    unless is_binary(summary),
      do: raise(ArgumentError, "expected :summary to be a binary, got: #{inspect(summary)}")

    %__MODULE__{
      capacity: capacity,
      interval: interval,
      max_bytes: max_bytes,
      max_pending: max_pending,
      summary: summary
    }
  end

  @doc """
  Validates a message without pushing it. Returns the message (only the
  `:role`, `:text` and `:at` keys) or `{:error, reason}`.
  """
  @spec validate(t(), term()) :: {:ok, message()} | {:error, error_reason()}
  def validate(%__MODULE__{max_bytes: max_bytes}, message), do: check(message, max_bytes)

  @doc """
  Pushes one message. Returns the new window, or `{:error, reason}` for an
  invalid message or when more than `max_pending` messages would wait for
  their summary (`:backlog_full`); the window is unchanged then.

  When the push makes a tagged message slide out, a summary job is queued
  (see `next_job/1`).
  """
  @spec push(t(), term()) :: {:ok, t()} | {:error, error_reason()}
  def push(%__MODULE__{} = window, message), do: push_all(window, [message])

  @doc """
  Pushes several messages, all or nothing: if one is invalid, or the
  backlog would pass `max_pending`, returns the error and the window is
  unchanged.
  """
  @spec push_all(t(), [term()]) :: {:ok, t()} | {:error, error_reason()}
  def push_all(%__MODULE__{} = window, messages) when is_list(messages) do
    messages
    |> Enum.reduce_while({:ok, []}, fn message, {:ok, acc} ->
      case check(message, window.max_bytes) do
        {:ok, valid} -> {:cont, {:ok, [valid | acc]}}
        {:error, _} = error -> {:halt, error}
      end
    end)
    |> case do
      {:ok, valid} ->
        valid |> Enum.reverse() |> Enum.reduce(window, &do_push(&2, &1)) |> bounded(window)

      error ->
        error
    end
  end

  def push_all(%__MODULE__{}, _messages), do: {:error, :invalid_message}

  # Only growth past the cap is refused: a window loaded with a longer
  # backlog still takes pushes that do not add to it.
  defp bounded(new, old) do
    waiting = length(new.pending)

    if waiting > new.max_pending and waiting > length(old.pending),
      do: {:error, :backlog_full},
      else: {:ok, new}
  end

  @doc """
  Takes back the newest `n` messages (a client that edits or regenerates its
  last turn sends it again): `{:ok, window, seqs}` with the sequence numbers
  removed, or `{:error, :not_retractable}` when fewer than `n` messages are
  in the window proper (one that slid out is covered by a summary job and
  stays). Sequence numbers are not reused.
  """
  @spec retract(t(), non_neg_integer()) ::
          {:ok, t(), [pos_integer()]} | {:error, :not_retractable}
  def retract(%__MODULE__{} = window, 0), do: {:ok, window, []}

  def retract(%__MODULE__{messages: messages} = window, n)
      when is_integer(n) and n > 0 and length(messages) >= n do
    {kept, gone} = Enum.split(messages, length(messages) - n)
    {:ok, %{window | messages: kept}, Enum.map(gone, & &1.seq)}
  end

  def retract(%__MODULE__{}, _n), do: {:error, :not_retractable}

  @doc """
  Forces a summary tag on the newest message in the window (conversation
  ended, topic switch). The automatic tag interval restarts from it. A no-op
  on an empty window.
  """
  @spec tag_last(t()) :: t()
  def tag_last(%__MODULE__{messages: []} = window), do: window

  def tag_last(%__MODULE__{messages: messages} = window) do
    {init, [last]} = Enum.split(messages, -1)
    %{window | messages: init ++ [%{last | tagged: true}], last_tag_seq: last.seq}
  end

  @doc "The messages in the window, oldest first (without `pending`)."
  @spec messages(t()) :: [message()]
  def messages(%__MODULE__{messages: messages}), do: Enum.map(messages, & &1.message)

  @doc """
  The messages visible to recall, oldest first: those that slid out but whose
  summary has not landed yet (`pending`), then the window.
  """
  @spec visible(t()) :: [message()]
  def visible(%__MODULE__{pending: pending, messages: messages}),
    do: Enum.map(pending ++ messages, & &1.message)

  @doc "Messages that slid out and wait for their summary, oldest first."
  @spec pending(t()) :: [message()]
  def pending(%__MODULE__{pending: pending}), do: Enum.map(pending, & &1.message)

  @doc """
  Empties the cumulative summary (consolidation turned it into long-term
  memory). Later summary jobs start from nothing.
  """
  @spec clear_summary(t()) :: t()
  def clear_summary(%__MODULE__{} = window), do: %{window | summary: ""}

  @doc "The window's entries (message + sequence number + tag), oldest first."
  @spec entries(t()) :: [entry()]
  def entries(%__MODULE__{messages: messages}), do: messages

  @doc "The cumulative summary (`\"\"` before the first one)."
  @spec summary(t()) :: String.t()
  def summary(%__MODULE__{summary: summary}), do: summary

  @doc "Number of messages in the window."
  @spec size(t()) :: non_neg_integer()
  def size(%__MODULE__{messages: messages}), do: length(messages)

  @doc "The summary jobs not completed yet, oldest first."
  @spec jobs(t()) :: [Job.t()]
  def jobs(%__MODULE__{jobs: jobs}), do: jobs

  @doc """
  Checks out the next job to run: the oldest one, if it is `:queued` (not in
  flight, not failed). Marks it `:in_flight` and returns it; `:none` when
  there is nothing to run now. A failed head blocks the queue until it is
  retried (`checkout_failed/1`), because summaries are cumulative.
  """
  @spec next_job(t()) :: {:ok, Job.t(), t()} | :none
  def next_job(%__MODULE__{jobs: [%Job{status: :queued} = job | rest]} = window) do
    job = %{job | status: :in_flight, attempts: job.attempts + 1}
    {:ok, job, %{window | jobs: [job | rest]}}
  end

  def next_job(%__MODULE__{}), do: :none

  @doc """
  Checks out jobs for a retry when the oldest one has failed: the oldest
  `max` jobs (default all) that are not in flight become `:in_flight` and
  are returned, oldest first. `:none` when the head has not failed. A small
  `max` keeps a catch-up run short: each run's summaries are committed when
  it ends, and the rest wait for the next run or the retry timer.
  """
  @spec checkout_failed(t(), pos_integer() | :all) :: {:ok, [Job.t()], t()} | :none
  def checkout_failed(window, max \\ :all)

  def checkout_failed(%__MODULE__{jobs: [%Job{status: :failed} | _] = jobs} = window, max) do
    {taken, rest} = if max == :all, do: {jobs, []}, else: Enum.split(jobs, max)
    taken = Enum.map(taken, &%{&1 | status: :in_flight, attempts: &1.attempts + 1})
    {:ok, taken, %{window | jobs: taken ++ rest}}
  end

  def checkout_failed(%__MODULE__{}, _max), do: :none

  @doc """
  Records the summary of job `job_id`, which must be the oldest job: the
  summary replaces the previous one and the messages it covers leave
  `pending`. Returns `{:error, :unknown_job}` for any other id and
  `{:error, :empty_summary}` for a blank summary (empty or whitespace only:
  it would wipe the cumulative summary; the caller fails the job instead).
  The window is unchanged on error.
  """
  @spec complete(t(), pos_integer(), String.t()) ::
          {:ok, t()} | {:error, :unknown_job | :empty_summary}
  def complete(%__MODULE__{jobs: [%Job{id: id} = job | rest]} = window, id, summary)
      when is_binary(summary) do
    if String.trim(summary) == "" do
      {:error, :empty_summary}
    else
      pending = Enum.reject(window.pending, &(&1.seq <= job.upto))
      {:ok, %{window | jobs: rest, summary: summary, covered_upto: job.upto, pending: pending}}
    end
  end

  def complete(%__MODULE__{}, _id, _summary), do: {:error, :unknown_job}

  @doc """
  Puts failed jobs back in the queue (`:failed` → `:queued`), so that
  `next_job/1` runs the head again. Jobs in flight are left alone: a job is
  never run twice at once.
  """
  @spec requeue_failed(t()) :: t()
  def requeue_failed(%__MODULE__{jobs: jobs} = window) do
    jobs =
      Enum.map(jobs, fn
        %Job{status: :failed} = job -> %{job | status: :queued}
        job -> job
      end)

    %{window | jobs: jobs}
  end

  @doc """
  Marks the jobs among `job_ids` that are still in flight as failed (those a
  maintenance run checked out and did not complete). Other jobs, in flight
  or not, are left alone.
  """
  @spec fail_jobs(t(), [pos_integer()]) :: t()
  def fail_jobs(%__MODULE__{jobs: jobs} = window, job_ids) when is_list(job_ids) do
    jobs =
      Enum.map(jobs, fn
        %Job{status: :in_flight, id: id} = job ->
          if id in job_ids, do: %{job | status: :failed}, else: job

        job ->
          job
      end)

    %{window | jobs: jobs}
  end

  @doc """
  Marks job `job_id` (and every other in-flight job) as failed: it stays
  queued, its messages stay pending, and it is retried through
  `requeue_failed/1` or `checkout_failed/1`. Unknown ids leave the window
  unchanged.
  """
  @spec fail(t(), pos_integer()) :: t()
  def fail(%__MODULE__{jobs: jobs} = window, job_id) do
    if Enum.any?(jobs, &(&1.id == job_id)) do
      jobs =
        Enum.map(jobs, fn
          %Job{status: :in_flight} = job -> %{job | status: :failed}
          job -> job
        end)

      %{window | jobs: jobs}
    else
      window
    end
  end

  @doc """
  The LLM messages of a summary job: a system instruction and one user
  message with the previous summary, the window and the message that slid
  out. `previous` is the summary the job builds on.
  """
  @spec prompt(Job.t(), String.t()) :: [%{role: String.t(), content: String.t()}]
  def prompt(%Job{} = job, previous) when is_binary(previous) do
    previous = if previous == "", do: "（无）", else: previous

    user =
      Enum.join(
        [
          "【之前的摘要】",
          previous,
          "",
          "【滑出窗口的消息】",
          format_message(job.popped),
          "",
          "【当前窗口】",
          Enum.map_join(job.window, "\n", &format_message/1)
        ],
        "\n"
      )

    [
      %{
        role: "system",
        content:
          "你负责为角色扮演对话维护累加性的精简摘要。在之前摘要的基础上，结合滑出窗口的消息和当前窗口，" <>
            "写出新的摘要：保留重要的事实、经历、关系与情绪，省略琐碎细节。只输出摘要正文。"
      },
      %{role: "user", content: user}
    ]
  end

  @doc "One message as a prompt line: `用户：…` or `角色：…`."
  @spec format_message(message()) :: String.t()
  def format_message(%{role: :user, text: text}), do: "用户：" <> text
  def format_message(%{role: :assistant, text: text}), do: "角色：" <> text

  ## Internals

  defp do_push(window, message) do
    seq = window.seq + 1
    tagged = window.last_tag_seq == nil or seq - window.last_tag_seq >= window.interval
    entry = %{seq: seq, tagged: tagged, message: message}
    last_tag_seq = if tagged, do: seq, else: window.last_tag_seq

    window = %{
      window
      | seq: seq,
        last_tag_seq: last_tag_seq,
        messages: window.messages ++ [entry]
    }

    if length(window.messages) > window.capacity do
      [popped | rest] = window.messages
      slide_out(%{window | messages: rest}, popped)
    else
      window
    end
  end

  defp slide_out(window, %{tagged: true} = popped) do
    job = %Job{
      id: window.next_job_id,
      popped: popped.message,
      window: Enum.map(window.messages, & &1.message),
      upto: List.last(window.messages).seq
    }

    %{
      window
      | jobs: window.jobs ++ [job],
        next_job_id: window.next_job_id + 1,
        pending: window.pending ++ [popped]
    }
  end

  defp slide_out(window, popped) do
    if popped.seq <= window.covered_upto do
      window
    else
      %{window | pending: window.pending ++ [popped]}
    end
  end

  defp check(%{role: role, text: text, at: at} = _message, max_bytes) do
    cond do
      role not in [:user, :assistant] -> {:error, :invalid_role}
      not is_binary(text) -> {:error, :invalid_message}
      byte_size(text) > max_bytes -> {:error, :too_large}
      not String.valid?(text) -> {:error, :not_utf8}
      String.trim(text) == "" -> {:error, :empty_text}
      not match?(%DateTime{}, at) -> {:error, :invalid_at}
      true -> {:ok, %{role: role, text: text, at: at}}
    end
  end

  defp check(_message, _max_bytes), do: {:error, :invalid_message}
end

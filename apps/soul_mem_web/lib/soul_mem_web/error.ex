defmodule SoulMemWeb.Error do
  @moduledoc """
  The one error shape of the endpoint, for HTTP (`{"error": {"code",
  "message"}}` with `status`) and for channel replies.

  `from/1` maps what the runtime returns (atoms, `%SoulMem.Error{}`, tagged
  tuples) to a stable `code`, a message for people and an HTTP status.
  Unknown terms become `internal` (500) with a generic message: internals
  are logged, never sent.
  """

  require Logger

  @enforce_keys [:code, :message, :status]
  defstruct [:code, :message, :status, retry_after: nil]

  @typedoc "`retry_after` (seconds) is sent as `Retry-After` and in the body."
  @type t :: %__MODULE__{
          code: String.t(),
          message: String.t(),
          status: 400..599,
          retry_after: pos_integer() | nil
        }

  # reason => {status, message}; the code is the reason's name.
  @known %{
    invalid_json: {400, "the body is not valid JSON"},
    invalid_frame: {400, "the frame is not a MessagePack request map"},
    invalid_payload: {400, "the payload has the wrong shape"},
    invalid_path: {400, "the URL path is not valid percent-encoding"},
    invalid_message: {422, "a message needs role \"user\" or \"assistant\" and a text"},
    invalid_role: {422, "role must be \"user\" or \"assistant\""},
    empty_text: {422, "the text is empty"},
    not_utf8: {422, "the text is not valid UTF-8"},
    invalid_at: {422, "invalid message time"},
    invalid_request: {422, "invalid recall request"},
    invalid_messages: {422, "messages must be a list"},
    invalid_queries: {422, "queries must be a list of sub-query objects"},
    invalid_text: {422, "text must be a string"},
    invalid_feedback: {422, "value must be 1 or -1"},
    invalid_note_id: {422, "note id must be a non-empty string"},
    invalid_value: {422, "a field has a value outside its domain"},
    invalid_timestamp: {422, "a timestamp cannot be parsed"},
    duplicate_id: {422, "two notes share an id"},
    missing_link_target: {422, "a link names a note that does not exist"},
    invalid_character: {422, "invalid character id"},
    invalid_argument: {422, "an argument is not valid here"},
    invalid_card: {422, "the character card cannot be read"},
    unauthorized: {401, "a valid token is required"},
    forbidden: {403, "the token does not open this character"},
    not_found: {404, "not found"},
    unmatched_topic: {404, "unknown topic"},
    unknown_event: {400, "unknown event"},
    method_not_allowed: {405, "method not allowed"},
    busy: {409, "the character is busy with maintenance"},
    running: {409, "the character is running; import with replace to replace it"},
    not_persisted: {409, "the character has no store (persistence is off for it)"},
    invalid_document: {400, "the document must be a JSON object"},
    exists: {409, "the character already exists; import with replace to replace it"},
    too_large: {413, "the payload is too large"},
    rate_limited: {429, "too many requests; retry later"},
    too_many_connections: {429, "too many connections for this token"},
    not_retractable: {409, "the turn to take back already left the window"},
    backlog_full: {429, "too many messages wait for their summary; retry later"},
    unsupported: {501, "not supported by this runtime yet"},
    not_running: {503, "the character is not running"},
    home_node_down: {503, "home node down"},
    moving: {503, "the character is moving to another node; retry shortly"},
    loading: {503, "the character is still loading; retry shortly"},
    character_unavailable: {503, "the character cannot be started"},
    timeout: {504, "the character did not answer in time"},
    limit_exceeded: {422, "the input holds more items than allowed"},
    embedding: {503, "the embedding model is unavailable"},
    in_use: {409, "the character's store is in use by another process"},
    disk_full: {507, "the disk is full; nothing was written"},
    read_only: {500, "the character's store cannot be written"},
    corrupt: {500, "the character's store is damaged"},
    incompatible: {500, "the character's store is not compatible with this version"},
    io: {500, "storage error"},
    poisoned: {500, "the character's graph is in an unknown state"},
    replica_mismatch: {503, "the character's replica is out of step; retry shortly"},
    internal: {500, "internal error"}
  }

  @storage [:io, :in_use, :disk_full, :read_only, :corrupt, :incompatible, :replica_mismatch]

  @doc """
  Builds an error from a known reason atom, with an optional message
  (default: the reason's standard message).
  """
  @spec new(atom(), String.t() | nil) :: t()
  def new(reason, message \\ nil) when is_atom(reason) do
    {status, default} = Map.get(@known, reason, @known.internal)
    code = if Map.has_key?(@known, reason), do: Atom.to_string(reason), else: "internal"
    %__MODULE__{code: code, status: status, message: message || default}
  end

  @doc "A 429 `rate_limited` error asking the client to wait `seconds`."
  @spec rate_limited(pos_integer()) :: t()
  def rate_limited(seconds) when is_integer(seconds) and seconds > 0,
    do: %{new(:rate_limited, "too many requests; retry in #{seconds} s") | retry_after: seconds}

  @doc """
  Maps a runtime error (the `reason` of `{:error, reason}`) to an error.
  """
  @spec from(term()) :: t()
  def from(%__MODULE__{} = error), do: error
  def from(:not_supported), do: new(:unsupported)

  # Store errors name files; their messages are logged, never sent.
  def from(%SoulMem.Error{reason: reason} = error) when reason in @storage do
    Logger.error("soul_mem_web: #{Exception.message(error)}")
    new(reason)
  end

  def from(%SoulMem.Error{reason: reason, message: message}) when is_map_key(@known, reason),
    do: new(reason, message)

  # Summaries catch up when the LLM is back; the character retries them with
  # backoff, so a client is asked to wait about that long.
  def from(:backlog_full), do: %{new(:backlog_full) | retry_after: 30}
  def from(:loading), do: %{new(:loading) | retry_after: 5}
  # A move takes about a second; the runtime already waited 10 s for it.
  def from(:moving), do: %{new(:moving) | retry_after: 5}
  def from(reason) when is_map_key(@known, reason), do: new(reason)
  def from({:graph_not_found, _path}), do: new(:character_unavailable)
  def from({:load_failed, _}), do: new(:character_unavailable)
  def from({:store_failed, error}), do: from(error)
  def from({:shutdown, reason}), do: from(reason)

  def from(other) do
    Logger.error("soul_mem_web: unexpected runtime error #{inspect(other, limit: 20)}")
    new(:internal)
  end

  @doc """
  The JSON body of an error: `%{"error" => %{"code", "message"}}`, plus
  `"retry_after"` (seconds) when the client should wait.
  """
  @spec body(t()) :: map()
  def body(%__MODULE__{code: code, message: message, retry_after: nil}),
    do: %{"error" => %{"code" => code, "message" => message}}

  def body(%__MODULE__{code: code, message: message, retry_after: seconds}),
    do: %{"error" => %{"code" => code, "message" => message, "retry_after" => seconds}}
end

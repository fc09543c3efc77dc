defmodule SoulMem.LLM do
  @moduledoc """
  Client for any OpenAI-compatible `/chat/completions` endpoint (OpenAI,
  SiliconFlow, a local llama.cpp server …) over OTP `:httpc`.

  Requests go through the `:soul_mem_llm` httpc profile (started by
  `SoulMem.LLM.Profile` under the application supervisor) with
  `max_keep_alive_length: 0`, so concurrent calls do not queue behind one
  connection. HTTPS verifies the peer against the system CA store and checks
  the hostname.

  Settings (application env of `:soul_mem`, overridable per call):

    * `:llm_base_url` — e.g. `"http://127.0.0.1:8080/v1"` (required)
    * `:llm_api_key` — sent as a Bearer token when set; never logged
    * `:llm_model`, `:llm_temperature` (0.7), `:llm_max_tokens` (512)
    * `:llm_connect_timeout_ms` (5000), `:llm_timeout_ms` (60000)
    * `:llm_retries` (3) — extra attempts on 429, 5xx, refused or dropped
      connections and timeouts, with exponential backoff from
      `:llm_backoff_ms` (500) capped at `:llm_max_backoff_ms` (8000)
  """

  @behaviour SoulMem.LLM.Client

  @doc "The configured LLM client (app env `:llm_client`, default this module)."
  @spec client() :: module()
  def client, do: Application.get_env(:soul_mem, :llm_client, __MODULE__)

  require Logger

  alias SoulMem.JSON
  alias SoulMem.LLM.Config

  @profile :soul_mem_llm

  @typedoc "A chat message: `%{role: \"system\" | \"user\" | \"assistant\", content: binary}`."
  @type chat_message :: %{
          required(:role) => String.t() | atom(),
          required(:content) => String.t()
        }

  @type error_reason ::
          :not_configured
          | {:http_status, pos_integer(), binary()}
          | {:connect, term()}
          | :timeout
          | {:invalid_response, term()}
          | {:invalid_messages, term()}

  @chat_opts [
    :base_url,
    :api_key,
    :model,
    :temperature,
    :max_tokens,
    :connect_timeout,
    :timeout,
    :retries,
    :backoff,
    :max_backoff,
    :json_schema,
    :json_mode,
    :config,
    :on_delta,
    :params
  ]

  @doc "The httpc profile every request goes through."
  @spec profile() :: atom()
  def profile, do: @profile

  @doc """
  Sends `messages` to the chat completions endpoint and returns the first
  choice's content and the decoded response. A blank content (empty or
  whitespace only) fails with `{:error, {:invalid_response, :empty_content}}`.

  Options (each overrides the application env, see the moduledoc):
  `:base_url`, `:api_key`, `:model`, `:temperature`, `:max_tokens`,
  `:connect_timeout`, `:timeout`, `:retries`, `:backoff`, `:max_backoff`,
  `:config` (a whole `SoulMem.LLM.Config`), and

    * `:json_schema` — a JSON Schema map: the answer must match it, sent as
      `response_format: {type: "json_schema", ...}`;
    * `:json_mode` — `:json_schema` (default) or `:json_object` (for servers
      such as older llama.cpp builds: `response_format: {type:
      "json_object"}` and the schema is appended to the system prompt);
    * `:on_delta` — a 1-arity function: the answer is streamed (`stream:
      true`, server-sent events) and each new piece of text is passed to it
      as it arrives (`SoulMem.LLM.Stream`); the result is the whole answer as
      without it. A failure before the first piece is retried like any
      other; after it, the call fails (a retry would repeat text);
    * `:params` — further request fields sent as they are (`"stop"`,
      `"top_p"`, a frontend's `"temperature"` …; string keys), over the
      configured ones.
  """
  @impl true
  @spec chat([chat_message()], keyword()) ::
          {:ok, %{content: String.t(), raw: map()}} | {:error, error_reason()}
  def chat(messages, opts \\ []) do
    opts = Keyword.validate!(opts, @chat_opts)
    config = Keyword.get(opts, :config) || Config.from_env()
    config = Config.merge(config, Keyword.take(opts, Config.keys()))

    with :ok <- check_config(config),
         {:ok, messages} <- normalize_messages(messages),
         {:ok, body} <- build_body(config, messages, opts) do
      body = Map.merge(body, Keyword.get(opts, :params) || %{})

      case Keyword.get(opts, :on_delta) do
        nil -> request(config, body, 0, &do_request/2)
        on_delta -> request(config, body, 0, &SoulMem.LLM.Stream.request(&1, &2, on_delta))
      end
    end
  end

  @doc """
  True when `opts` (or the application env under them) name an endpoint
  (`:base_url`), so `chat/2` would send a request rather than fail with
  `:not_configured`.
  """
  @impl true
  @spec configured?(keyword()) :: boolean()
  def configured?(opts \\ []) do
    # Only the endpoint is looked at: options that are wrong otherwise still make `chat/2`
    # fail with a reason worth reporting.
    url =
      cond do
        Keyword.has_key?(opts, :base_url) -> opts[:base_url]
        match?(%Config{}, opts[:config]) -> opts[:config].base_url
        true -> Config.from_env().base_url
      end

    check_config(%Config{base_url: url}) == :ok
  end

  ## Request body

  defp check_config(%Config{base_url: url}) when is_binary(url) and url != "", do: :ok
  defp check_config(_), do: {:error, :not_configured}

  defp normalize_messages(messages) when is_list(messages) and messages != [] do
    Enum.reduce_while(messages, {:ok, []}, fn
      %{role: role, content: content}, {:ok, acc}
      when role in [:system, :user, :assistant, "system", "user", "assistant"] and
             is_binary(content) ->
        {:cont, {:ok, [%{"role" => to_string(role), "content" => content} | acc]}}

      other, _ ->
        {:halt, {:error, {:invalid_messages, other}}}
    end)
    |> case do
      {:ok, acc} -> {:ok, Enum.reverse(acc)}
      error -> error
    end
  end

  defp normalize_messages(other), do: {:error, {:invalid_messages, other}}

  defp build_body(config, messages, opts) do
    body = %{
      "model" => config.model || "default",
      "messages" => messages,
      "temperature" => config.temperature,
      "max_tokens" => config.max_tokens,
      "stream" => false
    }

    case {Keyword.get(opts, :json_schema), Keyword.get(opts, :json_mode, :json_schema)} do
      {nil, _} ->
        {:ok, body}

      {schema, :json_schema} when is_map(schema) ->
        {:ok,
         Map.put(body, "response_format", %{
           "type" => "json_schema",
           "json_schema" => %{"name" => "answer", "strict" => true, "schema" => schema}
         })}

      {schema, :json_object} when is_map(schema) ->
        with {:ok, schema_json} <- JSON.encode(schema) do
          instruction =
            "Answer with one JSON object only, matching this JSON Schema:\n" <> schema_json

          {:ok,
           body
           |> Map.put("messages", add_instruction(messages, instruction))
           |> Map.put("response_format", %{"type" => "json_object"})}
        else
          {:error, reason} -> {:error, {:invalid_messages, {:json_schema, reason}}}
        end

      {schema, mode} ->
        raise ArgumentError,
              "expected :json_schema to be a map and :json_mode :json_schema | :json_object, " <>
                "got: #{inspect(schema)}, #{inspect(mode)}"
    end
  end

  defp add_instruction([%{"role" => "system", "content" => content} = system | rest], text),
    do: [%{system | "content" => content <> "\n\n" <> text} | rest]

  defp add_instruction(messages, text), do: [%{"role" => "system", "content" => text} | messages]

  ## HTTP

  defp request(config, body, attempt, send) do
    case send.(config, body) do
      {:ok, _} = ok ->
        ok

      # Part of a streamed answer went out: a retry would repeat it.
      {:error, {:after_delta, reason}} ->
        {:error, reason}

      {:error, reason} = error ->
        if retryable?(reason) and attempt < config.retries do
          delay = backoff(config, attempt)

          Logger.warning(
            "LLM request failed (#{describe(reason)}), retry #{attempt + 1}/#{config.retries} " <>
              "in #{delay} ms"
          )

          Process.sleep(delay)
          request(config, body, attempt + 1, send)
        else
          error
        end
    end
  end

  defp do_request(config, body) do
    {request, http_opts} = http_request(config, body, ~c"application/json")

    case :httpc.request(:post, request, http_opts, [body_format: :binary], @profile) do
      {:ok, {{_, 200, _}, _headers, resp}} ->
        parse(resp)

      {:ok, {{_, status, _}, _headers, resp}} ->
        {:error, {:http_status, status, truncate(resp)}}

      {:error, reason} ->
        {:error, classify(reason)}
    end
  catch
    :exit, reason -> {:error, {:connect, {:exit, reason}}}
  end

  @doc false
  # The httpc request and options of one chat completion (shared with
  # SoulMem.LLM.Stream).
  @spec http_request(Config.t(), map(), charlist()) :: {tuple(), keyword()}
  def http_request(config, body, accept) do
    url = String.trim_trailing(config.base_url, "/") <> "/chat/completions"
    headers = [{~c"accept", accept} | auth_header(config)]

    http_opts = [
      timeout: config.timeout,
      connect_timeout: config.connect_timeout,
      ssl: ssl_opts(url),
      autoredirect: false
    ]

    {{String.to_charlist(url), headers, ~c"application/json", JSON.encode!(body)}, http_opts}
  end

  defp auth_header(%Config{api_key: key}) when is_binary(key) and key != "",
    do: [{~c"authorization", String.to_charlist("Bearer " <> key)}]

  defp auth_header(_), do: []

  defp ssl_opts("https" <> _) do
    [
      verify: :verify_peer,
      cacerts: :public_key.cacerts_get(),
      depth: 4,
      customize_hostname_check: [match_fun: :public_key.pkix_verify_hostname_match_fun(:https)]
    ]
  end

  defp ssl_opts(_url), do: []

  @doc false
  # A whole (non-streamed) completion: its first choice's content.
  @spec parse(binary()) :: {:ok, %{content: String.t(), raw: map()}} | {:error, error_reason()}
  def parse(resp) do
    case JSON.decode(resp) do
      {:ok, %{"choices" => [%{"message" => %{"content" => content}} | _]} = raw}
      when is_binary(content) ->
        # No caller can use a blank answer (a summary, a revision, a reply);
        # accepting it would, e.g., replace a cumulative summary with nothing.
        if String.trim(content) == "",
          do: {:error, {:invalid_response, :empty_content}},
          else: {:ok, %{content: content, raw: raw}}

      {:ok, other} ->
        {:error, {:invalid_response, truncate_term(other)}}

      {:error, reason} ->
        {:error, {:invalid_response, reason}}
    end
  end

  @doc false
  @spec classify(term()) :: error_reason()
  def classify(:timeout), do: :timeout
  def classify({:failed_connect, _} = reason), do: {:connect, reason}
  def classify(reason), do: {:connect, reason}

  defp retryable?({:http_status, status, _}), do: status == 429 or status >= 500
  defp retryable?({:connect, _}), do: true
  defp retryable?(:timeout), do: true
  defp retryable?(_), do: false

  defp backoff(config, attempt),
    do: SoulMem.Backoff.delay(attempt, config.backoff, config.max_backoff)

  @doc false
  @spec truncate(binary()) :: binary()
  def truncate(binary) when byte_size(binary) > 500, do: binary_part(binary, 0, 500)
  def truncate(binary), do: binary

  defp truncate_term(term), do: inspect(term, limit: 20, printable_limit: 500)

  defp describe({:http_status, status, _}), do: "HTTP #{status}"
  defp describe(reason), do: inspect(reason, limit: 5)
end

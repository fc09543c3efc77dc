defmodule SoulMem.LLM.Config do
  @moduledoc """
  Settings of the LLM client (see `SoulMem.LLM`). Inspecting a config (in
  logs, crash reports, `iex`) never shows the API key.
  """

  defstruct base_url: nil,
            api_key: nil,
            model: nil,
            temperature: 0.7,
            max_tokens: 512,
            connect_timeout: 5_000,
            timeout: 60_000,
            retries: 3,
            backoff: 500,
            max_backoff: 8_000

  @type t :: %__MODULE__{
          base_url: String.t() | nil,
          api_key: String.t() | nil,
          model: String.t() | nil,
          temperature: number(),
          max_tokens: pos_integer(),
          connect_timeout: pos_integer(),
          timeout: pos_integer(),
          retries: non_neg_integer(),
          backoff: non_neg_integer(),
          max_backoff: non_neg_integer()
        }

  @env_keys [
    base_url: :llm_base_url,
    api_key: :llm_api_key,
    model: :llm_model,
    temperature: :llm_temperature,
    max_tokens: :llm_max_tokens,
    connect_timeout: :llm_connect_timeout_ms,
    timeout: :llm_timeout_ms,
    retries: :llm_retries,
    backoff: :llm_backoff_ms,
    max_backoff: :llm_max_backoff_ms
  ]

  @doc "The field names of the config."
  @spec keys() :: [atom()]
  def keys, do: Keyword.keys(@env_keys)

  @doc """
  The config from the `:soul_mem` application env (keys `:llm_base_url`,
  `:llm_api_key`, `:llm_model`, `:llm_temperature`, `:llm_max_tokens`,
  `:llm_connect_timeout_ms`, `:llm_timeout_ms`, `:llm_retries`,
  `:llm_backoff_ms`, `:llm_max_backoff_ms`); unset keys keep their defaults.
  """
  @spec from_env() :: t()
  def from_env do
    fields =
      for {field, env} <- @env_keys,
          value = Application.get_env(:soul_mem, env),
          value != nil,
          do: {field, value}

    merge(%__MODULE__{}, fields)
  end

  @doc """
  Overrides fields of `config` with `overrides` (a keyword list of field
  names). Raises `ArgumentError` for an unknown field or a value of the wrong
  type.
  """
  @spec merge(t(), keyword()) :: t()
  def merge(%__MODULE__{} = config, overrides) do
    Enum.reduce(overrides, config, fn {key, value}, acc ->
      unless Keyword.has_key?(@env_keys, key),
        do: raise(ArgumentError, "unknown LLM option #{inspect(key)}")

      unless valid?(key, value),
        do: raise(ArgumentError, "invalid value for LLM option #{inspect(key)}")

      Map.put(acc, key, value)
    end)
  end

  defp valid?(key, value) when key in [:base_url, :api_key, :model],
    do: is_nil(value) or is_binary(value)

  defp valid?(:temperature, value), do: is_number(value) and value >= 0

  defp valid?(key, value) when key in [:max_tokens, :connect_timeout, :timeout],
    do: is_integer(value) and value > 0

  defp valid?(_key, value), do: is_integer(value) and value >= 0

  defimpl Inspect do
    import Inspect.Algebra

    def inspect(config, opts) do
      key = if config.api_key in [nil, ""], do: nil, else: "**redacted**"

      fields =
        config
        |> Map.from_struct()
        |> Map.put(:api_key, key)
        |> Enum.sort()

      concat(["#SoulMem.LLM.Config<", to_doc(fields, opts), ">"])
    end
  end
end

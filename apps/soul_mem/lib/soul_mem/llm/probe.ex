defmodule SoulMem.LLM.Probe do
  @moduledoc """
  Finds a local OpenAI-compatible LLM server when none is configured: the
  usual loopback ports of llama.cpp (`:8080`), Ollama (`:11434`), LM Studio
  (`:1234`) and vLLM (`:8000`) are asked for `/v1/models`, 300 ms each, and
  the first that answers with a model list is used. Loopback only: nothing
  leaves the machine.
  """

  alias SoulMem.JSON

  @candidates [
    {"llama.cpp", "http://127.0.0.1:8080/v1"},
    {"Ollama", "http://127.0.0.1:11434/v1"},
    {"LM Studio", "http://127.0.0.1:1234/v1"},
    {"vLLM", "http://127.0.0.1:8000/v1"}
  ]

  @doc "The servers asked, in order: `{name, base_url}`."
  @spec candidates() :: [{String.t(), String.t()}]
  def candidates, do: @candidates

  @doc """
  The first of `candidates` that lists a model: `{:ok, %{name, base_url,
  model}}` (the first model listed), or `:none`. Each is given `timeout` ms.
  """
  @spec discover([{String.t(), String.t()}], pos_integer()) ::
          {:ok, %{name: String.t(), base_url: String.t(), model: String.t()}} | :none
  def discover(candidates \\ @candidates, timeout \\ 300) do
    Enum.find_value(candidates, :none, fn {name, base_url} ->
      case model(base_url, timeout) do
        {:ok, model} -> {:ok, %{name: name, base_url: base_url, model: model}}
        :error -> nil
      end
    end)
  end

  @doc """
  Uses a discovered server unless an LLM is configured (app env
  `:llm_base_url`): sets `:llm_base_url` and, when unset, `:llm_model`.
  Returns what it found, `:configured` or `:none`.
  """
  @spec configure_if_missing([{String.t(), String.t()}]) ::
          {:ok, map()} | :configured | :none
  def configure_if_missing(candidates \\ @candidates) do
    if Application.get_env(:soul_mem, :llm_base_url) not in [nil, ""] do
      :configured
    else
      with {:ok, found} <- discover(candidates) do
        Application.put_env(:soul_mem, :llm_base_url, found.base_url)

        if Application.get_env(:soul_mem, :llm_model) in [nil, ""],
          do: Application.put_env(:soul_mem, :llm_model, found.model)

        {:ok, found}
      end
    end
  end

  defp model(base_url, timeout) do
    url = String.to_charlist(String.trim_trailing(base_url, "/") <> "/models")
    opts = [timeout: timeout, connect_timeout: timeout, autoredirect: false]

    with {:ok, {{_, 200, _}, _headers, body}} <-
           :httpc.request(:get, {url, []}, opts, [body_format: :binary], SoulMem.LLM.profile()),
         {:ok, %{"data" => [%{"id" => id} | _]}} when is_binary(id) <- JSON.decode(body) do
      {:ok, id}
    else
      _ -> :error
    end
  end
end

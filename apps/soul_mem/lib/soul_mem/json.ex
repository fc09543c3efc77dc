defmodule SoulMem.JSON do
  @moduledoc """
  JSON encoding and decoding over Debian's `:jiffy` (the one JSON library of
  the project; there is no Hex).

  Conventions, in both directions:

    * objects decode to maps with string keys;
    * `nil` encodes as `null` and `null` decodes as `nil`;
    * atoms (keys or values) other than `nil`, `true` and `false` encode as
      strings;
    * encoding returns one binary, never iodata;
    * the non-bang functions never raise: every failure is `{:error, reason}`.
  """

  @typedoc "A failure: `{kind, detail}`, e.g. `{:invalid_json, 3}` (byte offset)."
  @type error :: {atom(), term()}

  @decode_opts [:return_maps, :use_nil, :dedupe_keys]
  @encode_opts [:use_nil]

  @doc """
  Encodes `term` as a JSON binary.

  Returns `{:error, {kind, detail}}` for terms JSON cannot express (tuples,
  pids, non-UTF-8 binaries, non-string map keys other than atoms).
  """
  @spec encode(term()) :: {:ok, binary()} | {:error, error()}
  def encode(term) do
    {:ok, IO.iodata_to_binary(:jiffy.encode(term, @encode_opts))}
  catch
    kind, reason -> {:error, normalize(kind, reason, :invalid_value)}
  end

  @doc """
  Encodes `term` as a JSON binary, raising `SoulMem.Error` (reason
  `:invalid_value`) when it cannot.
  """
  @spec encode!(term()) :: binary()
  def encode!(term) do
    case encode(term) do
      {:ok, json} -> json
      {:error, {kind, detail}} -> raise SoulMem.Error.new(:invalid_value, describe(kind, detail))
    end
  end

  @doc """
  Encodes `term` for a native call: like `encode/1`, but a term JSON cannot
  express fails with a `SoulMem.Error` of reason `:invalid_json`, as the
  native side reports malformed JSON.
  """
  @spec encode_arg(term()) :: {:ok, binary()} | {:error, SoulMem.Error.t()}
  def encode_arg(term) do
    case encode(term) do
      {:ok, json} ->
        {:ok, json}

      {:error, reason} ->
        {:error, SoulMem.Error.new(:invalid_json, "cannot encode: #{inspect(reason)}")}
    end
  end

  @doc """
  Writes `data` to `path` through a temporary file in the same directory,
  synced and then renamed over `path`, so `path` never holds a half-written
  file (a crash leaves the old one or the new one). `:mode` sets the file
  mode (e.g. `0o600` for secrets) before the rename. Creates the directory.
  """
  @spec write_file_atomic(Path.t(), iodata(), keyword()) :: :ok | {:error, File.posix()}
  def write_file_atomic(path, data, opts \\ []) do
    opts = Keyword.validate!(opts, mode: nil)
    tmp = "#{path}.tmp-#{System.unique_integer([:positive])}"

    with :ok <- File.mkdir_p(Path.dirname(path)),
         :ok <- File.write(tmp, data, [:sync]),
         :ok <- if(opts[:mode], do: File.chmod(tmp, opts[:mode]), else: :ok),
         :ok <- File.rename(tmp, path) do
      :ok
    else
      {:error, _} = error ->
        File.rm(tmp)
        error
    end
  end

  @doc """
  Decodes a JSON binary (or iodata).

  Returns `{:error, {reason, byte_offset}}` for malformed input, for example
  `{:error, {:invalid_json, 1}}`.
  """
  @spec decode(iodata()) :: {:ok, term()} | {:error, error()}
  def decode(json) do
    {:ok, :jiffy.decode(IO.iodata_to_binary(json), @decode_opts)}
  catch
    kind, reason -> {:error, normalize(kind, reason, :invalid_json)}
  end

  @doc """
  Decodes a JSON binary (or iodata), raising `SoulMem.Error` (reason
  `:invalid_json`) when it is malformed.
  """
  @spec decode!(iodata()) :: term()
  def decode!(json) do
    case decode(json) do
      {:ok, term} ->
        term

      {:error, {kind, offset}} when is_integer(offset) ->
        raise SoulMem.Error.new(:invalid_json, "#{kind} at byte #{offset}")

      {:error, {kind, detail}} ->
        raise SoulMem.Error.new(:invalid_json, describe(kind, detail))
    end
  end

  # jiffy's decode errors are {Position, Reason}; its encode errors are
  # {Reason, Term}. Anything else (badarg on non-iodata input, ...) becomes
  # {fallback, reason}.
  defp normalize(:error, {position, reason}, _fallback)
       when is_integer(position) and is_atom(reason),
       do: {reason, position}

  defp normalize(:error, {reason, detail}, _fallback) when is_atom(reason),
    do: {reason, detail}

  defp normalize(_kind, reason, fallback), do: {fallback, reason}

  defp describe(kind, detail), do: "#{kind}: #{inspect(detail, limit: 10)}"
end

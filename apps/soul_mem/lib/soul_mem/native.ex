defmodule SoulMem.Native do
  # NIF stubs for the Rust crate native/soul_mem_nif (rustler module name
  # `Elixir.SoulMem.Native`). This is the only module that declares NIFs;
  # everything else goes through the typed API in SoulMem.Memory.
  #
  # The NIF returns {:error, {kind, message}} with kind one of :invalid_json,
  # :duplicate_id, :missing_link_target, :invalid_value, :invalid_timestamp,
  # :too_large, :not_utf8, :io, :not_found.
  @moduledoc false

  @on_load :load_nif

  @doc false
  def load_nif do
    path = Path.join(:code.priv_dir(:soul_mem), "native/libsoul_mem_nif")
    :erlang.load_nif(String.to_charlist(path), 0)
  end

  # DirtyCpu
  def graph_import_json(_character, _json, _complete, _max_bytes),
    do: :erlang.nif_error(:nif_not_loaded)

  # DirtyIo
  def graph_import_file(_character, _path, _complete, _max_bytes),
    do: :erlang.nif_error(:nif_not_loaded)

  def graph_new(_character), do: :erlang.nif_error(:nif_not_loaded)

  def graph_stats(_graph), do: :erlang.nif_error(:nif_not_loaded)

  def graph_get_note(_graph, _id), do: :erlang.nif_error(:nif_not_loaded)

  # DirtyCpu
  def graph_export_json(_graph), do: :erlang.nif_error(:nif_not_loaded)

  def debug_panic(_message), do: :erlang.nif_error(:nif_not_loaded)

  def live_graph_handles, do: :erlang.nif_error(:nif_not_loaded)

  # DirtyCpu: load the embedding model process-wide ("" = discover / no cache)
  def embedder_load(_model_path, _cache_path), do: :erlang.nif_error(:nif_not_loaded)
  def embedder_info, do: :erlang.nif_error(:nif_not_loaded)
  # DirtyCpu: {:ok, {dim, [f32 LE binary]}}
  def embed_texts(_texts, _kind), do: :erlang.nif_error(:nif_not_loaded)
  # DirtyCpu: sends {:soul_mem_embed_progress, done, total} to the pid
  def graph_embed(_graph, _embedder, _progress_pid), do: :erlang.nif_error(:nif_not_loaded)
  # DirtyCpu: JSON in (queries, config, short), JSON out
  def engine_recall(_graph, _queries, _config, _short), do: :erlang.nif_error(:nif_not_loaded)
  def engine_record(_graph, _ids, _at_ms), do: :erlang.nif_error(:nif_not_loaded)
  # DirtyCpu (jieba)
  def text_queries(_text, _max_keywords), do: :erlang.nif_error(:nif_not_loaded)
  def text_tokens(_text), do: :erlang.nif_error(:nif_not_loaded)
end

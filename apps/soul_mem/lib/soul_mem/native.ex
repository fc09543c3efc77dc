defmodule SoulMem.Native do
  # NIF stubs for the Rust crate native/soul_mem_nif (rustler module name
  # `Elixir.SoulMem.Native`). This is the only module that declares NIFs;
  # everything else goes through the typed API in SoulMem.Memory.
  #
  # The NIF returns {:error, {kind, message}} with kind one of :invalid_json,
  # :duplicate_id, :missing_link_target, :invalid_value, :invalid_timestamp,
  # :too_large, :not_utf8, :io, :not_found, :invalid_card, :limit_exceeded.
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
  # DirtyCpu, typed: %{notes: [...], links: [...]}
  def graph_neighbourhood(_graph, _ids, _hops, _max_notes), do: :erlang.nif_error(:nif_not_loaded)

  def debug_panic(_message), do: :erlang.nif_error(:nif_not_loaded)

  # Character cards (SoulMem.Card), DirtyCpu. opts: %{name: String.t() | nil};
  # {:ok, %{graph: graph_json, report: %{format, name, notes, links, lore_entries,
  # skipped_disabled, skipped_empty, core_notes}}}
  def card_import(_bytes, _opts), do: :erlang.nif_error(:nif_not_loaded)
  # DirtyCpu: {:ok, map with string keys}
  def graph_export_world_info(_graph), do: :erlang.nif_error(:nif_not_loaded)
  def graph_export_card(_graph), do: :erlang.nif_error(:nif_not_loaded)

  def live_graph_handles, do: :erlang.nif_error(:nif_not_loaded)

  # MessagePack (SoulMem.MsgPack): normal scheduler, and DirtyCpu for large frames/terms.
  # limits: %{max_depth, max_elements}; {:ok, term} | {:error, {kind, message}}
  def msgpack_decode(_bytes, _limits), do: :erlang.nif_error(:nif_not_loaded)
  def msgpack_decode_dirty(_bytes, _limits), do: :erlang.nif_error(:nif_not_loaded)
  # {:ok, binary} | {:error, {:invalid_argument, message}}
  def msgpack_encode(_term), do: :erlang.nif_error(:nif_not_loaded)
  def msgpack_encode_dirty(_term), do: :erlang.nif_error(:nif_not_loaded)

  # DirtyCpu: load the embedding model process-wide ("" = discover / no cache)
  def embedder_load(_model_path, _cache_path, _similarity_floor),
    do: :erlang.nif_error(:nif_not_loaded)

  def embedder_info, do: :erlang.nif_error(:nif_not_loaded)
  # DirtyCpu: {:ok, {dim, [f32 LE binary]}}
  def embed_texts(_texts, _kind), do: :erlang.nif_error(:nif_not_loaded)
  # DirtyCpu: sends {:soul_mem_embed_progress, done, total} to the pid
  def graph_embed(_graph, _embedder, _progress_pid), do: :erlang.nif_error(:nif_not_loaded)
  # DirtyIo: the model runs on the bulk pool; no engine lock is held while it does
  def graph_prefill(_graph, _chunk, _progress_pid), do: :erlang.nif_error(:nif_not_loaded)
  # DirtyCpu, typed maps in and out (SoulMem.Retrieval): one call per recall, text to items
  def engine_recall(_graph, _request), do: :erlang.nif_error(:nif_not_loaded)
  def engine_configure(_graph, _configuration), do: :erlang.nif_error(:nif_not_loaded)
  def engine_core(_graph), do: :erlang.nif_error(:nif_not_loaded)
  def engine_record(_graph, _ids, _at_ms), do: :erlang.nif_error(:nif_not_loaded)
  # DirtyCpu (jieba)
  def text_queries(_text, _max_keywords), do: :erlang.nif_error(:nif_not_loaded)
  def text_tokens(_text), do: :erlang.nif_error(:nif_not_loaded)

  # Store (DirtyIo unless noted): one SQLite file per character
  def store_open(_data_dir, _character, _max_pages), do: :erlang.nif_error(:nif_not_loaded)
  # normal: no I/O
  def store_path(_data_dir, _character), do: :erlang.nif_error(:nif_not_loaded)
  def store_close(_store), do: :erlang.nif_error(:nif_not_loaded)
  def store_remove_saved_index(_path), do: :erlang.nif_error(:nif_not_loaded)
  def store_peek(_path), do: :erlang.nif_error(:nif_not_loaded)
  # {:ok, {graph | nil, state_json}}
  def store_load(_store, _load_graph), do: :erlang.nif_error(:nif_not_loaded)
  def store_checkpoint(_store, _graph, _extra_json), do: :erlang.nif_error(:nif_not_loaded)

  # [{role, text, at_ms, tagged}] -> {:ok, [seq]}
  def store_append_messages(_store, _messages), do: :erlang.nif_error(:nif_not_loaded)

  def store_retract_messages(_store, _from_seq), do: :erlang.nif_error(:nif_not_loaded)
  def store_window_update(_store, _summary, _pop_to), do: :erlang.nif_error(:nif_not_loaded)

  def store_append_feedback(_store, _graph, _note_id, _value, _at_ms),
    do: :erlang.nif_error(:nif_not_loaded)

  def store_append_records(_store, _graph, _ids, _at_ms), do: :erlang.nif_error(:nif_not_loaded)
  def store_export(_store), do: :erlang.nif_error(:nif_not_loaded)
  def store_import(_store, _json), do: :erlang.nif_error(:nif_not_loaded)
  def store_info(_store), do: :erlang.nif_error(:nif_not_loaded)
  # Replication (DirtyIo): change capture, snapshots, replica files.
  def store_set_capture(_store, _on), do: :erlang.nif_error(:nif_not_loaded)
  def store_take_changes(_store), do: :erlang.nif_error(:nif_not_loaded)
  def store_snapshot(_store, _dest), do: :erlang.nif_error(:nif_not_loaded)
  def store_epoch(_store), do: :erlang.nif_error(:nif_not_loaded)
  def replica_init(_path, _base), do: :erlang.nif_error(:nif_not_loaded)
  def replica_apply(_path, _base, _seq, _changes), do: :erlang.nif_error(:nif_not_loaded)
  def replica_state(_path), do: :erlang.nif_error(:nif_not_loaded)
  def replica_promote(_path), do: :erlang.nif_error(:nif_not_loaded)
  # DirtyIo: store may be nil (graph only)
  def note_put(_graph, _store, _note_json), do: :erlang.nif_error(:nif_not_loaded)

  # Forgetting (SoulMem.Forgetting), DirtyCpu. config: a ForgetConfig map, nil = the
  # character's. Results are maps with string keys.
  # [note view]
  def forget_view(_graph, _ids, _now_ms, _config), do: :erlang.nif_error(:nif_not_loaded)
  # the stored revision
  def forget_store_revision(_graph, _id, _answer, _now_ms, _config),
    do: :erlang.nif_error(:nif_not_loaded)

  # the sweep report
  def forget_sweep(_graph, _now_ms, _config), do: :erlang.nif_error(:nif_not_loaded)
  def forget_state(_graph, _id), do: :erlang.nif_error(:nif_not_loaded)
  # typed views (atom keys), as in a recall's items
  def forget_recall_views(_graph, _ids, _now_ms), do: :erlang.nif_error(:nif_not_loaded)
  def forget_states(_graph), do: :erlang.nif_error(:nif_not_loaded)
  # DirtyCpu (jieba): {:ok, {masked_text, masked, total}}
  def forget_mask_text(_text, _missing_degree), do: :erlang.nif_error(:nif_not_loaded)

  # Consolidation (SoulMem.Consolidation). DirtyCpu, JSON in / JSON out.
  def engine_consolidate(_graph, _changes_json, _config),
    do: :erlang.nif_error(:nif_not_loaded)

  def engine_consolidate_candidates(_graph, _records_json, _config),
    do: :erlang.nif_error(:nif_not_loaded)

  def graph_duplicate_semantics(_graph), do: :erlang.nif_error(:nif_not_loaded)
  # Normal scheduler, no lock: the effective ConsolidateConfig as a string-keyed map
  def consolidate_config(_overrides), do: :erlang.nif_error(:nif_not_loaded)

  # Working memory (activation mode). DirtyCpu unless noted; JSON in / JSON out.
  # {:ok, {working, index_report_json}}; sends {:soul_mem_embed_progress, done, total}
  def working_open(_store, _graph, _cfg_json, _progress_pid),
    do: :erlang.nif_error(:nif_not_loaded)

  # Normal scheduler (decoding only): {:ok, :ok} | {:error, reason}
  def working_check(_cfg), do: :erlang.nif_error(:nif_not_loaded)

  # {:ok, report_json}
  def working_activate(_working, _request), do: :erlang.nif_error(:nif_not_loaded)

  # Typed: the request and outcome of engine_recall; {:ok, {outcome, report}}
  def working_recall(_working, _request), do: :erlang.nif_error(:nif_not_loaded)

  # DirtyIo: {:ok, report_json}; releases what the last recall left over the cap
  def working_settle(_working), do: :erlang.nif_error(:nif_not_loaded)

  # DirtyIo: {:ok, report_json}
  def working_checkpoint(_working, _extra_json), do: :erlang.nif_error(:nif_not_loaded)
  # {:ok, info_json}
  def working_info(_working), do: :erlang.nif_error(:nif_not_loaded)

  # Note listing and deletion (issue 18).
  # DirtyCpu, typed request %{query, kind, page, per_page} (nil = default); the listing as a
  # string-keyed map
  def graph_list_notes(_graph, _request), do: :erlang.nif_error(:nif_not_loaded)
  # DirtyIo: the same over the store's active notes (working-memory mode)
  def store_list_notes(_store, _request), do: :erlang.nif_error(:nif_not_loaded)
  # DirtyIo: graph or working handle, store or nil; {:ok, %{id, links_removed}}
  def note_delete(_handle, _store, _id), do: :erlang.nif_error(:nif_not_loaded)
end

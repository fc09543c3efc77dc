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
end

defmodule SoulMemWeb.ErrorTest do
  use ExUnit.Case, async: true

  alias SoulMemWeb.Error

  # Every kind the Rust core and the NIF layer name (read from their sources,
  # so a new kind without a status fails here) and every atom the runtime
  # returns to the endpoint.
  @core_error Path.expand("../../../../native/soul_mem_core/src/error.rs", __DIR__)
  @nif_error Path.expand("../../../../native/soul_mem_nif/src/error.rs", __DIR__)
  @runtime ~w(not_running timeout loading backlog_full exists running busy not_persisted
              invalid_message invalid_role empty_text not_utf8 too_large invalid_at
              invalid_request invalid_messages invalid_queries invalid_text invalid_feedback
              invalid_note_id invalid_document not_found unsupported)a

  defp native_kinds do
    for file <- [@core_error, @nif_error],
        [_, kind] <- Regex.scan(~r/=> "([a-z_]+)"/, File.read!(file)),
        uniq: true,
        do: String.to_atom(kind)
  end

  test "every reason the runtime can return has its own status and code" do
    kinds = native_kinds()
    assert :disk_full in kinds and :poisoned in kinds

    for reason <- kinds do
      error = Error.from(%SoulMem.Error{reason: reason, message: "at /srv/data/x.db"})
      assert error.code == Atom.to_string(reason), "#{reason} became #{error.code}"
      assert error.status in 400..599
    end

    for reason <- @runtime do
      assert Error.from(reason).code == Atom.to_string(reason), "#{reason}"
    end
  end

  test "store errors keep their paths out; waiting errors say how long" do
    for {reason, status} <- [disk_full: 507, in_use: 409, corrupt: 500, incompatible: 500] do
      error = Error.from(%SoulMem.Error{reason: reason, message: "store /srv/data/x.db is bad"})
      assert error.status == status
      refute error.message =~ "/srv"
    end

    assert %Error{status: 503, retry_after: 5} = Error.from(:loading)
    assert %Error{status: 503, retry_after: 5} = Error.from(:moving)
    assert %Error{status: 429, retry_after: 30} = Error.from(:backlog_full)
    assert %{"error" => %{"retry_after" => 30}} = Error.body(Error.from(:backlog_full))
  end
end

defmodule SoulMemWeb.ProtocolTest do
  use ExUnit.Case, async: true

  alias SoulMemWeb.{Error, Protocol}
  alias SoulMemWeb.Protocol.Message

  describe "decode/1" do
    test "reads a V2 frame" do
      assert {:ok,
              %Message{
                join_ref: "1",
                ref: "2",
                topic: "character:demo",
                event: "phx_join",
                payload: %{}
              }} = Protocol.decode(~s(["1","2","character:demo","phx_join",{}]))
    end

    test "null refs (heartbeat, pushes) are allowed" do
      assert {:ok, %Message{join_ref: nil, ref: "7", topic: "phoenix", event: "heartbeat"}} =
               Protocol.decode(~s([null,"7","phoenix","heartbeat",{}]))
    end

    test "malformed JSON and wrong shapes are errors without refs" do
      assert {:error, %Error{code: "invalid_json"}, nil} = Protocol.decode("[\"1\",")
      assert {:error, %Error{code: "invalid_payload"}, nil} = Protocol.decode(~s({"topic":"x"}))

      assert {:error, %Error{code: "invalid_payload"}, nil} =
               Protocol.decode(~s(["1","2","t","e"]))

      assert {:error, %Error{code: "invalid_payload"}, nil} =
               Protocol.decode(~s([1,"2","t","e",{}]))
    end

    test "a bad topic, event or payload keeps the refs for an error reply" do
      assert {:error, %Error{code: "invalid_payload"}, {"1", "2", "character:demo"}} =
               Protocol.decode(~s(["1","2","character:demo","message","text"]))

      assert {:error, %Error{code: "invalid_payload"}, {"1", "2", "character:demo"}} =
               Protocol.decode(~s(["1","2","character:demo","",{}]))

      assert {:error, %Error{code: "invalid_payload"}, {"1", "2", nil}} =
               Protocol.decode(~s(["1","2",5,"message",{}]))
    end

    test "over-long refs are not echoed back" do
      long = String.duplicate("r", 300)

      assert {:error, %Error{}, nil} =
               Protocol.decode(SoulMem.JSON.encode!([long, "2", "t", "e", %{}]))
    end
  end

  describe "encoding" do
    test "reply, push, close and error frames" do
      assert SoulMem.JSON.decode!(
               Protocol.reply("1", "2", "character:demo", :ok, %{"ok" => true})
             ) ==
               [
                 "1",
                 "2",
                 "character:demo",
                 "phx_reply",
                 %{"status" => "ok", "response" => %{"ok" => true}}
               ]

      assert SoulMem.JSON.decode!(
               Protocol.push("1", "character:demo", "summary_updated", %{"summary" => "s"})
             ) ==
               ["1", nil, "character:demo", "summary_updated", %{"summary" => "s"}]

      assert SoulMem.JSON.decode!(Protocol.close("3", "character:demo")) ==
               ["3", "3", "character:demo", "phx_close", %{}]

      assert SoulMem.JSON.decode!(Protocol.error("3", "character:demo")) ==
               ["3", "3", "character:demo", "phx_error", %{}]
    end

    test "an error response carries the Phoenix reason and the error object" do
      assert Protocol.error_response(Error.new(:forbidden)) == %{
               "reason" => "forbidden",
               "error" => %{
                 "code" => "forbidden",
                 "message" => "the token does not open this character"
               }
             }
    end
  end

  describe "SoulMemWeb.Error.from/1" do
    test "maps runtime errors to codes and statuses" do
      assert %Error{code: "not_found", status: 404} =
               Error.from(SoulMem.Error.new(:not_found, "no note x"))

      assert %Error{code: "busy", status: 409} = Error.from(:busy)
      assert %Error{code: "unsupported", status: 501} = Error.from(:not_supported)
      assert %Error{code: "timeout", status: 504} = Error.from(:timeout)

      assert %Error{code: "character_unavailable", status: 503} =
               Error.from({:graph_not_found, "/x"})
    end

    test "unknown terms become a generic internal error" do
      ExUnit.CaptureLog.capture_log(fn ->
        assert %Error{code: "internal", status: 500, message: "internal error"} =
                 Error.from({:weird, make_ref()})
      end)
    end
  end
end

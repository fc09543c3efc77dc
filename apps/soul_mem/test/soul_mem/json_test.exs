defmodule SoulMem.JSONTest do
  use ExUnit.Case, async: true

  alias SoulMem.JSON

  describe "decode/1" do
    test "objects become maps with string keys, null becomes nil" do
      assert JSON.decode(~s({"a": null, "b": [1, 2.5, true, "x"], "c": {"d": {}}})) ==
               {:ok, %{"a" => nil, "b" => [1, 2.5, true, "x"], "c" => %{"d" => %{}}}}
    end

    test "accepts iodata" do
      assert JSON.decode(["[1,", ~c"2", "]"]) == {:ok, [1, 2]}
    end

    test "keeps UTF-8 text" do
      assert JSON.decode(~s(["小红", "\\u5c0f"])) == {:ok, ["小红", "小"]}
    end

    test "malformed input is an error with the byte offset, never a raise" do
      assert {:error, {:invalid_json, offset}} = JSON.decode("{bad")
      assert is_integer(offset)
      assert {:error, {:truncated_json, _}} = JSON.decode("")
      assert {:error, {:invalid_trailing_data, _}} = JSON.decode("[1] x")
      assert {:error, {_, _}} = JSON.decode(<<"\"", 255, "\"">>)
      assert {:error, {:invalid_json, _}} = JSON.decode(:not_iodata)
    end

    test "duplicate keys keep one value" do
      assert {:ok, %{"a" => _}} = JSON.decode(~s({"a": 1, "a": 2}))
    end
  end

  describe "encode/1" do
    test "nil is null, atoms are strings, the result is one binary" do
      assert {:ok, json} = JSON.encode(%{a: nil, b: [:x, true, false, 1, 2.5]})
      assert is_binary(json)
      assert JSON.decode!(json) == %{"a" => nil, "b" => ["x", true, false, 1, 2.5]}
    end

    test "large outputs are still one binary (jiffy may return iodata)" do
      long = String.duplicate("a", 200_000)
      assert {:ok, json} = JSON.encode([long, long])
      assert is_binary(json)
      assert byte_size(json) > 400_000
    end

    test "round-trips UTF-8" do
      term = %{"名字" => "小红", "list" => [%{"k" => "v"}]}
      assert term |> JSON.encode!() |> JSON.decode!() == term
    end

    test "terms JSON cannot express are errors, never a raise" do
      assert {:error, {:invalid_ejson, _}} = JSON.encode({:ok, 1})
      assert {:error, {:invalid_ejson, _}} = JSON.encode(self())
      assert {:error, {:invalid_string, _}} = JSON.encode(<<255>>)
      assert {:error, {:invalid_object_member_key, _}} = JSON.encode(%{1 => 2})
    end
  end

  describe "bang variants" do
    test "decode!/1 raises SoulMem.Error with reason :invalid_json" do
      assert_raise SoulMem.Error, ~r/invalid_json/, fn -> JSON.decode!("{bad") end
    end

    test "encode!/1 raises SoulMem.Error with reason :invalid_value" do
      error = assert_raise SoulMem.Error, fn -> JSON.encode!({:tuple}) end
      assert error.reason == :invalid_value
    end
  end
end

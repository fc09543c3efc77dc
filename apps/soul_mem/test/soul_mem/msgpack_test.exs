defmodule SoulMem.MsgPackTest do
  use ExUnit.Case, async: true

  import Bitwise

  alias SoulMem.{Error, MsgPack}

  describe "the wire format" do
    # Byte strings from the MessagePack specification's formats.
    test "encodes each type in its shortest MessagePack form" do
      cases = [
        {nil, <<0xC0>>},
        {true, <<0xC3>>},
        {false, <<0xC2>>},
        {1, <<0x01>>},
        {-1, <<0xFF>>},
        {300, <<0xCD, 300::16>>},
        {-200, <<0xD1, -200::signed-16>>},
        {18_446_744_073_709_551_615, <<0xCF, 0xFFFFFFFFFFFFFFFF::64>>},
        {-9_223_372_036_854_775_808, <<0xD3, -9_223_372_036_854_775_808::signed-64>>},
        {1.5, <<0xCB, 1.5::float-64>>},
        {"é", <<0xA2, "é">>},
        {:ok, <<0xA2, "ok">>},
        {{:bin, <<1, 2>>}, <<0xC4, 2, 1, 2>>},
        {[1, "a"], <<0x92, 0x01, 0xA1, "a">>},
        {%{"a" => 1}, <<0x81, 0xA1, "a", 0x01>>},
        {%{b: nil}, <<0x81, 0xA1, "b", 0xC0>>}
      ]

      for {term, bytes} <- cases do
        assert MsgPack.encode(term) == {:ok, bytes}, inspect(term)
      end
    end

    test "decodes what other encoders may choose: wide forms, float32" do
      assert MsgPack.decode(<<0xCC, 7>>) == {:ok, 7}
      assert MsgPack.decode(<<0xD9, 2, "hi">>) == {:ok, "hi"}
      assert MsgPack.decode(<<0xDC, 2::16, 0xC3, 0xC2>>) == {:ok, [true, false]}
      assert MsgPack.decode(<<0xDE, 1::16, 0xA1, "k", 0xC0>>) == {:ok, %{"k" => nil}}
      assert MsgPack.decode(<<0xCA, 0.5::float-32>>) == {:ok, 0.5}
    end
  end

  describe "round trips" do
    test "random terms decode to what was encoded" do
      :rand.seed(:exsss, {19, 5, 2026})

      for _ <- 1..500 do
        term = random_value(4)
        assert {:ok, bytes} = MsgPack.encode(term)
        assert MsgPack.decode(bytes) == {:ok, term}
      end
    end

    test "atoms come back as strings" do
      assert {:ok, bytes} = MsgPack.encode(%{role: :user, tags: [:a]})
      assert MsgPack.decode(bytes) == {:ok, %{"role" => "user", "tags" => ["a"]}}
    end

    test "terms larger than the normal scheduler's share are encoded and decoded whole" do
      big = %{"notes" => for(i <- 1..10_000, do: %{"id" => "n#{i}", "text" => "记忆 #{i}"})}
      assert {:ok, bytes} = MsgPack.encode(big)
      assert byte_size(bytes) > 16 * 1024
      assert MsgPack.decode(bytes) == {:ok, big}
    end
  end

  describe "refused input" do
    test "ext types, non-string keys, duplicate keys, trailing bytes, truncation" do
      refused = [
        <<0xD4, 1, 0>>,
        <<0x81, 0x01, 0xC0>>,
        <<0x81, 0xC4, 1, "k", 0xC0>>,
        <<0x82, 0xA1, "k", 0x01, 0xA1, "k", 0x02>>,
        <<0x01, 0x02>>,
        <<0x92, 0x01>>,
        <<0xDD, 0xFFFFFFFF::32>>,
        <<0xCB, 0x7FF8000000000000::64>>,
        <<>>
      ]

      for bytes <- refused do
        assert {:error, %Error{reason: :invalid_msgpack}} = MsgPack.decode(bytes),
               inspect(bytes)
      end
    end

    # rmpv reads the reserved marker as nil rather than refusing it; pinned here so a change
    # of that behaviour is noticed (the moduledoc says so).
    test "the reserved marker 0xC1 reads as nil" do
      assert MsgPack.decode(<<0xC1>>) == {:ok, nil}
    end

    test "a string that is not UTF-8" do
      assert {:error, %Error{reason: :not_utf8}} = MsgPack.decode(<<0xA2, 0xFF, 0xFE>>)
    end

    test "depth and element limits" do
      nested = fn n -> Enum.reduce(1..n, nil, fn _, acc -> [acc] end) end
      assert {:ok, _} = nested.(64) |> MsgPack.encode!() |> MsgPack.decode()

      deep = :binary.copy(<<0x91>>, 65) <> <<0xC0>>
      assert {:error, %Error{reason: :limit_exceeded}} = MsgPack.decode(deep)

      list = MsgPack.encode!(Enum.to_list(1..10))
      assert {:ok, _} = MsgPack.decode(list, max_elements: 11)

      assert {:error, %Error{reason: :limit_exceeded, message: message}} =
               MsgPack.decode(list, max_elements: 10)

      assert message =~ "10"

      # [[1]] is two containers deep
      two_deep = MsgPack.encode!([[1]])
      assert {:ok, [[1]]} = MsgPack.decode(two_deep, max_depth: 2)
      assert {:error, %Error{reason: :limit_exceeded}} = MsgPack.decode(two_deep, max_depth: 1)
    end

    test "terms that have no MessagePack form name the value's path" do
      for {term, path} <- [
            {%{"a" => [1, self()]}, ".a[1]"},
            {%{{1, 2} => 1}, "the term"},
            {%{"x" => {1, 2}}, ".x"},
            {[<<0xFF>>], "[0]"},
            {2 ** 64, "the term"},
            {[1 | 2], "the term"},
            {<<1::3>>, "the term"}
          ] do
        assert {:error, %Error{reason: :invalid_argument, message: message}} =
                 MsgPack.encode(term)

        assert String.starts_with?(message, path), "#{inspect(term)}: #{message}"
      end

      too_deep = Enum.reduce(1..65, nil, fn _, acc -> [acc] end)
      assert {:error, %Error{reason: :invalid_argument}} = MsgPack.encode(too_deep)
      assert_raise Error, fn -> MsgPack.encode!(make_ref()) end
    end

    test "wrong argument types raise ArgumentError" do
      assert_raise ArgumentError, fn -> MsgPack.decode(:not_a_binary) end
      assert_raise ArgumentError, fn -> MsgPack.decode(<<0xC0>>, max_depth: 65) end
      assert_raise ArgumentError, fn -> MsgPack.decode(<<0xC0>>, max_elements: 0) end
      assert_raise ArgumentError, fn -> SoulMem.Native.msgpack_decode(<<0xC0>>, %{}) end

      assert_raise ArgumentError, fn ->
        SoulMem.Native.msgpack_decode([1], %{max_depth: 1, max_elements: 1})
      end
    end
  end

  defp random_value(0), do: random_scalar()

  defp random_value(depth) do
    case :rand.uniform(4) do
      1 -> for _ <- 1..:rand.uniform(5), do: random_value(depth - 1)
      2 -> Map.new(1..:rand.uniform(5), fn _ -> {random_string(), random_value(depth - 1)} end)
      _ -> random_scalar()
    end
  end

  defp random_scalar do
    case :rand.uniform(8) do
      1 -> nil
      2 -> :rand.uniform(2) == 1
      3 -> :rand.uniform(1 <<< 62) - (1 <<< 61)
      4 -> :rand.uniform(1 <<< 63) + (1 <<< 63) - 1
      5 -> :rand.normal() * 1.0e6
      6 -> {:bin, :crypto.strong_rand_bytes(:rand.uniform(16) - 1)}
      _ -> random_string()
    end
  end

  defp random_string do
    Enum.map_join(1..:rand.uniform(8), fn _ -> Enum.random(["a", "Z", "記", "憶", "😀", " ", ""]) end)
  end
end

Code.require_file("../../soul_mem/test/support/test_support.ex", __DIR__)

ExUnit.start()

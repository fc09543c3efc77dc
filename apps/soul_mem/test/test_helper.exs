Code.require_file("support/test_support.ex", __DIR__)

ExUnit.start()

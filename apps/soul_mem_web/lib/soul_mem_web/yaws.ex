defmodule SoulMemWeb.Yaws do
  @moduledoc """
  The records of yaws' API (`yaws_api.hrl`) that the endpoint reads:
  `arg`, `http_request` and `headers`.
  """

  require Record

  @hrl "yaws/include/yaws_api.hrl"

  Record.defrecord(:arg, Record.extract(:arg, from_lib: @hrl))
  Record.defrecord(:http_request, Record.extract(:http_request, from_lib: @hrl))
  Record.defrecord(:headers, Record.extract(:headers, from_lib: @hrl))
end

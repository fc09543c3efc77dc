# Compile-time configuration shared by every app of the umbrella.
#
# Runtime settings (ports, data directory, LLM endpoint, tokens) are read from
# environment variables in config/runtime.exs, never here.
import Config

config :logger, :console, format: "$time $metadata[$level] $message\n"

import_config "#{config_env()}.exs"

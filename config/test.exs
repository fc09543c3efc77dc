import Config

config :logger, level: :warning

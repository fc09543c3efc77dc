import Config

config :logger, level: :info

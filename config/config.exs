# Compile-time configuration shared by every app of the umbrella.
#
# Runtime settings (ports, data directory, LLM endpoint, tokens) are read from
# environment variables in config/runtime.exs, never here.
import Config

config :logger, :console, format: "$time $metadata[$level] $message\n"

# LLM client defaults (SoulMem.LLM); the endpoint, key and model come from
# runtime.exs. Maintenance implementations run by Idle characters
# (SoulMem.Maintenance).
config :soul_mem,
  llm_temperature: 0.7,
  llm_max_tokens: 512,
  llm_connect_timeout_ms: 5_000,
  llm_timeout_ms: 60_000,
  llm_retries: 3,
  llm_backoff_ms: 500,
  llm_max_backoff_ms: 8_000,
  maintenance: [
    SoulMem.Maintenance.SummarizePending,
    SoulMem.Maintenance.Consolidate,
    SoulMem.Maintenance.ForgetSweep
  ],
  maintenance_interval_ms: 600_000,
  # A failed summary job is retried by the character itself (also while it
  # stays Working), with exponential backoff and jitter from
  # summary_retry_ms, capped at summary_max_retry_ms.
  summary_retry_ms: 5_000,
  summary_max_retry_ms: 300_000,
  # How a character embeds its graph after loading: :auto (the model, else
  # the lexical :hash embedder), :model, :hash or :none.
  embedder: :auto

import_config "#{config_env()}.exs"

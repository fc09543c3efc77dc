import Config

config :logger, level: :warning

# Fast LLM retries in tests (failure-injection tests script 500s and timeouts).
config :soul_mem, llm_backoff_ms: 5, llm_max_backoff_ms: 20, llm_retries: 1, llm_timeout_ms: 2_000

# Characters embed their graph with the lexical hash embedder in tests (no
# model needed; tests of the real model choose it explicitly).
config :soul_mem, embedder: :hash

# Characters keep no store unless a test asks for one (with its own data_dir).
config :soul_mem, persist: false

# Only summary retries run at Idle unless a test chooses its maintenance
# (consolidation and forgetting have their own tests with scripted LLMs).
config :soul_mem, maintenance: [SoulMem.Maintenance.SummarizePending]

# Summary retries of the character itself wait a minute in tests, so that
# failure-injection tests see the maintenance retry alone; tests of the
# backoff retry pass small :summary_retry / :summary_max_retry values.
config :soul_mem, summary_retry_ms: 60_000, summary_max_retry_ms: 60_000

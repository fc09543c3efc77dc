#!/usr/bin/env bash
# End-to-end WebSocket recall benchmark (bench/ws_recall.js) against a server of
# this checkout started just for it:
#   * `mix soul.server` (dev env; compiles first — cargo runs only when a Rust
#     source changed, see Mix.Tasks.Compile.SoulMemNif) on a free loopback port;
#   * a fresh, temporary data dir (SOUL_MEM_DATA_DIR): the demo character 小红 is
#     seeded from fixtures/characters/demo.json and the embedding cache is empty,
#     so every run embeds its (distinct) query texts with the model;
#   * no LLM: SOUL_MEM_LLM_BASE_URL / _API_KEY / _MODEL are unset (the default demo
#     setup), so forgetting's revision call fails at once with :not_configured and
#     the masked text is shown (and with fresh notes no revision is due anyway);
#   * the demo token SOUL_MEM_DEMO_TOKEN (default dev-token) is passed to the client.
# Waits for /health, runs the node script, stops the server (SIGTERM to its
# process group) and removes the data dir. The server log is kept on failure.
#
# SOUL_BENCH_RESTART=1 measures the character as it runs from its second start on:
# the first server seeds it and embeds its graph (one recall waits for that), stops
# (SIGTERM: the character checkpoints), and a second server on the same data dir is
# measured. A character seeded from a graph above :working_memory_threshold notes
# runs in full mode in the session that imports it and in working memory after that.
#
# Usage: bash bench/ws_recall.sh [ws_recall.js options, e.g. --n 300 --json]
# Environment: PORT (default: a free port), SOUL_MEM_DEMO_TOKEN, SOUL_BENCH_KEEP_LOG=1,
# SOUL_BENCH_START_TIMEOUT (s, default 900: a cargo rebuild takes ~9 min on 2 cores),
# SOUL_BENCH_RESTART=1, SOUL_BENCH_DATA_DIR=DIR (this data dir, kept afterwards: a later
# run measures the character stored there again; pass --salt so its texts are new).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

PORT="${PORT:-$(node -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')}"
TOKEN="${SOUL_MEM_DEMO_TOKEN:-dev-token}"
START_TIMEOUT="${SOUL_BENCH_START_TIMEOUT:-900}"
if [ -n "${SOUL_BENCH_DATA_DIR:-}" ]; then
  DATA_DIR="$SOUL_BENCH_DATA_DIR"
  mkdir -p "$DATA_DIR"
else
  DATA_DIR="$(mktemp -d /tmp/soul_ws_recall.data.XXXXXX)"
fi
LOG="$(mktemp /tmp/soul_ws_recall.server.XXXXXX.log)"
SERVER=""
STATUS=1

stop_server() {
  if [ -n "$SERVER" ] && kill -0 "$SERVER" 2>/dev/null; then
    kill -TERM -- "-$SERVER" 2>/dev/null || true
    for _ in $(seq 1 60); do kill -0 "$SERVER" 2>/dev/null || break; sleep 0.5; done
    kill -KILL -- "-$SERVER" 2>/dev/null || true
  fi
  SERVER=""
}

cleanup() {
  stop_server
  [ -n "${SOUL_BENCH_DATA_DIR:-}" ] || rm -rf "$DATA_DIR"
  if [ "$STATUS" -eq 0 ] && [ "${SOUL_BENCH_KEEP_LOG:-0}" != 1 ]; then
    rm -f "$LOG"
  else
    echo "ws_recall.sh: server log: $LOG" >&2
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "ws_recall.sh: $(git -C "$ROOT" log --oneline -1 2>/dev/null | cut -c1-72)"
echo "ws_recall.sh: uptime at start:$(uptime | sed 's/.*load average/ load average/')"

# The server runs with the VM flags scripts/run.sh gives it.
# shellcheck source=scripts/vm_flags.sh
source "$ROOT/scripts/vm_flags.sh"

# setsid: the server (mix → beam) gets its own process group, stopped as a whole.
start_server() {
  env -u SOUL_MEM_LLM_BASE_URL -u SOUL_MEM_LLM_API_KEY -u SOUL_MEM_LLM_MODEL \
    PORT="$PORT" SOUL_MEM_DATA_DIR="$DATA_DIR" SOUL_MEM_DEMO_TOKEN="$TOKEN" MIX_ENV="${MIX_ENV:-dev}" \
    setsid mix soul.server >>"$LOG" 2>&1 </dev/null &
  SERVER=$!

  local deadline=$((SECONDS + START_TIMEOUT))
  until curl -fsS -o /dev/null "http://127.0.0.1:$PORT/health" 2>/dev/null; do
    if ! kill -0 "$SERVER" 2>/dev/null; then
      echo "ws_recall.sh: the server exited before answering /health:" >&2
      tail -40 "$LOG" >&2
      exit 1
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "ws_recall.sh: no /health on port $PORT after ${START_TIMEOUT}s" >&2
      tail -40 "$LOG" >&2
      exit 1
    fi
    sleep 1
  done
  echo "ws_recall.sh: server up on port $PORT (data dir $DATA_DIR)"
}

start_server
if [ "${SOUL_BENCH_RESTART:-0}" = 1 ]; then
  # One recall (its texts salted apart from the measured ones) waits until the seeded
  # graph is embedded; then the server stops and a new one serves the stored character.
  node "$ROOT/bench/ws_recall.js" --port "$PORT" --token "$TOKEN" "$@" --n 1 --warmup 0 \
    --salt "(seeding)" >&2
  stop_server
  echo "ws_recall.sh: restarting on the stored character"
  start_server
fi

set +e
node "$ROOT/bench/ws_recall.js" --port "$PORT" --token "$TOKEN" "$@"
STATUS=$?
set -e

echo "ws_recall.sh: uptime at end:$(uptime | sed 's/.*load average/ load average/')"
if grep -q "lexical hash embedder" "$LOG"; then
  echo "ws_recall.sh: WARNING: the server fell back to the hash embedder:" >&2
  grep "lexical hash embedder" "$LOG" | head -3 >&2
fi
exit "$STATUS"

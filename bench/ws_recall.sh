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
# Usage: bash bench/ws_recall.sh [ws_recall.js options, e.g. --n 300 --json]
# Environment: PORT (default: a free port), SOUL_MEM_DEMO_TOKEN, SOUL_BENCH_KEEP_LOG=1,
# SOUL_BENCH_START_TIMEOUT (s, default 900: a cargo rebuild takes ~9 min on 2 cores).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

PORT="${PORT:-$(node -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')}"
TOKEN="${SOUL_MEM_DEMO_TOKEN:-dev-token}"
START_TIMEOUT="${SOUL_BENCH_START_TIMEOUT:-900}"
DATA_DIR="$(mktemp -d /tmp/soul_ws_recall.data.XXXXXX)"
LOG="$(mktemp /tmp/soul_ws_recall.server.XXXXXX.log)"
SERVER=""
STATUS=1

cleanup() {
  if [ -n "$SERVER" ] && kill -0 "$SERVER" 2>/dev/null; then
    kill -TERM -- "-$SERVER" 2>/dev/null || true
    for _ in $(seq 1 30); do kill -0 "$SERVER" 2>/dev/null || break; sleep 0.5; done
    kill -KILL -- "-$SERVER" 2>/dev/null || true
  fi
  rm -rf "$DATA_DIR"
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

# setsid: the server (mix → beam) gets its own process group, stopped as a whole.
env -u SOUL_MEM_LLM_BASE_URL -u SOUL_MEM_LLM_API_KEY -u SOUL_MEM_LLM_MODEL \
  PORT="$PORT" SOUL_MEM_DATA_DIR="$DATA_DIR" SOUL_MEM_DEMO_TOKEN="$TOKEN" MIX_ENV="${MIX_ENV:-dev}" \
  setsid mix soul.server >"$LOG" 2>&1 </dev/null &
SERVER=$!

deadline=$((SECONDS + START_TIMEOUT))
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

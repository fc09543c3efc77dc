#!/usr/bin/env bash
# Release smoke test: builds the release, starts it twice on a fresh data dir and checks what
# only a running release shows — the demo token made at first start and printed once, the
# endpoint and the distribution (epmd and the node's port) listening on loopback only, a
# foreign page's socket refused, no start-up error from yaws. Run by scripts/test.sh.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

work=$(mktemp -d)
rel="$work/rel"
data="$work/data"
port=$((20000 + RANDOM % 20000))
cookie="smoke-$RANDOM$RANDOM"
node="soul_mem_smoke_$RANDOM@127.0.0.1"
export SOUL_MEM_DATA_DIR="$data" PORT="$port" RELEASE_COOKIE="$cookie" RELEASE_NODE="$node"
unset SOUL_MEM_DEMO_TOKEN SOUL_MEM_DIST_INTERFACE

fail() {
  echo "release_test: FAILED: $*" >&2
  [[ -f "$work/out.log" ]] && sed -n 1,40p "$work/out.log" >&2
  exit 1
}

stop() {
  "$rel/bin/soul_mem" stop >/dev/null 2>&1 || true
  for _ in $(seq 50); do
    "$rel/bin/soul_mem" pid >/dev/null 2>&1 || return 0
    sleep 0.2
  done
}
trap 'stop; rm -rf "$work"' EXIT

MIX_ENV=prod mix release --overwrite --quiet --path "$rel" </dev/null >"$work/build.log" 2>&1 ||
  { cat "$work/build.log" >&2; fail "mix release"; }

start() {
  "$rel/bin/soul_mem" start >"$work/out.log" 2>&1 </dev/null &
  for _ in $(seq 150); do
    curl -fs "http://127.0.0.1:$port/health" >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  fail "the release did not answer /health within 30 s"
}

# The token named by $1 printed in the log; the tokens are printed as the web application
# starts, which may finish just after /health first answers: wait for the line (up to 10 s).
printed() {
  local t=""
  for _ in $(seq 50); do
    t=$(sed -n "s/.*$1.*: \([A-Za-z0-9_-]\{20,\}\)\$/\1/p" "$work/out.log")
    [[ -n "$t" ]] && break
    sleep 0.2
  done
  echo "$t"
}

# First start: a random demo token, printed once, stored only as a hash.
start
token=$(printed 'demo character.s token')
[[ -n "$token" ]] || fail "no demo token printed at first start"
grep -q "$token" "$data/web_tokens.json" && fail "the token file holds the plain token"
[[ $(stat -c %a "$data/web_tokens.json") == 600 ]] || fail "token file is not 0600"
! grep -qi "can't find include\|error" "$work/out.log" || fail "errors at start-up"

# The printed token opens the demo character; the well-known dev token opens nothing.
status() { curl -s -o /dev/null -w '%{http_code}' "$@"; }
[[ $(status -H "Authorization: Bearer $token" "http://127.0.0.1:$port/api/characters/demo/export") == 200 ]] ||
  fail "the printed token does not open the demo character"
[[ $(status -H "Authorization: Bearer dev-token" "http://127.0.0.1:$port/api/characters/demo/export") == 401 ]] ||
  fail "dev-token opens the demo character of a release"

# The operator token is printed once too; it lists tokens and opens no character, and the
# well-known dev operator token is refused.
operator=$(printed 'operator token')
[[ -n "$operator" ]] || fail "no operator token printed at first start"
[[ $(status -H "Authorization: Bearer $operator" "http://127.0.0.1:$port/api/operator/tokens") == 200 ]] ||
  fail "the printed operator token does not open the operator API"
[[ $(status -H "Authorization: Bearer $operator" "http://127.0.0.1:$port/api/characters/demo/export") == 401 ]] ||
  fail "the operator token opens a character"
[[ $(status -H "Authorization: Bearer dev-operator" "http://127.0.0.1:$port/api/operator/tokens") == 403 ]] ||
  fail "dev-operator opens the operator API of a release"

# The page and its npm libraries are served from the release itself.
for asset in / /assets/app.js /assets/i18n.js /assets/phoenix.js /assets/vendor/cytoscape.min.js; do
  [[ $(status "http://127.0.0.1:$port$asset") == 200 ]] || fail "the release does not serve $asset"
done
[[ -f "$rel/lib/soul_mem_web-0.1.0/priv/static/vendor/cytoscape.min.js" ]] ||
  fail "cytoscape is not inside the release"

# A page of another site cannot open the socket, even with the right token.
ws=(-H "Connection: Upgrade" -H "Upgrade: websocket" -H "Sec-WebSocket-Version: 13"
  -H "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==")
[[ $(status "${ws[@]}" -H "Origin: http://evil.example" \
  "http://127.0.0.1:$port/socket/websocket?vsn=2.0.0&token=$token") == 403 ]] ||
  fail "a foreign origin opened the socket"

# Every listening socket of the node and of epmd is on loopback.
pid=$("$rel/bin/soul_mem" pid)
listeners=$(ss -ltnpH | grep -E "pid=$pid,|\"epmd\"" | awk '{print $4}')
[[ -n "$listeners" ]] || fail "no listener found for pid $pid"
while read -r addr; do
  case "$addr" in
    127.0.0.1:* | "[::1]:"*) ;;
    *) fail "listening on $addr (want loopback only): $listeners" ;;
  esac
done <<<"$listeners"
echo "release_test: listeners: $(echo $listeners)"

# Second start on the same data dir: the token stays, nothing is printed.
stop
start
grep -q "demo character.s token\|operator token" "$work/out.log" && fail "a token was printed again at the second start"
[[ $(status -H "Authorization: Bearer $token" "http://127.0.0.1:$port/api/characters/demo/export") == 200 ]] ||
  fail "the first token stopped working after a restart"

echo "release_test: ok"

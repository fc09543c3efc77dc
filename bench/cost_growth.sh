#!/usr/bin/env bash
# The cost-growth table of bench/README.md ("How a recall's cost grows with the character"):
# one command that measures a recall at several character sizes, each the way it is served,
# and the textbook tools on the same shapes.
#
#   1. WebSocket, end to end, uncached text (bench/ws_recall.sh: a server of this checkout,
#      the official `phoenix` client, the e5 model embedding every query): the demo character
#      (53 notes), and larger ones seeded from bench/synth_graph.py (the demo's notes plus
#      generated ones, SOUL_MEM_DEMO_GRAPH). Every note is embedded with e5 when the character
#      first loads (~1-3 min per 10k notes); the measuring starts when that is done.
#   2. In process, full mode (bench/recall_growth.exs, hash embedder): `SoulMem.recall` and the
#      NIF recall alone — what grows besides the query embedding.
#   3. The pipeline alone in full mode (`soul_tune bench retrieval`, synthetic graph and
#      index with hash vectors, single thread): similarity, lexical, PPR, the DefaultPipeline
#      for one sub-query, and for a whole chat message (the text and four keywords).
#   4. Working memory (`soul_tune bench working`, hash embedder, synthetic): recall with
#      activation, the pipeline alone on the working graph, the long-term index's kind and its
#      top-10 against the exact f32 scan, bytes per note, cold start, peak RSS.
#   5. Reference rows (bench/reference_rows.py): python-igraph PPR and a numpy f32 scan.
#
# Usage: bash bench/cost_growth.sh [--ws 53,1000,10000] [--full 1000,10000]
#          [--pipeline 1000,10000,100000,1000000] [--working 100000,1000000] [--reference 1000,10000,100000,1000000] [--check 10]
#          [--out FILE]
# An empty list skips its part (e.g. --ws ""). --check: queries compared with the exact scan
# per working size (each reads every stored vector: ~1 min at 1M). The 1M working character
# takes ~7 GB of disk under $TMPDIR and ~30 min; the rest ~15 min.
# The markdown goes to stdout and, with --out, to FILE.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

WS="53,1000,10000"
FULL="1000,10000"
PIPELINE="1000,10000,100000,1000000"
WORKING="100000,1000000"
REFERENCE="1000,10000,100000,1000000"
CHECK=10
OUT=""
while [ $# -gt 0 ]; do
  case "$1" in
    --ws) WS="$2"; shift 2 ;;
    --full) FULL="$2"; shift 2 ;;
    --pipeline) PIPELINE="$2"; shift 2 ;;
    --working) WORKING="$2"; shift 2 ;;
    --reference) REFERENCE="$2"; shift 2 ;;
    --check) CHECK="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    *) echo "cost_growth.sh: unknown option $1" >&2; exit 2 ;;
  esac
done

TMP="$(mktemp -d "${TMPDIR:-/tmp}/soul_cost_growth.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
REPORT="$TMP/report.md"
say() { echo "$*" | tee -a "$REPORT"; }
sizes() { tr ',' ' ' <<<"$1"; }

say "## Cost growth — $(git log --oneline -1 | cut -c1-60)"
say ""
say "$(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores,$(uptime | sed 's/.*load average/ load average/')"
say ""

if [ -n "$WS" ]; then
  say "### WebSocket recall, uncached text (e5), end to end"
  say ""
  say "| notes | p50 ms | p95 ms | p99 ms | join + embedding the graph, s |"
  say "|---|---|---|---|---|"
  for n in $(sizes "$WS"); do
    graph=()
    if [ "$n" -gt 53 ]; then
      python3 bench/synth_graph.py --nodes "$n" --out "$TMP/graph_$n.json" >/dev/null
      graph=(SOUL_MEM_DEMO_GRAPH="$TMP/graph_$n.json" SOUL_MEM_GRAPH_MAX_BYTES=$((n * 2000)))
    fi
    # A first recall waits for every note to be embedded: allow 1 s per 30 notes.
    first=$((180000 + n * 34))
    env "${graph[@]}" SOUL_BENCH_FIRST_TIMEOUT_MS="$first" \
      bash bench/ws_recall.sh --n 200 --json >"$TMP/ws_$n.log" 2>"$TMP/ws_$n.err" || {
      cat "$TMP/ws_$n.err" >&2
      cat "$TMP/ws_$n.log" >&2
      exit 1
    }
    python3 - "$n" "$TMP/ws_$n.log" <<'EOF' | tee -a "$REPORT"
import json, sys
r = json.loads([l for l in open(sys.argv[2]) if l.startswith("{")][-1])
m = r["ms"]
print(f"| {int(sys.argv[1]):,} | {m['p50']} | {m['p95']} | {m['p99']} "
      f"| {(r['join_ms'] + r['ready_ms']) / 1000:.1f} |")
EOF
  done
  say ""
fi

if [ -n "$FULL" ]; then
  say "### In process, full mode (hash embedder)"
  say ""
  # The largest graph file must pass the import limit (~700 bytes per generated note).
  largest=$(tr ',' '\n' <<<"$FULL" | sort -n | tail -1)
  SOUL_MEM_GRAPH_MAX_BYTES=$((largest * 2000 + 1000000)) \
    mix run bench/recall_growth.exs -- --sizes "$FULL" --recalls 200 2>/dev/null |
    grep '^|' | tee -a "$REPORT"
  say ""
fi

if [ -n "$PIPELINE$WORKING" ]; then
  (cd native && cargo build --release -q -p soul_tune)
fi

if [ -n "$PIPELINE" ]; then
  say "### The pipeline alone, full mode (soul_tune bench retrieval, hash vectors, one thread)"
  say ""
  # Two tables (one sub-query per query; whole chat messages): keep the blank line between.
  native/target/release/soul_tune bench retrieval --sizes "$PIPELINE" 2>/dev/null |
    grep -e '^|' -e '^$' | tee -a "$REPORT"
  say ""
fi

if [ -n "$WORKING" ]; then
  say "### Working memory (soul_tune bench working, hash embedder, 1k working notes)"
  say ""
  say "| notes | recall p50 / p99 ms | pipeline on the working graph (index built) p50 / p99 ms | index | index top-10 = exact | bytes per note (index + links) | cold start ms | peak RSS MiB |"
  say "|---|---|---|---|---|---|---|---|"
  for n in $(sizes "$WORKING"); do
    native/target/release/soul_tune bench working --nodes "$n" --queries 200 --check "$CHECK" \
      --dir "$TMP/wm_$n" --json "$TMP/wm_$n.json" >"$TMP/wm_$n.log" 2>&1 || {
      cat "$TMP/wm_$n.log" >&2
      exit 1
    }
    python3 - "$TMP/wm_$n.json" <<'EOF' | tee -a "$REPORT"
import json, sys
r = json.load(open(sys.argv[1]))
n = r["nodes"]
print(f"| {n:,} | {r['recall_ms']['p50']:.1f} / {r['recall_ms']['p99']:.1f} "
      f"| {r['pipeline_only_ms']['p50']:.1f} / {r['pipeline_only_ms']['p99']:.1f} "
      f"| {r['index_kind']} | {100 * r['index_recall_at_10']:.1f} % "
      f"| {(r['index_bytes'] + r['links_bytes']) / n:.0f} "
      f"| {r['cold_start']['total_ms']:.0f} | {r['peak_rss_mib']:.0f} |")
EOF
    rm -rf "$TMP/wm_$n"
  done
  say ""
fi

if [ -n "$REFERENCE" ]; then
  python3 -c 'import igraph, numpy' 2>/dev/null || python3 -m pip install -q igraph numpy
  say "### Reference: python-igraph PPR and numpy scan on the same shapes"
  say ""
  python3 bench/reference_rows.py --sizes "$REFERENCE" | tee -a "$REPORT"
  say ""
fi

if [ -n "$OUT" ]; then cp "$REPORT" "$OUT"; fi

#!/usr/bin/env bash
# Ablation table of the retrieval channels (issue: recall that associates). Runs soul_tune
# retrieve in full mode on the development sets with one setting changed per row, plus the
# bm25 and embedding-only baselines, and prints one markdown row per (setting, data set).
#
#   bash bench/retrieval_ablation.sh [FIXTURES_DIR]   # default ../shared/fixtures
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../native"
fx=${1:-../../shared/fixtures}
bin=./target/release/soul_tune
cargo build --release -q -p soul_tune
row() { # label, mode, config JSON
  local label=$1 mode=$2 cfg=$3
  for set in pairs dev_sets; do
    "$bin" retrieve "$fx/$set" --mode "$mode" --config "$cfg" 2>&1 |
      awk -v l="$label" -v s="$set" '/TOTAL$/ { gsub(/\|/, " "); n = split($0, f, " ");
        printf "| %s | %s | %s | %s | %s | %s | %s | %s |\n", l, s, f[6], f[9], f[10], f[18], f[19], f[22] }'
  done
}
echo "| setting | set | must% | MRR | R@10 | act% | actR@3 | abs |"
echo "|---|---|---:|---:|---:|---:|---:|---:|"
row "bm25 baseline" bm25 '{}'
row "embedding only (seed fusion)" embedding '{}'
row "full, defaults" full '{}'
row "full, dense off" full '{"similarity.fusion.dense":0}'
row "full, tag off" full '{"similarity.fusion.tag":0}'
row "full, lexical off" full '{"similarity.fusion.lexical":0}'
row "full, PPR off (blend 0)" full '{"assoc_with_action.association.blend":0}'
row "full, hub specificity off" full '{"assoc_with_action.association.hub_exponent":0}'
row "full, links walked forwards only (reverse 0)" full '{"assoc_with_action.association.reverse_links":0}'
row "full, association lifts every kind" full '{"assoc_with_action.association.lift":"All"}'
row "full, own habits off" full '{"similarity.blend.own_habits":0}'
row "full, calibration off (raw)" full '{"similarity.fusion.method":"raw"}'
row "full, rrf calibration" full '{"similarity.fusion.method":"rrf"}'
row "full, habit likeness off (triggers only)" full '{"assoc_with_action.habit_match":0}'
row "full, 4 seeds" full '{"similarity.max_results":4}'

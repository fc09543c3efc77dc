#!/usr/bin/env python3
"""Scores runs' answers to the same texts (`bench/ws_recall.js --dump FILE`).

usage: python3 bench/compare_recalls.py RUN.jsonl [RUN.jsonl ...] [--reference FULL.jsonl]
                                        [--top 10] [--noise-prefix syn_]

For each run: the share of its top memories (at most --top per text) that are the
character's own notes rather than generated filler (ids starting with --noise-prefix, as
`bench/synth_graph.py` names them), and the share of texts whose first memory is one. With
--reference (a full-mode run of the same texts, same --salt): the share of the reference's
top memories the run also returned, pooled over the texts, and the share of texts whose
first memory is the same. One JSON line per run.
"""
import argparse
import json
import sys


def load(path):
    out = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line:
                row = json.loads(line)
                out[row["text"]] = row["memories"]
    return out


def own_notes(run, top, noise):
    shown = [m for ms in run.values() for m in ms[:top]]
    firsts = [ms[0] for ms in run.values() if ms]
    return {
        "own_share": round(sum(not m.startswith(noise) for m in shown) / max(len(shown), 1), 4),
        "own_first": round(sum(not m.startswith(noise) for m in firsts) / max(len(run), 1), 4),
    }


def against(ref, run, top):
    texts = [t for t in ref if t in run]
    if not texts:
        sys.exit("compare_recalls: no text is in both files")
    hit = total = first = 0
    for t in texts:
        want = ref[t][:top]
        got = set(run[t])
        total += len(want)
        hit += sum(1 for m in want if m in got)
        first += bool(want) and bool(run[t]) and want[0] == run[t][0]
    return {
        "reference_found": round(hit / total, 4) if total else None,
        "reference_first_same": round(first / len(texts), 4),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--reference")
    ap.add_argument("--top", type=int, default=10)
    ap.add_argument("--noise-prefix", default="syn_")
    a = ap.parse_args()
    ref = load(a.reference) if a.reference else None
    for path in ([a.reference] if ref else []) + a.runs:
        run = load(path)
        row = {"run": path, "texts": len(run), "top": a.top}
        row.update(own_notes(run, a.top, a.noise_prefix))
        if ref and path != a.reference:
            row.update(against(ref, run, a.top))
        print(json.dumps(row))


if __name__ == "__main__":
    main()

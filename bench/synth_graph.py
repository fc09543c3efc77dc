#!/usr/bin/env python3
"""A synthetic character of N notes for the growth benchmarks (bench/recall_growth.exs):
the demo character's 53 notes (fixtures/characters/demo.json) plus N - 53 generated ones —
semantic notes and specific situations in the corpus's shape, with Chinese text drawn from
the demo's own words, each linked to 3 earlier notes. Deterministic for a given N and seed.

    python3 bench/synth_graph.py --nodes 10000 --out /tmp/graph_10k.json
"""
import argparse
import json
import random
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    demo = json.loads((ROOT / "fixtures/characters/demo.json").read_text())
    if a.nodes < len(demo):
        raise SystemExit(f"--nodes must be at least {len(demo)} (the demo character)")
    rng = random.Random(a.seed)
    # Words of the demo's texts: runs of 2-4 CJK characters.
    text = json.dumps(demo, ensure_ascii=False)
    words = sorted({w for run in re.findall(r"[\u4e00-\u9fff]+", text)
                    for w in (run[i:i + rng.choice((2, 3, 4))] for i in range(0, len(run) - 1, 2))})

    def phrase(n):
        return "".join(rng.choice(words) for _ in range(n))

    notes = list(demo)
    ids = [n["id"] for n in notes]
    for i in range(len(demo), a.nodes):
        nid = f"syn_{i}"
        if i % 2:
            mem = {"Semantic": {"content": phrase(1), "aliases": [], "concept_type": "Entity",
                                "description": phrase(rng.randint(6, 14))}}
        else:
            mem = {"Situation": {"SpecificSituation": {
                "narrative": phrase(rng.randint(10, 24)), "time_span": None,
                "context": {"location": {"name": phrase(1), "coordinates": ""},
                            "participants": [], "emotions": [], "sensory_data": [],
                            "environment": None, "event": []}}}}
        links = []
        for to in rng.sample(ids, min(3, len(ids))):
            links.append({"from": nid, "to": to, "intensity": round(rng.uniform(0.2, 0.9), 2),
                          "link_type": {"Sem": {"verb": phrase(1), "confidence": 0.9}}})
        notes.append({"id": nid, "tags": [phrase(1)], "mem_type": mem, "mem_links": links})
        ids.append(nid)
    Path(a.out).write_text(json.dumps(notes, ensure_ascii=False))


if __name__ == "__main__":
    main()

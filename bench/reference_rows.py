#!/usr/bin/env python3
"""Reference rows for the cost-growth table (bench/cost_growth.sh): what the two textbook
tools cost on a graph and a vector matrix of the same shape as a SoulMem character.

For each size N: a random graph of N nodes with 3 out-links each (the shape of
`soul_tune bench working`'s synthetic character) and N random unit vectors of 384 float32.
  * igraph PPR — python-igraph's `personalized_pagerank` (PRPACK; the engine HippoRAG uses)
    from 5 random seed nodes, damping 0.85;
  * numpy scan — the exact top-10 of one query over the N x 384 float32 matrix
    (`M @ q`, `argpartition`), the brute-force similarity search in its usual form.
Prints one markdown row per size and tool: p50 / p99 ms over the repetitions, bytes per node.

    python3 bench/reference_rows.py --sizes 1000,10000,100000,1000000 [--reps 50]

Needs `igraph` and `numpy` (pip).
"""
import argparse
import time

import igraph
import numpy as np


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))]


def timed(f, reps):
    out = []
    for _ in range(reps):
        t = time.perf_counter()
        f()
        out.append((time.perf_counter() - t) * 1000)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000,10000,100000,1000000")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--dim", type=int, default=384)
    a = ap.parse_args()
    rng = np.random.default_rng(7)
    print("| notes | tool | p50 / p99 ms | bytes per note |")
    print("|---|---|---|---|")
    for n in (int(s) for s in a.sizes.split(",")):
        # Fewer repetitions where one takes seconds.
        reps = max(5, min(a.reps, a.reps * 100_000 // n))
        src = np.repeat(np.arange(n), 3)
        dst = rng.integers(0, n, size=3 * n)
        g = igraph.Graph(n=n, edges=np.column_stack([src, dst]).tolist(), directed=True)
        g.es["weight"] = rng.uniform(0.1, 1.0, size=3 * n).tolist()
        seeds = [rng.integers(0, n, size=5).tolist() for _ in range(reps)]
        it = iter(seeds)
        ppr = timed(lambda: g.personalized_pagerank(
            reset_vertices=next(it), damping=0.85, weights="weight", directed=True), reps)
        print(f"| {n:,} | igraph PPR (5 seeds) | {pct(ppr, 50):.2f} / {pct(ppr, 99):.2f} | "
              f"edges only: {3 * 2 * 8 + 8} |")
        del g
        m = rng.standard_normal((n, a.dim), dtype=np.float32)
        m /= np.linalg.norm(m, axis=1, keepdims=True)
        qs = rng.standard_normal((reps, a.dim), dtype=np.float32)
        it = iter(qs)

        def scan():
            s = m @ next(it)
            top = np.argpartition(-s, 10)[:10]
            return top[np.argsort(-s[top])]

        sc = timed(scan, reps)
        print(f"| {n:,} | numpy f32 scan, top-10 | {pct(sc, 50):.2f} / {pct(sc, 99):.2f} | "
              f"{m.nbytes // n} |")
        del m


if __name__ == "__main__":
    main()

"""Allocation benchmark: heuristic quality and runtime as instances grow (100 to 100k buffers).

Instance set: the `random` and `mixed` families of problems.allocation_gen at n = 100, 1k, 10k,
100k (seed 1). Gap = (peak - best bound) / best bound, where the best bound is the tightest of
the live-size lower bound and CP-SAT's proven bound (CP-SAT runs up to n = 1,000, 30 s, seed 0).
Peak traced memory is measured for ffd only, in a separate run.
Writes results/allocation_benchmark.csv. Usage: python benchmarks/allocation.py [--max-n N]
"""

from __future__ import annotations

import argparse
import sys
import tracemalloc
from pathlib import Path

import pandas as pd

from tensorplan.harness.report import markdown_table
from tensorplan.harness.run import solve
from tensorplan.problems.allocation import lower_bound
from tensorplan.problems.allocation_gen import mixed_family, random_family

OUT = Path(__file__).resolve().parents[1] / "results" / "allocation_benchmark.csv"
HEURISTICS = ["ffd", "bfd", "ff-lifetime", "xla", "multistart"]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-n", type=int, default=100_000)
    ap.add_argument("--exact-max-n", type=int, default=1_000)
    ap.add_argument("--exact-time", type=float, default=30.0)
    args = ap.parse_args(argv)
    rows = []
    for n in [n for n in (100, 1_000, 10_000, 100_000) if n <= args.max_n]:
        for family in (random_family, mixed_family):
            inst = family(n, 1)
            lb = lower_bound(inst)
            results = {}
            if n <= args.exact_max_n:
                results["cpsat"] = solve(inst, "cpsat", time_limit=args.exact_time)
            for h in HEURISTICS:
                if h == "multistart" and n > 10_000:
                    continue
                results[h] = solve(inst, h, time_limit=60)
            # memory separately: tracemalloc slows allocation-heavy Python several times over
            tracemalloc.start()
            solve(inst, "ffd")
            ffd_mem = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            exact = results.get("cpsat")
            best = max(lb, exact.bound or 0) if exact is not None else lb
            for name, r in results.items():
                mem = ffd_mem if name == "ffd" else None
                rows.append(
                    {
                        "family": family.__name__.removesuffix("_family"),
                        "n": n,
                        "solver": name,
                        "status": str(r.status),
                        "peak": r.objective,
                        "best_bound": best,
                        "gap_pct": None
                        if r.objective is None
                        else round(100 * (r.objective - best) / best, 3),
                        "runtime_s": round(r.runtime_s, 3),
                        "peak_mem_mb": None if mem is None else round(mem / 2**20, 1),
                    }
                )
                print(rows[-1], flush=True)
    frame = pd.DataFrame(rows)
    OUT.parent.mkdir(exist_ok=True)
    frame.to_csv(OUT, index=False)
    print(markdown_table(frame))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

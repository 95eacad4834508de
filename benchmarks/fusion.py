"""Fusion benchmark: ILP solve time of both forms as random programs grow, and heuristic gaps.

Instances: `problems.fusion_gen.random_program(n, seed)` for n in SIZES, seeds in SEEDS.
Solvers: `ilp` (optimised form) and `ilp-unopt` (unoptimised form) on HiGHS, `cpsat` (optimised
form), each with TIME_LIMIT seconds; heuristics greedy, typed, stream, none.
Gap: (objective - best objective found by any solver on that instance) / best; `bound_gap` is each
exact solver's own (objective - proven bound) / objective; `bound` for a heuristic is the problem's
cheap lower bound. Writes results/fusion_benchmark.csv.

Run: .venv/bin/python benchmarks/fusion.py [--time-limit 20]
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tensorplan.harness.run import METRIC, solve  # noqa: E402
from tensorplan.problems.fusion_gen import random_program  # noqa: E402

SIZES = (10, 25, 50, 100, 150, 200)
SEEDS = (1,)
EXACT = ("ilp", "ilp-unopt", "cpsat")
HEURISTICS = ("greedy", "typed", "stream", "none")
FIELDS = [
    "bindings",
    "seed",
    "solver",
    "form",
    "variables",
    "constraints",
    "status",
    "objective",
    "bound",
    "time_s",
    "gap_to_best",
    "bound_gap",
    "loops",
]


def _gap(obj: float | None, best: float) -> float | str:
    """(obj - best) / best; "inf" when the best is 0 and obj is not."""
    if obj is None:
        return ""
    if best == 0:
        return 0.0 if obj == 0 else "inf"
    return round((obj - best) / best, 4)


def rows_for(n: int, seed: int, time_limit: float) -> list[dict]:
    inst = random_program(n, seed)
    results = {s: solve(inst, s, time_limit=time_limit, seed=0) for s in EXACT + HEURISTICS}
    best = min(r.objective for r in results.values() if r.objective is not None)
    rows = []
    for s, r in results.items():
        obj = r.objective
        rows.append(
            {
                "bindings": n,
                "seed": seed,
                "solver": s,
                "form": r.stats.get("form", ""),
                "variables": r.stats.get("variables", ""),
                "constraints": r.stats.get("constraints", ""),
                "status": str(r.status),
                "objective": obj,
                "bound": r.bound,
                "time_s": round(r.runtime_s, 2),
                "gap_to_best": _gap(obj, best),
                "bound_gap": ""
                if obj is None or r.bound is None or s in HEURISTICS
                else round((obj - r.bound) / obj, 4)
                if obj
                else 0.0,
                "loops": r.stats.get(METRIC + "loops", ""),
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=20.0)
    ap.add_argument("--sizes", type=int, nargs="*", default=list(SIZES))
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "fusion_benchmark.csv")
    args = ap.parse_args(argv)
    rows = []
    for n in args.sizes:
        for seed in SEEDS:
            rows += rows_for(n, seed, args.time_limit)
            print(f"n={n} seed={seed} done", file=sys.stderr)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        w.writerows(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

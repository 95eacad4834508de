"""Layout benchmark: exact vs greedy gap and runtime as graphs grow (10..10^6 elements, 1000 ops).

Instances (generated, deterministic): the seed's exercise graph scaled to n-element tensors
(`scaled_exercise`, labels drawn from 16 values so classes repeat) and random unwinding graphs
(`random_graph`, 8 tiles). Solvers: greedy0, local, mip (HiGHS), mip-cbc, cpsat, each with time
limit `TIME_LIMIT` seconds and seed 0. Exact solvers honour the limit (a time-out returns the
warm start or better with status feasible), so every solver runs on every instance;
`over_limit` flags a runtime above limit + 10% + 1 s (should never happen).

gap = (best objective found on the instance - objective) / best objective: the relative shortfall
from the best solution any solver found (0 for the solver(s) that found it); when an exact solver
proves optimality the best is the optimum. Writes results/layout_benchmark.csv.

    .venv/bin/python benchmarks/layout.py [--time-limit 30]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tensorplan.harness.run import solve  # noqa: E402
from tensorplan.problems import layout_gen as gen  # noqa: E402
from tensorplan.problems.core import Options, write_csv_atomic  # noqa: E402
from tensorplan.problems.layout import VIEW_OPS, upper_bound  # noqa: E402

SOLVERS = ["greedy0", "local", "mip", "mip-cbc", "cpsat"]
TIME_LIMIT = 30.0


def instances():
    for n in (10, 1_000, 100_000, 1_000_000):
        yield "exercise", lambda n=n: gen.scaled_exercise(n, seed=1, labels=16)
    for ops, size in (
        (10, 10),
        (100, 100),
        (300, 1_000),
        (1_000, 100),
        (30, 10_000),
        (10, 100_000),
        (10, 1_000_000),
    ):
        yield "random", lambda ops=ops, size=size: gen.random_graph(ops, size, seed=7, tiles=8)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=TIME_LIMIT)
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "layout_benchmark.csv")
    args = ap.parse_args(argv)
    rows = []
    for _family, make in instances():
        t0 = time.perf_counter()
        inst = make()
        build_s = time.perf_counter() - t0
        g = inst.graph
        base = {
            "instance": inst.name,
            "tensors": len(inst.tensors),
            "view_ops": sum(t.op in VIEW_OPS for t in inst.tensors),
            "pairs": len(inst.pairs),
            "elements": sum(g.size.values()),
            "sink_elements": g.num_sink_elements,
            "upper_bound": upper_bound(inst),
            "build_s": round(build_s, 3),
        }
        results = {}
        for s in SOLVERS:
            results[s] = solve(inst, s, Options(time_limit=args.time_limit))
        best = max((r.objective for r in results.values() if r.objective is not None), default=None)
        local = results["local"].objective if "local" in results else None
        for s, r in results.items():
            gap = None if best in (None, 0) or r.objective is None else (best - r.objective) / best
            rows.append(
                {
                    **base,
                    "solver": s,
                    "status": str(r.status),
                    "objective": r.objective,
                    "bound": r.bound,
                    "gap": None if gap is None else round(gap, 6),
                    "runtime_s": round(r.runtime_s, 3),
                    "time_limit": args.time_limit,
                    "over_limit": r.runtime_s > 1.1 * args.time_limit + 1.0,
                    "vs_local": None
                    if r.objective is None or local is None
                    else round(r.objective - local, 6),
                    "classes": r.stats.get("classes", ""),
                    "components": r.stats.get("components", ""),
                    "variables": r.stats.get("variables", ""),
                }
            )
            print(",".join(str(v) for v in rows[-1].values()), flush=True)
    write_csv_atomic(args.out, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""`shift` against the seed's own procedure (heuristics/schedule_reference.py) per family and
size, sum-liveness, one thread.

    .venv/bin/python -m benchmarks.schedule_seed [--sizes 100,1000,5000] [--limit 10]

Per family (tree, grid with sizes 1-19, adversary, recompute, layered) and size: the seed's
procedure (greedy Kahn start, its ladder; compiled, run to convergence) with its wall time;
`shift` given that same time, and given `--limit` seconds; the instance's lower bound
(`problems.schedule.lower_bound`) and the proven gap of shift's best, (objective - bound) /
bound. Kernels are loaded before any timing. Writes results/schedule_seed.csv and .md.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

from tensorplan.harness.run import solve, warm_once
from tensorplan.heuristics.schedule import warm_kernels
from tensorplan.heuristics.schedule_reference import seed_shift
from tensorplan.problems import schedule_gen as gen
from tensorplan.problems.core import Options, write_csv_atomic, write_text_atomic
from tensorplan.problems.schedule import ScheduleInstance, lower_bound, order_objective

RESULTS = Path(__file__).resolve().parent.parent / "results"
FAMILIES: dict[str, Callable[[int], ScheduleInstance]] = {
    "tree": lambda n: gen.tree(n, 1),
    "grid": lambda n: gen.grid(max(1, n // 50), 50, 1, max_size=19),
    "adversary": lambda n: gen.adversary(n, 1),
    "recompute": lambda n: gen.recompute(max(2, round(n / 2.67)), 1),
    "layered": lambda n: gen.layered(max(1, n // 50), 50, 1),
}


def row(family: str, inst: ScheduleInstance, limit: float) -> dict[str, object]:
    """The reference, then shift at the reference's time and at `limit`."""
    began = time.perf_counter()
    state, converged = seed_shift(inst.graph, time_limit=600.0)
    ref_s = time.perf_counter() - began
    ref = order_objective(inst.graph, state.arrays.order.tolist(), "sum_liveness")
    same = solve(inst, "shift", Options(time_limit=max(ref_s, 0.05)))
    longer = solve(inst, "shift", Options(time_limit=limit))
    bound = lower_bound(inst)
    best = min(v for v in (same.objective, longer.objective) if v is not None)
    return {
        "family": family,
        "ops": inst.graph.n,
        "seed procedure": ref,
        "seed s": round(ref_s, 3),
        "seed converged": converged,
        "shift at seed's time": same.objective,
        "shift s": round(same.runtime_s, 3),
        f"shift {limit:g} s": longer.objective,
        "vs seed": f"{(int(same.objective or 0) - ref) / ref:+.2%}",
        "bound": bound,
        "proven gap": f"{(best - bound) / bound:.1%}" if bound else "-",
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--sizes", default="100,1000,5000")
    ap.add_argument("--limit", type=float, default=10.0)
    args = ap.parse_args(argv)
    warm_kernels()
    warm_once("schedule", "shift")
    rows = []
    for n in (int(s) for s in args.sizes.split(",")):
        for family, make in FAMILIES.items():
            rows.append(row(family, make(n), args.limit))
            print(rows[-1], flush=True)
    write_csv_atomic(RESULTS / "schedule_seed.csv", rows)
    head = list(rows[0])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(r[h]) for h in head) + " |" for r in rows]
    write_text_atomic(
        RESULTS / "schedule_seed.md",
        "# shift against the seed's procedure (sum-liveness, one thread)\n\n"
        "`python -m benchmarks.schedule_seed`; see its docstring.\n\n" + "\n".join(lines) + "\n",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

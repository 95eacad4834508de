"""`shift` against the seed's own procedure (heuristics/schedule_reference.py) per family and
size, sum-liveness, one thread.

    .venv/bin/python -m benchmarks.schedule_seed [--sizes 100,1000,5000] [--limit 10] [--seeds 1]

Per family (tree, grid with sizes 1-19, adversary, recompute, layered) and size: the seed's
procedure (greedy Kahn start, its ladder; compiled, run to convergence) with its wall time;
`shift` given that same time (its `runtime_s`: the harness's verification after it is not
counted, as the reference has none), and given `--limit` seconds; the bound (the higher of
`problems.schedule.lower_bound` and the bound `shift` reports at `--limit`) and the proven
gap of shift's best, (objective - bound) / bound. `--seeds N`: instances of seeds 1..N per
family and size; a summary per family and size follows the table (how many `shift` matched
or beat, the mean and worst difference, the slowest time ratio). Kernels are loaded before
any timing. Writes results/schedule_seed.csv and .md.
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
FAMILIES: dict[str, Callable[[int, int], ScheduleInstance]] = {
    "tree": lambda n, s: gen.tree(n, s),
    "grid": lambda n, s: gen.grid(max(1, n // 50), 50, s, max_size=19),
    "adversary": lambda n, s: gen.adversary(n, s),
    "recompute": lambda n, s: gen.recompute(max(2, round(n / 2.67)), s),
    "layered": lambda n, s: gen.layered(max(1, n // 50), 50, s),
}


def row(family: str, inst: ScheduleInstance, limit: float) -> dict[str, object]:
    """The reference, then shift at the reference's time and at `limit`."""
    began = time.perf_counter()
    state, converged = seed_shift(inst.graph, time_limit=600.0)
    ref_s = time.perf_counter() - began
    ref = order_objective(inst.graph, state.arrays.order.tolist(), "sum_liveness")
    same = solve(inst, "shift", Options(time_limit=ref_s))
    longer = solve(inst, "shift", Options(time_limit=limit))
    bound = max(lower_bound(inst), int(longer.bound or 0))  # the hull's, or shift's at --limit
    best = min(v for v in (same.objective, longer.objective) if v is not None)
    return {
        "family": family,
        "instance": inst.name,
        "ops": inst.graph.n,
        "seed procedure": ref,
        "seed s": round(ref_s, 5),
        "seed converged": converged,
        "shift at seed's time": same.objective,
        "shift s": round(same.runtime_s, 5),
        f"shift {limit:g} s": longer.objective,
        "vs seed": f"{(int(same.objective or 0) - ref) / ref:+.2%}",
        "bound": bound,
        "proven gap": f"{(best - bound) / bound:.1%}" if bound else "-",
    }


def summary(rows: list[dict[str, object]]) -> str:
    """Per family and size: `shift` at the seed's time against the seed's procedure."""
    lines = [
        "| family | ops | instances | shift <= seed | mean vs seed | worst vs seed | "
        "slowest shift s / seed s |",
        "|---|---|---|---|---|---|---|",
    ]
    groups: dict[tuple[object, object], list[dict[str, object]]] = {}
    for r in rows:
        groups.setdefault((r["family"], r["ops"]), []).append(r)
    for (family, ops), rs in groups.items():
        diffs = [float(str(r["vs seed"]).rstrip("%")) for r in rs]
        ratio = max(float(str(r["shift s"])) / max(float(str(r["seed s"])), 1e-9) for r in rs)
        lines.append(
            f"| {family} | {ops} | {len(rs)} | {sum(d <= 0 for d in diffs)} | "
            f"{sum(diffs) / len(diffs):+.2f}% | {max(diffs):+.2f}% | {ratio:.2f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--sizes", default="100,1000,5000")
    ap.add_argument("--limit", type=float, default=10.0)
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--out", default="schedule_seed", help="results/OUT.csv and .md")
    args = ap.parse_args(argv)
    warm_kernels()
    warm_once("schedule", "shift")
    rows = []
    for n in (int(s) for s in args.sizes.split(",")):
        for family, make in FAMILIES.items():
            for seed in range(1, args.seeds + 1):
                rows.append(row(family, make(n, seed), args.limit))
                print(rows[-1], flush=True)
    write_csv_atomic(RESULTS / f"{args.out}.csv", rows)
    head = list(rows[0])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(r[h]) for h in head) + " |" for r in rows]
    write_text_atomic(
        RESULTS / f"{args.out}.md",
        "# shift against the seed's procedure (sum-liveness, one thread)\n\n"
        "`python -m benchmarks.schedule_seed`; see its docstring.\n\n"
        + "\n".join(lines)
        + "\n\n"
        + summary(rows)
        + "\n",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

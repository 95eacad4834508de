"""Schedule benchmark: shift's final objective against the exact optimum (small graphs), the
annealed variant beside it, and shift's running time as the graph grows (100 to 10,000 ops).
Writes results/schedule_benchmark.csv.

Run: .venv/bin/python -m benchmarks.schedule [--quick]

- part `optimum`: every family at sizes CP-SAT closes, for both objectives (time limit 20 s,
  seed 0); gap = (heuristic - optimum) / optimum, optimum = CP-SAT's proven value (blank if not
  proven). `shift` is the full n-shift ladder from the default start (best of greedy / Kahn
  fifo / Kahn filo); `anneal` is the `shift-anneal` solver (seed 0, default steps and rounds:
  up to 4 annealing rounds while the time limit allows) from the same start, its time included.
- part `scaling`: the same shift run on growing graphs, time limit 60 s on one core; time per
  move = total search time / improving rotations applied; `converged` = reached a local minimum
  of every rotation (the full ladder). `anneal` columns for graphs up to 1,000 ops. Peak-mode
  rows (`objective` = peak) for graphs up to 1,000 ops.
"""

from __future__ import annotations

import csv
import sys
import time
from pathlib import Path

from tensorplan.harness.run import solve
from tensorplan.heuristics.schedule import best_start, run_anneal, shift_order
from tensorplan.problems import schedule_gen as gen
from tensorplan.problems.core import Options
from tensorplan.problems.schedule import order_objective

OUT = Path(__file__).resolve().parent.parent / "results" / "schedule_benchmark.csv"
FIELDS = [
    "part",
    "family",
    "instance",
    "objective",
    "ops",
    "start_objective",
    "shift",
    "optimum",
    "gap",
    "moves",
    "time_s",
    "ms_per_move",
    "converged",
    "anneal",
    "anneal_gap",
    "anneal_time_s",
]


def small_set():
    for objective in ("sum_liveness", "peak"):
        for seed in (1, 2, 3):
            yield "recompute", gen.recompute(6, seed, objective=objective)
            yield "tree", gen.tree(16, seed, objective=objective)
            yield "bifurcating", gen.bifurcating(3, seed, objective=objective)
            yield "grid", gen.grid(4, 4, seed, objective=objective)
            yield "adversary", gen.adversary(14, seed, objective=objective)


def scaling_set(quick: bool):
    sizes = [100, 500, 1000] if quick else [100, 500, 1000, 2000, 5000, 10000]
    for n in sizes:
        for objective in ("sum_liveness", "peak") if n <= 1000 else ("sum_liveness",):
            kw = {"objective": objective}
            yield "recompute", gen.recompute(max(2, round(n / 2.67)), 1, **kw)
            if n <= 2000:
                yield "tree", gen.tree(n, 1, **kw)
                yield "adversary", gen.adversary(n, 1, **kw)
                yield "grid", gen.grid(max(1, n // 50), 50, 1, **kw)


def shift_row(part: str, family: str, inst, time_limit: float, anneal: bool) -> dict:
    g = inst.graph
    start = best_start(inst)
    t = time.perf_counter()
    state, converged = shift_order(g, start, inst.objective, time_limit=time_limit)
    elapsed = time.perf_counter() - t
    row = {
        "part": part,
        "family": family,
        "instance": inst.name,
        "objective": inst.objective,
        "ops": g.n,
        "start_objective": order_objective(g, start, inst.objective),
        "shift": order_objective(g, state.order, inst.objective),
        "optimum": "",
        "gap": "",
        "moves": state.moves,
        "time_s": round(elapsed, 3),
        "ms_per_move": round(1000 * elapsed / state.moves, 3) if state.moves else "",
        "converged": converged,
        "anneal": "",
        "anneal_gap": "",
        "anneal_time_s": "",
    }
    if anneal:
        res = run_anneal(inst, Options(seed=0, time_limit=time_limit))
        row["anneal_time_s"] = round(res.runtime_s, 3)
        row["anneal"] = res.objective
    return row


def main(argv: list[str] | None = None) -> int:
    quick = "--quick" in (sys.argv[1:] if argv is None else argv)
    rows = []
    for family, inst in small_set():
        row = shift_row("optimum", family, inst, 20, anneal=True)
        exact = solve(inst, "cpsat", time_limit=20)
        if exact.status.value == "optimal":
            opt = exact.objective
            row["optimum"] = opt
            row["gap"] = round((row["shift"] - opt) / opt, 4)
            row["anneal_gap"] = round((row["anneal"] - opt) / opt, 4)
        rows.append(row)
        print(row, flush=True)
    for family, inst in scaling_set(quick):
        row = shift_row("scaling", family, inst, 60, anneal=inst.graph.n <= 1000)
        rows.append(row)
        print(row, flush=True)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with OUT.open("w", newline="") as f:
        w = csv.DictWriter(f, FIELDS)
        w.writeheader()
        w.writerows(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Schedule benchmark: shift's final sum-liveness against the exact optimum (small graphs) and
shift's running time as the graph grows (100 to 10,000 ops). Writes results/schedule_benchmark.csv.

Run: .venv/bin/python -m benchmarks.schedule [--quick]

- part `optimum`: every family at sizes CP-SAT closes (time limit 20 s, seed 0); gap =
  (shift - optimum) / optimum, optimum = CP-SAT's proven value (blank if not proven).
- part `scaling`: shift from its default start (best of greedy / Kahn fifo / Kahn filo), ladder
  `continue`, max_shift default (min(n/2, 32)), time limit 60 s on one core; time per move =
  total search time / improving rotations applied; `converged` = reached a local minimum.
"""

from __future__ import annotations

import csv
import sys
import time
from pathlib import Path

from harness.run import solve
from heuristics.schedule import best_start, shift_order
from problems import schedule_gen as gen
from problems.schedule import order_objective

OUT = Path(__file__).resolve().parent.parent / "results" / "schedule_benchmark.csv"
FIELDS = ["part", "family", "instance", "ops", "start_objective", "shift", "optimum", "gap",
          "moves", "time_s", "ms_per_move", "converged"]


def small_set():
    for seed in (1, 2, 3):
        yield "recompute", gen.recompute(6, seed)
        yield "tree", gen.tree(16, seed)
        yield "bifurcating", gen.bifurcating(3, seed)
        yield "grid", gen.grid(4, 4, seed)
        yield "adversary", gen.adversary(14, seed)


def scaling_set(quick: bool):
    sizes = [100, 500, 1000] if quick else [100, 500, 1000, 2000, 5000, 10000]
    for n in sizes:
        yield "recompute", gen.recompute(max(2, round(n / 2.67)), 1)
        if n <= 2000:
            yield "tree", gen.tree(n, 1)
            yield "adversary", gen.adversary(n, 1)
            yield "grid", gen.grid(max(1, n // 50), 50, 1) if n >= 100 else gen.grid(5, n // 5, 1)


def shift_row(part: str, family: str, inst, time_limit: float) -> dict:
    g = inst.graph
    start = best_start(inst)
    t = time.perf_counter()
    state, converged = shift_order(g, start, inst.objective, time_limit=time_limit)
    elapsed = time.perf_counter() - t
    return {"part": part, "family": family, "instance": inst.name, "ops": g.n,
            "start_objective": order_objective(g, start, inst.objective),
            "shift": order_objective(g, state.order, inst.objective), "optimum": "", "gap": "",
            "moves": state.moves, "time_s": round(elapsed, 3),
            "ms_per_move": round(1000 * elapsed / state.moves, 3) if state.moves else "",
            "converged": converged}


def main(argv: list[str] | None = None) -> int:
    quick = "--quick" in (sys.argv[1:] if argv is None else argv)
    rows = []
    for family, inst in small_set():
        row = shift_row("optimum", family, inst, 20)
        exact = solve(inst, "cpsat", time_limit=20)
        if exact.status.value == "optimal":
            row["optimum"] = exact.objective
            row["gap"] = round((row["shift"] - exact.objective) / exact.objective, 4)
        rows.append(row)
        print(row, flush=True)
    for family, inst in scaling_set(quick):
        row = shift_row("scaling", family, inst, 60)
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

"""Fusion benchmark: the seed's two ILP forms, the `strong` solver and the heuristics, side by side.

Three tables, each written as CSV and Markdown under results/:

- `fusion_benchmark`: random programs `problems.fusion_gen.random_program(n, seed)` for n in
  --sizes (25 -> 400) and --seeds; exact solvers `ilp` (optimised form, HiGHS), `ilp-unopt`
  (unoptimised form, HiGHS), `cpsat` (optimised form on CP-SAT) and `strong`, each with
  --time-limit seconds on one thread; heuristics greedy, typed, stream, none. `gap_to_best`:
  (objective - best objective any solver found) / best; `bound_gap`: an exact solver's own
  (objective - proven bound) / objective.
- `fusion_targets` (--targets): `strong` alone on 10 seeds at 100 bindings (target: optimum proven
  within the time limit on >= 80 %) and at 200 bindings (target: proven gap <= 10 %); sizes via
  --target-sizes. The compiled kernels are warmed up first, untimed, as a batch does.
- `fusion_overrun` (--overrun): every solver through the harness (solve + independent
  verification: checker, bound, metrics) on programs of --overrun-sizes bindings with a short time
  limit; `overrun_s` = wall time - time limit.

The default time limit is the issue's 60 s; on a busy machine run shorter (`--time-limit 20`) and
say so. Timings are wall-clock and noisy when other processes share the cores.

Run: .venv/bin/python benchmarks/fusion.py [--time-limit 60] [--sizes 25 50 100 200 400]
     [--seeds 1 2] [--targets] [--overrun]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tensorplan.harness import registry  # noqa: E402
from tensorplan.harness.run import METRIC, solve, warm_up  # noqa: E402
from tensorplan.problems.core import (  # noqa: E402
    Options,
    Status,
    write_csv_atomic,
    write_text_atomic,
)
from tensorplan.problems.fusion_gen import random_program  # noqa: E402

SIZES = (25, 50, 100, 200, 400)
SEEDS = (1, 2)
EXACT = ("ilp", "ilp-unopt", "cpsat", "strong")
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


def _bound_gap(obj: float | None, bound: float | None) -> float | str:
    if obj is None or bound is None:
        return ""
    return round((obj - bound) / obj, 4) if obj else 0.0


def rows_for(n: int, seed: int, time_limit: float, solvers=EXACT + HEURISTICS) -> list[dict]:
    inst = random_program(n, seed)
    results = {
        s: solve(inst, s, Options(time_limit=time_limit, seed=0, threads=1)) for s in solvers
    }
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
                "bound_gap": "" if s in HEURISTICS else _bound_gap(obj, r.bound),
                "loops": r.stats.get(METRIC + "loops", ""),
            }
        )
    return rows


def write(rows: list[dict], fields: list[str], path: Path, title: str) -> None:
    """CSV at `path`, and the same table as Markdown next to it."""
    write_csv_atomic(path, rows, fields)
    lines = [f"# {title}", "", "| " + " | ".join(fields) + " |", "|" + "---|" * len(fields)]
    lines += ["| " + " | ".join(str(r.get(k, "")) for k in fields) + " |" for r in rows]
    write_text_atomic(path.with_suffix(".md"), "\n".join(lines) + "\n")


def targets(time_limit: float, seeds: range, sizes: tuple[int, ...] = (100, 200)) -> list[dict]:
    """`strong` on 10 seeds at 100 and 200 bindings, with the issue's two targets."""
    warm_up("fusion", ["strong"])  # compiled kernels built or loaded once, untimed (as a batch)
    rows = []
    for n in sizes:
        for seed in seeds:
            r = solve(random_program(n, seed), "strong", Options(time_limit=time_limit, seed=0))
            gap = _bound_gap(r.objective, r.bound)
            rows.append(
                {
                    "bindings": n,
                    "seed": seed,
                    "status": str(r.status),
                    "objective": r.objective,
                    "bound": r.bound,
                    "bound_gap": gap,
                    "time_s": round(r.runtime_s, 2),
                    "met": int(
                        r.status is Status.OPTIMAL
                        if n == 100
                        else isinstance(gap, float) and gap <= 0.10
                    ),
                }
            )
            print(f"targets n={n} seed={seed}: {rows[-1]['status']} {gap}", file=sys.stderr)
    return rows


def overrun(sizes: list[int], time_limit: float) -> list[dict]:
    """Wall time of each solver's harness solve (with verification) beyond its time limit."""
    rows = []
    for n in sizes:
        inst = random_program(n, 1)
        inst.graph  # noqa: B018 - built once, as a loaded instance would be before solving
        for s in registry.solvers("fusion"):
            start = time.perf_counter()
            r = solve(inst, s, Options(time_limit=time_limit, seed=0))
            wall = time.perf_counter() - start
            rows.append(
                {
                    "bindings": n,
                    "solver": s,
                    "time_limit": time_limit,
                    "status": str(r.status),
                    "wall_s": round(wall, 2),
                    "verify_s": r.stats.get("verify_s", ""),
                    "overrun_s": round(wall - time_limit, 2),
                }
            )
            print(f"overrun n={n} {s}: {rows[-1]['overrun_s']}", file=sys.stderr)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--sizes", type=int, nargs="*", default=list(SIZES))
    ap.add_argument("--seeds", type=int, nargs="*", default=list(SEEDS))
    ap.add_argument("--targets", action="store_true", help="also the 10-seed targets of strong")
    ap.add_argument("--target-sizes", type=int, nargs="*", default=[100, 200])
    ap.add_argument("--overrun", action="store_true", help="also the time-limit overrun table")
    ap.add_argument("--overrun-sizes", type=int, nargs="*", default=[300, 500])
    ap.add_argument("--overrun-limit", type=float, default=2.0)
    ap.add_argument("--skip-table", action="store_true", help="only --targets / --overrun")
    ap.add_argument("--out", type=Path, default=ROOT / "results")
    args = ap.parse_args(argv)
    tl = args.time_limit
    if not args.skip_table:
        rows = []
        for n in args.sizes:
            for seed in args.seeds:
                rows += rows_for(n, seed, tl)
                print(f"n={n} seed={seed} done", file=sys.stderr)
        write(rows, FIELDS, args.out / "fusion_benchmark.csv", f"Fusion benchmark ({tl:g} s)")
    if args.targets:
        rows = targets(tl, range(1, 11), tuple(args.target_sizes))
        write(rows, list(rows[0]), args.out / "fusion_targets.csv", f"strong targets ({tl:g} s)")
    if args.overrun:
        rows = overrun(args.overrun_sizes, args.overrun_limit)
        write(rows, list(rows[0]), args.out / "fusion_overrun.csv", "Fusion time-limit overrun")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

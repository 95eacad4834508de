"""Layout time limits: wall time of every solver, set-up and the harness's verification included.

The time limit is the user's budget for the whole solve. For each instance of the shipped set and
of generated instances ten times larger (and the 200k-element random graph of issue 15), every
solver runs through `harness.run.solve` with `--time-limit` seconds; the wall time around the call
(instance already built) is compared with the limit. Writes results/layout_time_limit.csv and
prints the worst overrun. Timings are noisy on a shared machine.

    .venv/bin/python benchmarks/layout_time_limit.py [--time-limit 2] [--only NAME-SUBSTRING]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from tensorplan.harness.run import solve
from tensorplan.problems import layout_gen as gen
from tensorplan.problems.core import Options, write_csv_atomic

ROOT = Path(__file__).resolve().parent.parent
SOLVERS = ["greedy0", "local", "mip", "mip-cbc", "cpsat"]


def instances():
    """(family, factory): the shipped set, then the same generators at ten times the size."""
    for inst in gen.shipped():
        yield "shipped", lambda inst=inst: inst
    for ops, size, seed, tiles in (
        (12, 12, 1, 8),
        (30, 24, 2, 8),
        (60, 64, 3, 8),
        (150, 240, 4, 16),
    ):
        yield (
            "10x",
            lambda a=(10 * ops, 10 * size, seed, tiles): gen.random_graph(
                a[0], a[1], seed=a[2], tiles=a[3]
            ),
        )
    yield "10x", lambda: gen.scaled_exercise(1_000_000, seed=5, labels=16)
    yield "issue-15", lambda: gen.random_graph(30, 200_000, seed=7, tiles=8)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=2.0)
    ap.add_argument("--only", default="")
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "layout_time_limit.csv")
    args = ap.parse_args(argv)
    rows = []
    for family, make in instances():
        inst = make()
        if args.only not in inst.name:
            continue
        g = inst.graph
        for s in SOLVERS:
            t0 = time.perf_counter()
            r = solve(inst, s, Options(time_limit=args.time_limit))
            wall = time.perf_counter() - t0
            rows.append(
                {
                    "family": family,
                    "instance": inst.name,
                    "sink_elements": g.num_sink_elements,
                    "root_elements": g.num_roots,
                    "solver": s,
                    "status": str(r.status),
                    "objective": r.objective,
                    "time_limit": args.time_limit,
                    "wall_s": round(wall, 3),
                    "overrun_s": round(wall - args.time_limit, 3),
                    "message": r.message[:80],
                }
            )
            print(",".join(str(v) for v in rows[-1].values()), flush=True)
    write_csv_atomic(args.out, rows)
    worst = max(rows, key=lambda r: r["overrun_s"])
    print(f"worst overrun: {worst['overrun_s']} s ({worst['solver']} on {worst['instance']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

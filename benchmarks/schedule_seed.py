"""`shift` against the seed's own procedure (heuristics/schedule_reference.py), and against
poprithms' C++ shift when given a checkout, per family and size, sum-liveness, one thread.

    .venv/bin/python -m benchmarks.schedule_seed [--sizes 100,1000,5000] [--limit 10] [--seeds 1]
        [--poprithms PATH]

Per family (tree, grid with sizes 1-19, adversary, recompute, layered) and size: the seed's
procedure (greedy Kahn start, its ladder; compiled, run to convergence) with its wall time;
`shift` given that same time (its `runtime_s`: the harness's verification after it is not
counted, as the reference has none), and given `--limit` seconds; the bound (the higher of
`problems.schedule.lower_bound` and the bound `shift` reports at `--limit`) and the proven
gap of shift's best, (objective - bound) / bound. `--seeds N`: instances of seeds 1..N per
family and size; a summary per family and size follows the table (how many `shift` matched
or beat, the mean and worst difference, the slowest time ratio). Kernels are loaded before
any timing. Writes results/schedule_seed.csv and .md (`--out`).

`--poprithms PATH`: also poprithms' own shift, the seed's C++ implementation, built from the
checkout at PATH (`benchmarks/poprithms.py`) and timed as it times itself, then `shift` given
that time; its summary follows. Our reference is the seed's procedure re-implemented on our
kernels, with poprithms' visiting order (`schedule_reference.cxx_shuffle`): it ends at
poprithms' schedule exactly, in a quarter to nine tenths of its time, so "shift at seed's time"
is the harder test of the two.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks import poprithms
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


def row(
    family: str, inst: ScheduleInstance, limit: float, peer: Path | None = None
) -> dict[str, object]:
    """The reference, then shift at the reference's time and at `limit`; with `peer` (the
    poprithms driver's binary) poprithms too, and shift at its time."""
    began = time.perf_counter()
    state, converged = seed_shift(inst.graph, time_limit=600.0)
    ref_s = time.perf_counter() - began
    ref = order_objective(inst.graph, state.arrays.order.tolist(), "sum_liveness")
    same = solve(inst, "shift", Options(time_limit=ref_s))
    longer = solve(inst, "shift", Options(time_limit=limit))
    bound = max(lower_bound(inst), int(longer.bound or 0))  # the hull's, or shift's at --limit
    best = min(v for v in (same.objective, longer.objective) if v is not None)
    versus: dict[str, object] = {}
    if peer is not None:
        order, peer_s = poprithms.run(peer, inst.graph)
        peer_obj = order_objective(inst.graph, order, "sum_liveness")
        at_peer = solve(inst, "shift", Options(time_limit=peer_s))
        versus = {
            "poprithms": peer_obj,
            "poprithms s": round(peer_s, 5),
            "shift at poprithms' time": at_peer.objective,
            "shift s (poprithms' time)": round(at_peer.runtime_s, 5),
            "vs poprithms": f"{(int(at_peer.objective or 0) - peer_obj) / peer_obj:+.3%}",
        }
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
        "vs seed": f"{(int(same.objective or 0) - ref) / ref:+.3%}",
        "bound": bound,
        "proven gap": f"{(best - bound) / bound:.1%}" if bound else "-",
        **versus,
    }


def summary(
    rows: list[dict[str, object]],
    name: str = "seed",
    columns: tuple[str, str, str, str] = (
        "seed procedure",
        "shift at seed's time",
        "seed s",
        "shift s",
    ),
) -> str:
    """Per family and size: `shift` at the reference's time against the reference (`name`;
    `columns`: the rows' reference objective, shift's, the reference's seconds and shift's).
    Counted and averaged from the objectives, not from the rounded percentages."""
    theirs, ours, theirs_s, ours_s = columns
    lines = [
        f"| family | ops | instances | shift <= {name} | mean vs {name} | worst vs {name} | "
        f"slowest shift s / {name} s |",
        "|---|---|---|---|---|---|---|",
    ]
    groups: dict[tuple[object, object], list[dict[str, object]]] = {}
    for r in rows:
        groups.setdefault((r["family"], r["ops"]), []).append(r)
    for (family, ops), rs in groups.items():
        pairs = [(int(str(r[ours])), int(str(r[theirs]))) for r in rs]
        diffs = [100 * (a - b) / b for a, b in pairs]
        ratio = max(float(str(r[ours_s])) / max(float(str(r[theirs_s])), 1e-9) for r in rs)
        lines.append(
            f"| {family} | {ops} | {len(rs)} | {sum(a <= b for a, b in pairs)} | "
            f"{sum(diffs) / len(diffs):+.2f}% | {max(diffs):+.3f}% | {ratio:.2f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--sizes", default="100,1000,5000")
    ap.add_argument("--limit", type=float, default=10.0)
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--out", default="schedule_seed", help="results/OUT.csv and .md")
    ap.add_argument("--poprithms", type=Path, help="a poprithms checkout: run its shift too")
    args = ap.parse_args(argv)
    peer = None if args.poprithms is None else poprithms.build(args.poprithms)
    warm_kernels()
    warm_once("schedule", "shift")
    rows = []
    for n in (int(s) for s in args.sizes.split(",")):
        for family, make in FAMILIES.items():
            for seed in range(1, args.seeds + 1):
                rows.append(row(family, make(n, seed), args.limit, peer))
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
        + "\n"
        + (
            "\n"
            + summary(
                rows,
                "poprithms",
                (
                    "poprithms",
                    "shift at poprithms' time",
                    "poprithms s",
                    "shift s (poprithms' time)",
                ),
            )
            + "\n"
            if peer is not None
            else ""
        ),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

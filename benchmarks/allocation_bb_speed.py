"""`bb`'s speed on the tight set and MiniMalloc's challenging set A–K, for before/after tables.

    .venv/bin/python benchmarks/allocation_bb_speed.py --label new [--challenging DIR]
        [--count 20] [--time-limit 30] [--seed 0] [--only J] [--out results/allocation_bb_speed.csv]
    PYTHONPATH=/path/to/dir-holding-an-old-tensorplan .venv/bin/python \\
        benchmarks/allocation_bb_speed.py --label old ...

One thread, one process; kernels warmed up first (compile time is not the search's). Per
instance: status, peak, bound, wall time, search nodes and nodes per second. `DIR` holds
MiniMalloc's `benchmarks/challenging/*.csv` (fetch the repository google/minimalloc). Rows are
appended to `--out` under `--label`, so two checkouts measured in turn give one table
(`--table` prints it as markdown: one row per instance, the labels side by side).
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def instances(count: int, challenging: Path | None) -> list[Any]:
    """The tight set's first `count` instances, then A–K when their folder is given."""
    from tensorplan.harness.importers import minimalloc_csv
    from tensorplan.problems.allocation import parse_instance
    from tensorplan.problems.allocation_gen import tight_family

    sizes = (150, 200, 250, 300, 350, 400, 450, 500)
    out = [tight_family(sizes[s % len(sizes)], s)[0] for s in range(count)]
    for path in sorted(challenging.glob("*.csv")) if challenging else []:
        out.append(parse_instance(minimalloc_csv(path)))
    return out


def measure(inst: Any, limit: float, seed: int = 0) -> dict[str, Any]:
    """One `bb` solve of `inst` with `seed`."""
    from tensorplan.harness.run import solve
    from tensorplan.problems.core import Options

    began = time.perf_counter()
    res = solve(inst, "bb", Options(time_limit=limit, threads=1, seed=seed))
    wall = time.perf_counter() - began
    nodes = int(res.stats.get("nodes", 0)) + int(res.stats.get("reuse_nodes", 0))
    nodes += int(res.stats.get("window_nodes", 0))
    return {
        "instance": inst.name,
        "buffers": len(inst.buffers),
        "status": str(res.status),
        "peak": res.objective,
        "bound": res.bound,
        "wall_s": round(wall, 3),
        "nodes": nodes,
        "nodes_per_s": round(nodes / max(wall, 1e-9)),
    }


def table(path: Path) -> str:
    """The rows of `path` as markdown, one line per instance, each label's time and nodes."""
    rows = list(csv.DictReader(path.open()))
    labels = list(dict.fromkeys(r["label"] for r in rows))
    by = {(r["label"], r["instance"]): r for r in rows}
    names = list(dict.fromkeys(r["instance"] for r in rows))
    head = ["instance", "buffers", "status"]
    for lab in labels:
        head += [f"{lab} s", f"{lab} nodes"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name in names:
        first = next(by[(lab, name)] for lab in labels if (lab, name) in by)
        cells = [name, first["buffers"], first["status"]]
        for lab in labels:
            r = by.get((lab, name))
            cells += [r["wall_s"], r["nodes"]] if r else ["", ""]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--label", default="current")
    ap.add_argument("--count", type=int, default=20)
    ap.add_argument("--time-limit", type=float, default=30.0)
    ap.add_argument("--challenging", type=Path, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", default="", help="only instances whose name contains this")
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "allocation_bb_speed.csv")
    ap.add_argument("--table", action="store_true", help="print --out as markdown and stop")
    args = ap.parse_args(argv)
    if args.table:
        print(table(args.out))
        return 0
    from tensorplan.models.allocation_bb import kernel_ready

    kernel_ready(time.perf_counter() + 3600)  # load or compile the kernel outside the timings
    fresh = not args.out.exists()
    with args.out.open("a", newline="") as fh:
        w = csv.writer(fh)
        fields = ["label", "instance", "buffers", "status", "peak", "bound", "wall_s", "nodes"]
        fields.append("nodes_per_s")
        if fresh:
            w.writerow(fields)
        for inst in instances(args.count, args.challenging):
            if args.only not in str(inst.name):
                continue
            row = {"label": args.label, **measure(inst, args.time_limit, args.seed)}
            w.writerow([row[f] for f in fields])
            fh.flush()
            print(*(row[f] for f in fields), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Fast allocation heuristics beside OmniMalloc's fast allocators, on the same instances.

    .venv/bin/python benchmarks/allocation_fast.py [--time-limit 1] [--sizes 200,1000,5000]
        [--seed 0] [--only fast,multistart] [--challenging /tmp/challenging]
        [--out results/allocation_fast_runs]

Instances: MiniMalloc's challenging set A-K (`--challenging`, CSVs `{A..K}.1048576.csv`, skipped
when absent), OmniMalloc's own generators (`omnimalloc.benchmark.sources`, scalar time only,
seed 42 + `--seed`) and our `allocation_gen` families (seed `--seed`), at `--sizes` buffers.
Solvers, one thread each: ours (`ffd`, `multistart`, `bb-lds`, `fast`) within `--time-limit`,
and OmniMalloc's `greedy_by_size`, `best_fit`, `omni` and `telamalloc` (the last with the same
limit). Every packing, ours or theirs, is re-checked by our checker (`harness.run.solve`
verifies each result, and `run` checks it again).

Writes `--out`.csv (one row per run) and `--out`.md (peak / lower bound per instance and solver,
and where the default fast heuristic is behind the best peer). `--only` re-runs just those
solvers and keeps the other rows of an existing CSV (peers need not be re-run).
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tensorplan.harness.importers import minimalloc_csv
from tensorplan.harness.run import solve, warm_up
from tensorplan.problems.allocation import (
    AllocationInstance,
    Buffer,
    check,
    lower_bound,
    parse_instance,
    peak,
)
from tensorplan.problems.allocation_gen import (
    layered_family,
    mixed_family,
    pow2_family,
    random_family,
)
from tensorplan.problems.core import Options, write_csv_atomic, write_text_atomic

ROOT = Path(__file__).resolve().parents[1]
OURS = ("ffd", "multistart", "bb-lds", "fast")
PEERS = {
    "om-greedy_by_size": "omnimalloc-greedy",
    "om-best_fit": "omnimalloc-best",
    "om-omni": "omnimalloc-omni",
    "om-telamalloc": "omnimalloc-tela",
}
DEFAULT = "fast"
"""The default fast heuristic the target is stated on."""


def challenging(folder: Path) -> Iterator[AllocationInstance]:
    for letter in "ABCDEFGHIJK":
        path = folder / f"{letter}.1048576.csv"
        if path.exists():
            inst = parse_instance(minimalloc_csv(path))
            yield AllocationInstance(inst.buffers, inst.alignment, None, f"minimalloc-{letter}")


def omni_sources(n: int, seed: int = 42) -> Iterator[tuple[str, Callable[[], Any]]]:
    """OmniMalloc's scalar-time generators at n buffers (its defaults otherwise; its default
    seed is 42)."""
    from omnimalloc.benchmark import sources as src

    yield "om-random", lambda: src.RandomSource(num_allocations=n, seed=seed)
    yield (
        "om-uniform",
        lambda: src.UniformSource(num_allocations=n, time_max=max(100, n // 2), seed=seed),
    )
    yield (
        "om-pow2",
        lambda: src.PowerOf2Source(num_allocations=n, time_max=max(100, n // 2), seed=seed),
    )
    yield "om-contention", lambda: src.HighContentionSource(num_allocations=n, seed=seed)
    yield "om-sequential", lambda: src.SequentialSource(num_allocations=n, seed=seed)
    yield (
        "om-pinwheel",
        lambda: src.PinwheelSource(num_allocations=n + 1, seed=seed),
    )  # 4 k + 1 only
    yield "om-tiling", lambda: src.TilingSource(num_allocations=n, seed=seed)
    yield "om-skewed", lambda: src.SkewedSource(num_allocations=n, seed=seed)


def from_omnimalloc(name: str, allocs: Any) -> AllocationInstance | None:
    """Their half-open [start, end) lifetimes as ours [start, end - 1]; None for vector time."""
    bufs = []
    for k, a in enumerate(allocs):
        if not isinstance(a.start, int) or not isinstance(a.end, int) or a.end <= a.start:
            return None
        bufs.append(Buffer(str(k), int(a.size), a.start, a.end - 1))
    return AllocationInstance(tuple(bufs), name=name)


def instances(sizes: list[int], folder: Path, seed: int = 0) -> Iterator[AllocationInstance]:
    """A-K, then per size: OmniMalloc's generators (seed 42 + `seed`) and our families."""
    yield from challenging(folder)
    for n in sizes:
        for label, make in omni_sources(n, 42 + seed):
            try:
                inst = from_omnimalloc(f"{label}-{n}-s{42 + seed}", make().get_allocations())
            except (ValueError, TypeError) as err:  # a generator refusing this size
                print(f"skip {label}-{n}: {err}", file=sys.stderr)
                continue
            if inst is not None:
                yield inst
        yield random_family(n, seed)
        yield mixed_family(n, seed)
        yield pow2_family(n, seed)
        yield layered_family(max(4, n // 40), seed)


def run(inst: AllocationInstance, label: str, limit: float) -> dict[str, Any]:
    name = PEERS.get(label, label)
    r = solve(inst, name, Options(time_limit=limit, seed=0, threads=1))
    ok = r.solution is not None and not check(inst, r.solution)
    return {
        "instance": inst.name,
        "buffers": len(inst.buffers),
        "lower_bound": lower_bound(inst),
        "solver": label,
        "status": str(r.status),
        "peak": peak(inst, r.solution) if ok and r.solution is not None else None,
        "time_s": round(r.runtime_s, 4),
        "best_of": r.stats.get("best_of", ""),
    }


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=1.0)
    ap.add_argument("--sizes", default="200,1000,5000")
    ap.add_argument("--only", default="", help="comma-separated solvers to (re-)run")
    ap.add_argument("--seed", type=int, default=0, help="generator seed (offset)")
    ap.add_argument("--challenging", type=Path, default=Path("/tmp/challenging"))
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "allocation_fast_runs")
    args = ap.parse_args(argv)
    labels = [*OURS, *PEERS]
    only = [x for x in args.only.split(",") if x] or labels
    csv_path = args.out.with_suffix(".csv")
    kept: list[dict[str, Any]] = []
    if args.only and csv_path.exists():
        with csv_path.open() as f:
            kept = [row for row in csv.DictReader(f) if row["solver"] not in only]
    # compile or load every kernel first, hooks included (as `tensorplan warm` does)
    warm_up("allocation", [PEERS.get(label, label) for label in ("bb-lds", *only)], hooks=True)
    rows = []
    for inst in instances([int(x) for x in args.sizes.split(",")], args.challenging, args.seed):
        for label in only:
            row = run(inst, label, args.time_limit)
            rows.append(row)
            ratio = "-" if row["peak"] is None else f"{row['peak'] / row['lower_bound']:.4f}"
            print(f"{inst.name:22} {label:18} {ratio:>7} {row['time_s']:7.3f}s", flush=True)
    rows = kept + rows
    write_csv_atomic(csv_path, rows)
    md = table(rows, args.time_limit)
    write_text_atomic(args.out.with_suffix(".md"), md + "\n")
    print(md)
    return 0


def table(rows: list[dict[str, Any]], limit: float) -> str:
    """Peak / lower bound per instance (columns: solvers), then the losses of `DEFAULT`."""
    labels = [x for x in [*OURS, *PEERS] if any(r["solver"] == x for r in rows)]
    by: dict[str, dict[str, dict[str, Any]]] = {}
    for r in rows:
        by.setdefault(str(r["instance"]), {})[str(r["solver"])] = r

    def ratio(r: dict[str, Any] | None) -> float | None:
        if r is None or r["peak"] in (None, ""):
            return None
        return int(r["peak"]) / int(r["lower_bound"])

    out = [
        f"Peak / max-load lower bound, one thread, time limit {limit:g} s "
        "(ours and telamalloc); the best of each row in bold.",
        "",
        "| instance | n | " + " | ".join(labels) + " |",
        "|---|---|" + "---|" * len(labels),
    ]
    behind = []
    for name, cells in by.items():
        vals = {x: ratio(cells.get(x)) for x in labels}
        best = min((v for v in vals.values() if v is not None), default=None)
        shown = [
            "-" if v is None else (f"**{v:.4f}**" if v == best else f"{v:.4f}")
            for v in vals.values()
        ]
        n = next(iter(cells.values()))["buffers"]
        out.append(f"| {name} | {n} | " + " | ".join(shown) + " |")
        peers = [v for x, v in vals.items() if x in PEERS and v is not None]
        mine = vals.get(DEFAULT)
        if mine is not None and peers and mine > min(peers) + 1e-12:
            behind.append(f"{name}: {DEFAULT} {mine:.4f} > best peer {min(peers):.4f}")
    out += ["", "Mean time (s) per solver:", ""]
    for x in labels:
        times = [float(r["time_s"]) for r in rows if r["solver"] == x]
        out.append(f"- {x}: {sum(times) / len(times):.3f} (max {max(times):.3f})")
    out += ["", f"Instances where `{DEFAULT}` is behind OmniMalloc's best: {len(behind)}", ""]
    out += [f"- {b}" for b in behind]
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

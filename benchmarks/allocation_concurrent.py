"""Concurrent lifetimes side by side: `bb` and `fast` against OmniMalloc on vector-clock sources.

    .venv/bin/python -m benchmarks.allocation_concurrent --part 0/2   # and 1/2, in parallel
    .venv/bin/python -m benchmarks.allocation_concurrent --table      # merge into results/

Instances: OmniMalloc's vector-clock generators (`omnimalloc.benchmark.sources`): concurrent
tiling (2 and 4 threads; a perfect packing, optimum = its capacity; also shuffled), every sync
pattern of
`SyncPatternSource` (4 threads) and the 2+2 obstructions (`TwoPlusTwoSource`), plus our
`concurrent_family`, at `--sizes` buffers. Each becomes our instance through `from_clocks` (the
same conversion as `tensorplan import omnimalloc`).

Solvers, one thread each, `--limit` s: ours through the front door (`harness.run.solve`, every
packing re-checked by our checker); OmniMalloc's allocators that take vector clocks, on its own
allocations (`greedy_by_size`, `best_fit`, `omni`: the best of the three is "OM best fast", its
time their sum; `simulated_annealing` and `tabu_search` with the limit as their timeout), their
packings mapped back and checked by our checker against the conflict pairs. OmniMalloc's
`supermalloc` and `telamalloc` refuse vector clocks ("requires scalar (interval) lifetimes"), and
none of these sources is an interval order (`omnimalloc.analysis.try_linearize` gives None on
every one), so they cannot run here.

Denominator: the known optimum (concurrent tiling) when there is one, else the best proven lower
bound (the clique bound or `bb`'s).
"""

from __future__ import annotations

import argparse
import csv
import random
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.allocation_side_by_side import FIELDS as SIDE_FIELDS
from benchmarks.allocation_side_by_side import run
from tensorplan.harness.run import warm_up
from tensorplan.problems.allocation import (
    AllocationInstance,
    AllocationSolution,
    Buffer,
    check,
    clique_bound,
    peak,
)
from tensorplan.problems.allocation_conflicts import from_clocks
from tensorplan.problems.allocation_gen import concurrent_family
from tensorplan.problems.core import write_csv_atomic, write_text_atomic

ROOT = Path(__file__).resolve().parents[1]
OURS = ("bb", "fast")
COLUMNS = ("bb", "fast", "om-fast", "om-anneal", "om-tabu")
FIELDS = (*SIDE_FIELDS[:3], "pairs", *SIDE_FIELDS[3:])


def sources(n: int, seed: int) -> Iterator[tuple[str, Any, int | None]]:
    """(label, OmniMalloc source, known optimum) for every vector-clock source at n buffers.
    Concurrent tiling also comes shuffled (`-shuf`): it lists its tiles in the order it cut
    them, so a first fit in input order rebuilds the perfect packing; shuffled, it does not."""
    from omnimalloc.benchmark import sources as src

    for threads in (2, 4):
        tiling = src.ConcurrentTilingSource(n, num_threads=threads, seed=seed)
        yield f"om-ctiling{threads}", tiling, 1 << 20
        yield f"om-ctiling{threads}-shuf", tiling, 1 << 20
    for pattern in src.SyncPattern:
        yield f"om-sync-{pattern.value}", src.SyncPatternSource(n, pattern=pattern, seed=seed), None
    yield "om-2plus2", src.TwoPlusTwoSource(n, seed=seed), None


def shuffled(allocs: Any, seed: int) -> tuple[Any, ...]:
    """The same allocations in a seeded random order, renumbered 0..n-1."""
    import omnimalloc as om

    perm = list(range(len(allocs)))
    random.Random(12345 + seed).shuffle(perm)
    return tuple(
        om.Allocation(k, allocs[j].size, allocs[j].start, allocs[j].end) for k, j in enumerate(perm)
    )


def to_instance(name: str, allocs: Any) -> AllocationInstance:
    """OmniMalloc's allocations (any clocks) as our instance: buffer k is allocation k."""
    dims = [len(a.start) if isinstance(a.start, tuple) else 1 for a in allocs]
    d = max(dims)

    def clock(t: Any) -> tuple[int, ...]:
        return tuple(t) if isinstance(t, tuple) else (t,) * d

    starts = np.array([clock(a.start) for a in allocs], dtype=np.int64)
    ends = np.array([clock(a.end) for a in allocs], dtype=np.int64)
    bufs = tuple(Buffer(str(k), int(a.size), 0, 0) for k, a in enumerate(allocs))
    return AllocationInstance(bufs, name=name, conflicts=from_clocks(starts, ends))


def instances(sizes: list[int], seed: int) -> Iterator[tuple[AllocationInstance, Any, int | None]]:
    """(instance, OmniMalloc allocations or None, known optimum or None)."""
    for n in sizes:
        for label, source, known in sources(n, seed):
            try:
                allocs = source.get_allocations()
            except (ValueError, TypeError) as err:
                print(f"skip {label}-{n}: {err}", file=sys.stderr)
                continue
            if label.endswith("-shuf"):
                allocs = shuffled(allocs, seed)
            yield to_instance(f"{label}-{n}-s{seed}", allocs), allocs, known
        yield concurrent_family(n, seed), None, None


def peer(inst: AllocationInstance, allocs: Any, name: str, limit: float) -> dict[str, Any]:
    """One OmniMalloc allocator on its own allocations (one thread), checked by our checker."""
    import omnimalloc as om
    from omnimalloc import allocators as oa

    om.set_max_threads(1)
    made: dict[str, Callable[[], Any]] = {
        "greedy_by_size": oa.GreedyBySizeAllocator,
        "best_fit": oa.BestFitAllocator,
        "omni": oa.OmniAllocator,
        "om-anneal": lambda: oa.SimulatedAnnealingAllocator(timeout=limit, seed=0),
        "om-tabu": lambda: oa.TabuSearchAllocator(timeout=limit, seed=0),
    }
    began = time.perf_counter()
    proven = False
    allocator = made[name]()
    if hasattr(allocator, "solve"):
        out = allocator.solve(tuple(allocs))
        placed, proven = out.allocations, bool(out.proved_optimal)
    else:
        placed = om.allocate(tuple(allocs), allocator)
    took = time.perf_counter() - began
    offsets = [0] * len(inst.buffers)
    index = {a.id: k for k, a in enumerate(allocs)}
    for x in placed:
        offsets[index[x.id]] = int(x.offset)
    sol = AllocationSolution(tuple(offsets))
    bad = check(inst, sol)
    return {
        "solver": name,
        "status": "optimal" if proven else "feasible" if not bad else "error",
        "peak": None if bad else peak(inst, sol),
        "bound": None,
        "proven": proven and not bad,
        "time_s": round(took, 4),
        "best_of": "",
        "message": bad[0][:120] if bad else "",
    }


def solve_all(inst: AllocationInstance, allocs: Any, limit: float) -> list[dict[str, Any]]:
    rows = [run(inst, name, limit) for name in OURS]  # as side by side: one solve, checked
    if allocs is None:  # our own family has no clocks to hand to OmniMalloc
        return rows
    quick = [peer(inst, allocs, name, limit) for name in ("greedy_by_size", "best_fit", "omni")]
    done = [r for r in quick if r["peak"] is not None]
    best = min(done, key=lambda r: r["peak"]) if done else quick[0]
    total = round(sum(r["time_s"] for r in quick), 4)
    rows.append({**best, "solver": "om-fast", "time_s": total, "best_of": best["solver"]})
    rows += [peer(inst, allocs, name, limit) for name in ("om-anneal", "om-tabu")]
    return rows


def part(which: str, args: argparse.Namespace) -> None:
    i, k = (int(x) for x in which.split("/"))
    args.work.mkdir(parents=True, exist_ok=True)
    path = args.work / f"part-{i}.csv"
    # our kernels compiled or loaded first (as `tensorplan warm` does): in a fresh clone a
    # first `bb` solve would otherwise spend its limit compiling and lose proofs
    warm_up("allocation", list(OURS), hooks=True)
    done = set()
    if path.exists():
        with path.open() as f:
            done = {r["instance"] for r in csv.DictReader(f)}  # resumed by name, any --sizes
    for index, (inst, allocs, known) in enumerate(instances(args.sizes, args.seed)):
        if index % k != i or inst.name in done:
            continue
        lower, _ = clique_bound(inst, 1.0)
        rows = solve_all(inst, allocs, args.limit)
        head = {
            "index": index,
            "instance": inst.name,
            "buffers": len(inst.buffers),
            "pairs": len(inst.conflicts or ()),
            "known_optimum": known,
            "lower_bound": lower,
        }
        new = not path.exists()
        with path.open("a", newline="") as f:
            w = csv.DictWriter(f, FIELDS)
            if new:
                w.writeheader()
            for r in rows:
                w.writerow({**head, **r})
        shown = ", ".join(f"{r['solver']} {r['peak']}" for r in rows)
        print(f"{inst.name}: lb {lower} | {shown}", flush=True)


def table(rows: list[dict[str, Any]], limit: float) -> str:
    by: dict[str, dict[str, dict[str, Any]]] = {}
    heads: dict[str, dict[str, Any]] = {}
    for row in rows:
        by.setdefault(row["instance"], {})[row["solver"]] = row
        heads[row["instance"]] = row
    lines = [
        f"# Concurrent lifetimes side by side ({limit:g} s, one thread)",
        "",
        "Made by `python -m benchmarks.allocation_concurrent` (see its docstring). Cells: peak /"
        " denominator (the known optimum, else the best proven lower bound), `*` proven optimal,"
        " then seconds. `-`: no valid packing.",
        "",
        "| instance | buffers | pairs | denominator | " + " | ".join(COLUMNS) + " |",
        "|---|---:|---:|---:|" + "---:|" * len(COLUMNS),
    ]
    summary: dict[str, list[float]] = {c: [] for c in COLUMNS}
    proved: dict[str, int] = dict.fromkeys(COLUMNS, 0)
    behind: list[str] = []  # up to 500 buffers: bb neither proven nor at the best peer's peak
    trailing: dict[str, list[str]] = {c: [] for c in OURS}  # any size: above the best peer
    for name, cells in by.items():
        h = heads[name]
        bounds = [int(h["lower_bound"])] + [
            int(float(c["bound"])) for c in cells.values() if c.get("bound") not in ("", None)
        ]
        denom = int(h["known_optimum"]) if h["known_optimum"] not in ("", None) else max(bounds)
        out = []
        for c in COLUMNS:
            r = cells.get(c)
            if r is None or r["peak"] in ("", None):
                out.append("-" if r is not None else "")
                continue
            ratio = int(r["peak"]) / denom
            summary[c].append(ratio)
            star = "*" if str(r["proven"]) == "True" else ""
            proved[c] += bool(star)
            out.append(f"{ratio:.4f}{star} ({float(r['time_s']):.2f})")
        peers = [
            int(cells[c]["peak"])
            for c in ("om-fast", "om-anneal", "om-tabu")
            if c in cells and cells[c]["peak"] not in ("", None)
        ]
        for c in OURS if peers else ():
            ex = cells.get(c)
            lost = ex is None or ex["peak"] in ("", None) or int(ex["peak"]) > min(peers)
            if not lost or (ex and str(ex["proven"]) == "True"):
                continue
            got = "none" if ex is None or ex["peak"] in ("", None) else int(ex["peak"]) / denom
            shown = got if isinstance(got, str) else f"{got:.4f}"
            trailing[c].append(f"{name} ({shown} against {min(peers) / denom:.4f})")
            if c == "bb" and int(h["buffers"]) <= 500:
                behind.append(name)
        lines.append(
            f"| {name} | {h['buffers']} | {h['pairs']} | {denom} | " + " | ".join(out) + " |"
        )
    lines += [
        "",
        "| solver | instances | mean ratio | worst | proven |",
        "|---|---:|---:|---:|---:|",
    ]
    for c in COLUMNS:
        v = summary[c]
        if v:
            lines.append(f"| {c} | {len(v)} | {sum(v) / len(v):.4f} | {max(v):.4f} | {proved[c]} |")
    lines += [
        "",
        "Instances of at most 500 buffers where `bb` neither proves optimality nor matches the "
        f"best OmniMalloc peak: {len(behind)}.",
    ]
    for c in OURS:
        lines.append(
            f"\nAbove the best OmniMalloc peak, `{c}` (any size): "
            + ("; ".join(trailing[c]) if trailing[c] else "none")
            + "."
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[200, 500])
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--limit", type=float, default=10.0)
    p.add_argument("--part", help="i/k: run every k-th instance from the i-th")
    p.add_argument("--table", action="store_true", help="merge the parts into --out")
    p.add_argument("--work", type=Path, default=Path("/tmp/tensorplan-concurrent"))
    p.add_argument("--out", type=Path, default=ROOT / "results" / "allocation_concurrent")
    args = p.parse_args(argv)
    if args.part:
        part(args.part, args)
    if args.table:
        rows: list[dict[str, Any]] = []
        for f in sorted(args.work.glob("part-*.csv")):
            with f.open() as fh:
                rows += list(csv.DictReader(fh))
        rows.sort(key=lambda r: (int(r["buffers"]), int(r["index"])))
        write_csv_atomic(args.out.with_suffix(".csv"), rows, FIELDS)
        write_text_atomic(args.out.with_suffix(".md"), table(rows, args.limit))
        print(args.out.with_suffix(".md"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Side by side on OmniMalloc's generators: `bb` and `fast` against OmniMalloc's allocators.

    .venv/bin/python -m benchmarks.allocation_side_by_side --part 0/2   # and 1/2, in parallel
    .venv/bin/python -m benchmarks.allocation_side_by_side --table      # merge into results/

Instances: every scalar-time source of `omnimalloc.benchmark.sources` (random, uniform, pow2,
contention, sequential, pinwheel, tiling, skewed; `allocation_fast.omni_sources`) at `--sizes`
buffers with seed `--seed` (pinwheel takes 4 k + 1 buffers: n + 1), pinwheel and tiling also at
1001 buffers with seeds 1-5 (the issue's target), and MiniMalloc's challenging A-K
(`--challenging`). The vector-clock sources (concurrent tiling, sync patterns, 2+2) have no
interval form and are left out.

Solvers, one thread each, every packing re-checked by our checker (`harness.run.solve`):
`bb` (exact, `--limit` s), `fast` (the default heuristic, `--fast-limit` s), OmniMalloc's best fast
allocator (the least peak of `greedy_by_size`, `best_fit` and `omni`; its time is the sum of
the three), `omnimalloc-tela` and `omnimalloc-super` (`--limit` s).

Denominator: the known optimum when the generator states one (pinwheel and tiling are perfect
packings: optimum = capacity), else the best lower bound (the max-load bound or `bb`'s bound),
which is an optimum too when some solver reaches it.

`--part i/k` runs every k-th instance from the i-th and appends its rows, instance by instance,
to `--work`/part-i.csv; `--table` merges every part CSV there into `--out`.csv and `--out`.md.
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks.allocation_fast import challenging, from_omnimalloc, omni_sources
from tensorplan.harness.run import solve, warm_up
from tensorplan.problems.allocation import AllocationInstance, check, lower_bound, peak
from tensorplan.problems.core import Options, Status, write_csv_atomic, write_text_atomic

ROOT = Path(__file__).resolve().parents[1]
FAST_PEERS = ("omnimalloc-greedy", "omnimalloc-best", "omnimalloc-omni")
COLUMNS = ("bb", "fast", "om-fast", "omnimalloc-tela", "omnimalloc-super")
HEAD = {
    "bb": "bb",
    "fast": "fast",
    "om-fast": "OM best fast",
    "omnimalloc-tela": "telamalloc",
    "omnimalloc-super": "supermalloc",
}
PERFECT = ("om-pinwheel", "om-tiling")
"""Generators whose instances are perfect packings of their capacity (OmniMalloc's default)."""
CAPACITY = 1 << 20
FIELDS = (
    "index",
    "instance",
    "buffers",
    "known_optimum",
    "lower_bound",
    "solver",
    "status",
    "peak",
    "bound",
    "proven",
    "time_s",
    "best_of",
    "message",
)


def instances(
    sizes: list[int], seed: int, folder: Path
) -> Iterator[tuple[AllocationInstance, int | None]]:
    """(instance, known optimum or None): the generators per size, the extra pinwheel and tiling
    seeds at 1001 buffers, then A-K."""
    from omnimalloc.benchmark import sources as src

    wanted: list[tuple[str, Any, int]] = []
    for n in sizes:
        wanted += [(label, make, seed) for label, make in omni_sources(n, seed)]
    for s in (1, 2, 3, 4, 5):
        wanted.append(("om-pinwheel", lambda s=s: src.PinwheelSource(1001, seed=s), s))
        wanted.append(("om-tiling", lambda s=s: src.TilingSource(1001, seed=s), s))
    seen = set()
    for label, make, s in wanted:
        try:
            allocs = make().get_allocations()
        except (ValueError, TypeError) as err:  # a generator refusing this size
            print(f"skip {label} seed {s}: {err}", file=sys.stderr)
            continue
        name = f"{label}-{len(allocs)}-s{s}"
        inst = from_omnimalloc(name, allocs)
        if inst is None or name in seen:
            continue
        seen.add(name)
        yield inst, CAPACITY if label in PERFECT else None
    for inst in challenging(folder):
        yield inst, None


def run(inst: AllocationInstance, name: str, limit: float) -> dict[str, Any]:
    r = solve(inst, name, Options(time_limit=limit, seed=0, threads=1))
    ok = r.solution is not None and not check(inst, r.solution)
    proven = r.status is Status.OPTIMAL or bool(r.stats.get("proved_optimal"))
    return {
        "solver": name,
        "status": str(r.status),
        "peak": peak(inst, r.solution) if ok and r.solution is not None else None,
        "bound": r.bound,
        "proven": proven,
        "time_s": round(r.runtime_s, 4),
        "best_of": "",
        "message": (r.message or "")[:120],
    }


def solve_all(inst: AllocationInstance, limit: float, fast_limit: float) -> list[dict[str, Any]]:
    rows = [run(inst, "bb", limit), run(inst, "fast", fast_limit)]
    quick = [run(inst, name, limit) for name in FAST_PEERS]
    done = [r for r in quick if r["peak"] is not None]
    best = min(done, key=lambda r: r["peak"]) if done else quick[0]
    rows.append(
        {
            **best,
            "solver": "om-fast",
            "time_s": round(sum(r["time_s"] for r in quick), 4),
            "best_of": best["solver"],
        }
    )
    rows += [run(inst, name, limit) for name in ("omnimalloc-tela", "omnimalloc-super")]
    return rows


def part(which: str, args: argparse.Namespace) -> None:
    i, k = (int(x) for x in which.split("/"))
    args.work.mkdir(parents=True, exist_ok=True)
    path = args.work / f"part-{i}.csv"
    # every kernel compiled or loaded first, hooks included (as `tensorplan warm` does): a
    # solver would otherwise skip a search whose compilation its limit cannot hold
    warm_up(
        "allocation", ["bb", "fast", *FAST_PEERS, "omnimalloc-tela", "omnimalloc-super"], hooks=True
    )
    sizes = [int(x) for x in args.sizes.split(",")]
    fresh = True
    for j, (inst, known) in enumerate(instances(sizes, args.seed, args.challenging)):
        if j % k != i:
            continue
        lb = lower_bound(inst)
        rows = []
        for r in solve_all(inst, args.limit, args.fast_limit):
            row = {"index": j, "instance": inst.name, "buffers": len(inst.buffers)}
            row |= {"known_optimum": known or "", "lower_bound": lb, **r}
            rows.append(row)
            ratio = "-" if r["peak"] is None else f"{r['peak'] / (known or lb):.4f}"
            print(f"{inst.name:24} {r['solver']:17} {ratio:>7} {r['time_s']:7.2f}s", flush=True)
        with path.open("w" if fresh else "a", newline="") as f:
            w = csv.DictWriter(f, fieldnames=FIELDS)
            if fresh:
                w.writeheader()
            w.writerows(rows)
        fresh = False


def table(rows: list[dict[str, Any]], limit: float, fast_limit: float) -> str:
    by: dict[str, dict[str, dict[str, Any]]] = {}
    for r in rows:
        by.setdefault(str(r["instance"]), {})[str(r["solver"])] = r
    body = []
    ratios: dict[str, list[float]] = {x: [] for x in COLUMNS}
    at_opt = dict.fromkeys(COLUMNS, 0)
    missing = dict.fromkeys(COLUMNS, 0)
    proved = dict.fromkeys(COLUMNS, 0)
    proven = 0
    overruns = []
    for name, cells in by.items():
        first = next(iter(cells.values()))
        peaks = [int(c["peak"]) for c in cells.values() if c["peak"] not in ("", None)]
        if first["known_optimum"]:
            denom, kind = int(first["known_optimum"]), "optimum (generator)"
        else:
            bb = cells.get("bb")
            bound = int(float(bb["bound"])) if bb and bb["bound"] not in ("", None) else 0
            denom = max(int(first["lower_bound"]), bound)
            kind = "optimum (reached)" if peaks and min(peaks) == denom else "lower bound"
        shown = []
        for x in COLUMNS:
            c = cells.get(x)
            if c is None or c["peak"] in ("", None):
                missing[x] += 1
                shown.append("- | -" if c is None else f"- ({c['status']}) | {c['time_s']}")
                continue
            v = int(c["peak"]) / denom
            proved[x] += c["proven"] == "True"
            ratios[x].append(v)
            at_opt[x] += kind.startswith("optimum") and int(c["peak"]) == denom
            t = float(c["time_s"])
            cap = fast_limit if x == "fast" else limit
            if x != "om-fast" and t > 1.1 * cap:
                overruns.append(f"{name} {x}: {t:.1f} s (limit {cap:g} s)")
            shown.append(f"{v:.4f} | {t:.2f}")
        ok = cells.get("bb", {}).get("proven") == "True"
        proven += ok
        body.append(
            f"| {name} | {first['buffers']} | {denom} | {kind} | "
            + " | ".join(shown)
            + f" | {'yes' if ok else 'no'} |"
        )
    n = len(by)
    out = [
        "# Allocation side by side on OmniMalloc's generators",
        "",
        f"One thread each; `bb`, telamalloc and supermalloc {limit:g} s, `fast` {fast_limit:g} s;"
        " OmniMalloc's best fast allocator is the least peak of greedy_by_size, best_fit and omni"
        " (its time: the three summed). Ratio = peak / denominator: the known optimum (pinwheel and"
        " tiling: capacity, stated by the generator; or a lower bound some solver reached), else"
        " the best lower bound (max load or `bb`'s bound). Every packing re-checked by our"
        " checker. Proven optimal: status `optimal` (`bb`'s proof; supermalloc's own proof; for"
        " the heuristics, a peak that met the max-load bound). Sources: every scalar-time"
        " generator of `omnimalloc.benchmark.sources` plus MiniMalloc's A-K; the vector-clock ones"
        " (concurrent tiling, sync patterns, 2+2) have no interval form and are left out, and the"
        " Hugging Face source needs downloads. `bb` and `fast` are time-bound: a re-run moves"
        " some cells. Generated by"
        " `.venv/bin/python -m benchmarks.allocation_side_by_side --part i/2`"
        " (i = 0, 1, in parallel), then `--table`.",
        "",
        f"## Summary ({n} instances)",
        "",
        "| solver | mean ratio | worst | at the optimum | proven optimal | no packing |",
        "|---|---|---|---|---|---|",
    ]
    for x in COLUMNS:
        got = ratios[x]
        mean = f"{sum(got) / len(got):.4f}" if got else "-"
        worst = f"{max(got):.4f}" if got else "-"
        row = f"{mean} | {worst} | {at_opt[x]} | {proved[x]} | {missing[x]}"
        out.append(f"| {HEAD[x]} | {row} |")
    known = sum(1 for c in by.values() if next(iter(c.values()))["known_optimum"])
    out += [
        "",
        f"`bb` proven optimal: {proven} of {n}."
        f" Instances with a generator-stated optimum: {known}.",
        "",
    ]
    target = [
        (name, cells["bb"])
        for name, cells in by.items()
        if "bb" in cells
        and name.split("-")[1] in ("pinwheel", "tiling")
        and int(cells["bb"]["buffers"]) in (1000, 1001)
    ]
    if target:
        hits = [
            name
            for name, c in target
            if c["peak"] not in ("", None)
            and int(c["peak"]) <= 1.02 * int(c["known_optimum"] or CAPACITY)
        ]
        out += [
            f"Target (pinwheel/tiling at ~1001 buffers: `bb` within 2 % of the optimum in"
            f" {limit:g} s): {len(hits)} of {len(target)}.",
            "",
        ]
    stopped = [
        f"{name}: {cells['bb'].get('message') or '-'}"
        for name, cells in by.items()
        if "bb" in cells and cells["bb"]["proven"] != "True"
    ]
    if stopped:
        out += ["`bb` not proven, and what it said:", ""]
        out += [f"- {x}" for x in stopped] + [""]
    if overruns:
        out += ["Time overruns (more than 10 % over the limit):", ""]
        out += [f"- {o}" for o in overruns] + [""]
    heads = " | ".join(f"{HEAD[x]} | {HEAD[x]} s" for x in COLUMNS)
    out += [
        "## Per instance",
        "",
        f"| instance | buffers | denominator | kind | {heads} | bb proven |",
        "|---|---|---|---|" + "---|---|" * len(COLUMNS) + "---|",
        *body,
    ]
    return "\n".join(out)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", default="", help="i/k: run every k-th instance from the i-th")
    ap.add_argument("--table", action="store_true", help="merge the part CSVs into --out")
    ap.add_argument("--limit", type=float, default=10.0)
    ap.add_argument("--fast-limit", type=float, default=1.0)
    ap.add_argument("--sizes", default="200,1000,5000")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--challenging", type=Path, default=Path("/tmp/challenging"))
    ap.add_argument("--work", type=Path, default=Path("/tmp/allocation_side_by_side"))
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "allocation_side_by_side")
    args = ap.parse_args(argv)
    if args.part:
        part(args.part, args)
    if args.table:
        rows: list[dict[str, Any]] = []
        for path in sorted(args.work.glob("part-*.csv")):
            with path.open() as f:
                rows += list(csv.DictReader(f))
        rows.sort(key=lambda r: int(r["index"]))
        write_csv_atomic(args.out.with_suffix(".csv"), rows, FIELDS)
        md = table(rows, args.limit, args.fast_limit)
        write_text_atomic(args.out.with_suffix(".md"), md + "\n")
        print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

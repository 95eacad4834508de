"""Allocation benchmark: heuristic quality and runtime as instances grow, and a scale table.

Quality (default): the `random` and `mixed` families of problems.allocation_gen at n = 100, 1k,
10k, 100k (seed 1). Gap = (peak - best bound) / best bound, where the best bound is the tightest of
the live-size lower bound and CP-SAT's proven bound (CP-SAT runs up to n = 1,000, 30 s, seed 0).
Peak traced memory is measured for ffd only, in a separate run. Writes
results/allocation_benchmark.csv.

Scale (`--scale`): issue 20's family, n random buffers (sizes 1-999, lifetimes 0-200 steps,
starts over n steps; `random_family(n, 1, horizon=n, max_size=999, max_life=201)`) at
n = 10^4, 10^5, 10^6, solved in one process by ffd, bfd and the portfolio (`multistart`, time
limit `--portfolio-time`) and by OmniMalloc's `greedy_by_size` and `omni` (one thread) when it is
installed. Per run: wall and CPU seconds of the solver alone (ours include converting the
instance to arrays; OmniMalloc's exclude building its Allocation objects), peak / max load, the
peak resident memory the run added (Linux VmHWM, reset before each run; numba's and C++
allocations are invisible to tracemalloc) and whether the checker accepts the packing. Then
the CLI check: `tensorplan solve <10^6 file> --solver ffd -o out.json` in a fresh process
under `/usr/bin/time -v` (wall, CPU, max RSS: load + solve + check + write). Writes
results/allocation_scale.csv and results/allocation_scale.md.

Usage: python benchmarks/allocation.py [--max-n N] | --scale [--sizes N ...] [--cli-n N]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from tensorplan.harness import registry
from tensorplan.harness.report import markdown_table
from tensorplan.harness.run import solve
from tensorplan.heuristics import allocation as heur
from tensorplan.heuristics import allocation_peers
from tensorplan.problems.allocation import (
    AllocationInstance,
    AllocationSolution,
    check,
    instance_to_json,
    lower_bound,
)
from tensorplan.problems.allocation_gen import mixed_family, random_family
from tensorplan.problems.core import Options, write_text_atomic

RESULTS = Path(__file__).resolve().parents[1] / "results"
OUT = RESULTS / "allocation_benchmark.csv"
SCALE_CSV = RESULTS / "allocation_scale.csv"
SCALE_MD = RESULTS / "allocation_scale.md"
HEURISTICS = ["ffd", "bfd", "ff-lifetime", "xla", "multistart"]
OURS = ["ffd", "bfd", "multistart"]
PEERS = ["greedy_by_size", "omni"]


def quality(args: argparse.Namespace) -> int:
    rows = []
    for n in [n for n in (100, 1_000, 10_000, 100_000) if n <= args.max_n]:
        for family in (random_family, mixed_family):
            inst = family(n, 1)
            lb = lower_bound(inst)
            results = {}
            if n <= args.exact_max_n:
                results["cpsat"] = solve(inst, "cpsat", Options(time_limit=args.exact_time))
            for h in HEURISTICS:
                results[h] = solve(inst, h, Options(time_limit=60 if h != "multistart" else 10))
            # memory separately: tracemalloc slows allocation-heavy Python several times over
            tracemalloc.start()
            solve(inst, "ffd")
            ffd_mem = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            exact = results.get("cpsat")
            best = max(lb, exact.bound or 0) if exact is not None else lb
            for name, r in results.items():
                mem = ffd_mem if name == "ffd" else None
                rows.append(
                    {
                        "family": family.__name__.removesuffix("_family"),
                        "n": n,
                        "solver": name,
                        "status": str(r.status),
                        "peak": r.objective,
                        "best_bound": best,
                        "gap_pct": None
                        if r.objective is None
                        else round(100 * (r.objective - best) / best, 3),
                        "runtime_s": round(r.runtime_s, 3),
                        "peak_mem_mb": None if mem is None else round(mem / 2**20, 1),
                    }
                )
                print(rows[-1], flush=True)
    frame = pd.DataFrame(rows)
    OUT.parent.mkdir(exist_ok=True)
    frame.to_csv(OUT, index=False)
    print(markdown_table(frame))
    return 0


# --- scale ----------------------------------------------------------------------------------------


def issue_family(n: int) -> AllocationInstance:
    """Issue 20's instances: sizes 1-999 bytes, lifetimes 0-200 steps, starts over n steps."""
    return random_family(n, 1, horizon=n, max_size=999, max_life=201)


def _status_kb(field: str) -> int | None:
    try:
        text = Path("/proc/self/status").read_text()
    except OSError:
        return None
    hit = re.search(rf"{field}:\s+(\d+) kB", text)
    return None if hit is None else int(hit.group(1))


def measured(run: Callable[..., Any], *args: Any) -> tuple[Any, float, float, float | None]:
    """(run(*args), wall s, CPU s, MB of resident memory the call added at its peak)."""
    try:  # reset the high-water mark (Linux >= 4.0) so VmHWM is this call's peak
        Path("/proc/self/clear_refs").write_text("5")
        before = _status_kb("VmRSS")
    except OSError:
        before = None
    wall, cpu = time.perf_counter(), time.process_time()
    value = run(*args)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    after = _status_kb("VmHWM")
    mem = None if before is None or after is None else max(0, after - before) / 1024
    return value, wall, cpu, mem


def scale_row(n: int, impl: str, solver: str, offsets, lb: int, inst, wall, cpu, mem) -> dict:
    sol = AllocationSolution(tuple(int(o) for o in offsets))
    top = max((o + b.size for o, b in zip(sol.offsets, inst.buffers, strict=True)), default=0)
    return {
        "n": n,
        "impl": impl,
        "solver": solver,
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        "peak": top,
        "max_load": lb,
        "peak/load": round(top / lb, 4),
        "mem_mb": None if mem is None else round(mem, 1),
        "checked": not check(inst, sol),
    }


def scale(args: argparse.Namespace) -> int:
    rows: list[dict[str, Any]] = []
    heur.place(issue_family(50), list(range(50)))  # compile / load the kernels first
    have_peers = allocation_peers.available()
    if have_peers:
        import omnimalloc as om

        om.set_max_threads(1)
    for n in args.sizes:
        inst = issue_family(n)
        lb = lower_bound(inst)
        for name in OURS:
            heur._ARRAYS.clear()  # each run converts the instance itself
            opts = Options(time_limit=args.portfolio_time, seed=0)
            res, wall, cpu, mem = measured(registry.solver("allocation", name).run, inst, opts)
            stats = res.stats
            note = f"{stats['tries']} passes, best {stats['best_of']}" if "tries" in stats else ""
            row = scale_row(n, "tensorplan", name, res.solution.offsets, lb, inst, wall, cpu, mem)
            rows.append({**row, "note": note})
            print(rows[-1], flush=True)
        if have_peers:
            allocs = tuple(allocation_peers.to_omnimalloc(inst))
            for name in PEERS:
                placed, wall, cpu, mem = measured(om.allocate, allocs, name)
                offsets = allocation_peers.from_omnimalloc(inst, placed)
                rows.append(scale_row(n, "omnimalloc", name, offsets, lb, inst, wall, cpu, mem))
                print(rows[-1], flush=True)
            del allocs
    frame = pd.DataFrame(rows)
    RESULTS.mkdir(exist_ok=True)
    frame.to_csv(SCALE_CSV, index=False)
    text = [
        "# Allocation at scale (issue 20)",
        "",
        __doc__.split("Scale (`--scale`): ")[1].split("Usage:")[0].strip(),
        "",
        markdown_table(frame.fillna("")),
        "",
    ]
    if args.cli_n:
        cli = cli_check(args.cli_n)
        text += [
            "## CLI: `tensorplan solve --solver ffd` on one file",
            "",
            markdown_table(pd.DataFrame([cli])),
            "",
        ]
        print(cli, flush=True)
    write_text_atomic(SCALE_MD, "\n".join(text))
    print("\n".join(text))
    return 0


def cli_check(n: int) -> dict[str, Any]:
    """Wall, CPU and max RSS of `tensorplan solve --solver ffd` on an n-buffer file."""
    exe = Path(sys.executable).with_name("tensorplan")
    with tempfile.TemporaryDirectory() as tmp:
        path, out = Path(tmp) / f"issue-{n}.json", Path(tmp) / "out.json"
        path.write_text(json.dumps(instance_to_json(issue_family(n))))
        cmd = [str(exe), "solve", str(path), "--solver", "ffd", "-o", str(out)]
        timer = shutil.which("time") or (
            "/usr/bin/time" if Path("/usr/bin/time").exists() else None
        )
        row: dict[str, Any] = {"n": n, "command": "tensorplan solve FILE --solver ffd -o OUT"}
        if timer:
            done = subprocess.run([timer, "-v", *cmd], capture_output=True, text=True)
            report = done.stderr

            def field(key: str) -> str:
                """One figure of `time -v`'s report."""
                found = re.search(rf"{key}: (.+)", report)
                if found is None:
                    raise RuntimeError(f"`{timer} -v` reported no {key!r}:\n{report}")
                return found.group(1).strip()

            mins, secs = field(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\)").rsplit(":", 1)
            row["wall_s"] = round(60 * float(mins.split(":")[-1]) + float(secs), 2)
            row["cpu_s"] = round(
                float(field("User time \\(seconds\\)")) + float(field("System time \\(seconds\\)")),
                2,
            )
            row["max_rss_mb"] = round(int(field(r"Maximum resident set size \(kbytes\)")) / 1024)
        else:
            import resource

            began = time.perf_counter()
            done = subprocess.run(cmd, capture_output=True, text=True)
            usage = resource.getrusage(resource.RUSAGE_CHILDREN)
            row["wall_s"] = round(time.perf_counter() - began, 2)
            row["cpu_s"] = round(usage.ru_utime + usage.ru_stime, 2)
            row["max_rss_mb"] = round(usage.ru_maxrss / 1024)
        row["exit"] = done.returncode
        row["objective"] = json.loads(out.read_text())["objective"] if out.exists() else None
    return row


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-n", type=int, default=100_000)
    ap.add_argument("--exact-max-n", type=int, default=1_000)
    ap.add_argument("--exact-time", type=float, default=30.0)
    ap.add_argument("--scale", action="store_true", help="the scale table and the CLI check")
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--portfolio-time", type=float, default=10.0)
    ap.add_argument("--cli-n", type=int, default=1_000_000, help="0 skips the CLI check")
    args = ap.parse_args(argv)
    return scale(args) if args.scale else quality(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

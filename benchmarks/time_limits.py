"""Does every solver hold its time limit? Every solver on the shipped instances and on large
generated ones (`LARGE`), through the batch runner (one worker, so one core), with a short limit;
then one CLI `solve` per problem in a fresh process, the cold start a user sees.

The batch's measured time is the row's `wall_s`: loading the file, the solve and the harness's
verification in the worker, i.e. the user's whole budget. The CLI's is the process's wall time;
its limit counts from when `solve` begins the task (loading the instance, importing the solver and
loading its compiled kernels come out of it), so the cold start, the wall time less the limit, is
the interpreter's and the CLI's own start-up (measured alone too: `startup`). Writes the rows to
`results/time_limits/`, and per problem the worst overrun and the CLI's cold start to
`results/time_limits.md`.

    python -m benchmarks.time_limits [--time-limit 2] [--jobs 1] [--problems fusion,...]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from importlib import import_module
from pathlib import Path

import pandas as pd

from tensorplan.harness import registry
from tensorplan.harness.batch import run_batch
from tensorplan.harness.report import markdown_table
from tensorplan.problems.core import Options, write_text_atomic

ROOT = Path(__file__).resolve().parents[1]
LARGE = {"allocation": 5000, "schedule": 1000, "fusion": 400, "layout": 1500}
"""Sizes of the generated instances: 10x the shipped families or more (allocation's 5,000 buffers
and fusion's 400 bindings are issue 34's cases: models too big to build in 2 s)."""

CLI_SOLVER = {"allocation": "mip-cbc", "schedule": "cpsat", "fusion": "strong", "layout": "cpsat"}
"""The solver of each problem's cold-start CLI run (on its first large instance)."""


def generated(outdir: Path, problems: list[str], seeds: tuple[int, ...] = (1, 2)) -> list[Path]:
    """The large instances (`LARGE`), one folder per problem; their paths."""
    paths = []
    for problem in problems:
        size = LARGE[problem]
        spec = registry.problem(problem)
        gen = import_module(f"tensorplan.problems.{problem}_gen")
        for seed in seeds:
            inst = gen.sample(size, seed)
            doc = spec.instance_to_json(inst) | {"name": f"{problem}-large-{size}-s{seed}"}
            path = outdir / problem / f"{problem}-large-{size}-s{seed}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(doc))
            paths.append(path)
    return paths


def cli_solve(problem: str, path: Path, time_limit: float) -> dict[str, object]:
    """One `tensorplan solve` in a fresh process: its wall time against the limit (the cold
    start) and the solver's own time (the rest of the limit went to loading and warming up)."""
    solver = CLI_SOLVER[problem]
    command = [sys.executable, "-m", "tensorplan.harness.cli", "solve", str(path)]
    command += ["--solver", solver, "--time-limit", f"{time_limit:g}"]
    begin = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - begin
    found = re.search(r"time=([0-9.]+)s", done.stdout)
    solve_s = float(found.group(1)) if found else float("nan")
    return {
        "problem": problem,
        "solver": solver,
        "on": path.stem,
        "exit": done.returncode,
        "wall (s)": round(wall, 2),
        "solver (s)": round(solve_s, 2),
        "cold start (s)": round(wall - time_limit, 2),
    }


def startup(repeat: int = 5) -> float:
    """The CLI's own start-up, no solve: the median wall time of a fresh interpreter importing
    the CLI (what `tensorplan solve` spends before its time limit starts counting)."""
    command = [sys.executable, "-c", "import tensorplan.harness.cli"]
    walls = []
    for _ in range(repeat):
        begin = time.perf_counter()
        subprocess.run(command, check=True)
        walls.append(time.perf_counter() - begin)
    return sorted(walls)[len(walls) // 2]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=2.0)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--problems", default=",".join(LARGE), help="comma-separated problems")
    ap.add_argument("-o", "--output", default=str(ROOT / "results"))
    args = ap.parse_args(argv)
    out = Path(args.output)
    problems = args.problems.split(",")
    with tempfile.TemporaryDirectory(prefix="tensorplan-large-") as tmp:
        large = generated(Path(tmp), problems)
        frame = run_batch(
            [ROOT / "instances" / p for p in problems] + [tmp],
            out / "time_limits",
            solvers=None,
            options=Options(time_limit=args.time_limit),
            jobs=args.jobs,
            force=True,
            solutions="none",
        )
        firsts = {path.parent.name: path for path in reversed(large)}  # seed 1 of each problem
        cold = pd.DataFrame([cli_solve(p, firsts[p], args.time_limit) for p in problems])
        started = startup()
    frame["overrun_s"] = pd.to_numeric(frame["wall_s"]) - args.time_limit
    frame["set"] = ["large" if "-large-" in str(i) else "shipped" for i in frame["instance"]]
    rows = []
    for (problem, kind), g in frame.groupby(["problem", "set"]):
        worst = g.loc[g["overrun_s"].idxmax()]
        rows.append(
            {
                "problem": problem,
                "instances": kind,
                "solves": len(g),
                "over the limit": int((g["overrun_s"] > 0).sum()),
                "worst overrun (s)": round(float(worst["overrun_s"]), 2),
                "worst solver": worst["solver"],
                "on": worst["instance"],
                "errors": int((g["status"] == "error").sum()),
            }
        )
    table = pd.DataFrame(rows)
    sizes = ", ".join(f"{p} {LARGE[p]}" for p in problems)
    text = (
        f"# Time limits held (limit {args.time_limit:g} s, {args.jobs} worker)\n\n"
        "Wall time per solve = load + solve + verification in the worker (`wall_s`); the large\n"
        f"instances are generated ({sizes}; seeds 1 and 2).\n\n"
        + markdown_table(table)
        + "\n\n## Cold start: one CLI solve in a fresh process\n\n"
        "`tensorplan solve FILE --solver S --time-limit L` on each problem's first large\n"
        "instance: wall time of the process. The limit counts from when `solve` begins the task:\n"
        "loading the instance, importing the solver and loading its compiled kernels come out of\n"
        "it (`solver (s)` is what the solver itself had left), so the cold start (wall time less\n"
        "the limit) is the interpreter's and the CLI's own start-up, plus any set-up past 90 % of\n"
        "the limit (the solver always keeps 10 % of it). The CLI's start-up alone (a fresh\n"
        f"interpreter importing it, median of 5): {started:.2f} s.\n\n"
        + markdown_table(cold)
        + "\n"
    )
    write_text_atomic(
        out / f"time_limits{'' if len(problems) == len(LARGE) else '-' + '-'.join(problems)}.md",
        text,
    )
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

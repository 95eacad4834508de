"""Batch benchmark: wall time of `tensorplan compare` over every shipped instance with 1 and with
2 worker processes (the machine has 2 cores). Writes results/compare_jobs_benchmark.csv.

Run: .venv/bin/python -m benchmarks.compare_jobs [--time-limit S]

Each run is a fresh `compare instances --force` into a temporary directory, so nothing is resumed;
the report's plots are included, as in the README's main command. Rows: jobs, wall seconds, the
number of result rows and of solves that hit the time limit (status feasible/unknown from an exact
solver), and the speed-up over one job.
"""

from __future__ import annotations

import argparse
import csv
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tensorplan.problems.core import write_csv_atomic

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "results" / "compare_jobs_benchmark.csv"
FIELDS = [
    "jobs",
    "time_limit_s",
    "wall_s",
    "rows",
    "optimal",
    "not_optimal_exact",
    "errors",
    "speedup",
]


def run(jobs: int, time_limit: float) -> dict:
    """One fresh compare over instances/ with `jobs` workers; its wall time and row counts."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            str(ROOT / ".venv" / "bin" / "tensorplan"),
            "compare",
            str(ROOT / "instances"),
            "--time-limit",
            str(time_limit),
            "--force",
            "--jobs",
            str(jobs),
            "-o",
            tmp,
        ]
        t0 = time.perf_counter()
        subprocess.run(cmd, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wall = time.perf_counter() - t0
        with open(Path(tmp) / "results.csv", newline="") as f:
            rows = list(csv.DictReader(f))
    exact = [r for r in rows if r.get("kind") == "exact"]
    return {
        "jobs": jobs,
        "time_limit_s": time_limit,
        "wall_s": round(wall, 1),
        "rows": len(rows),
        "optimal": sum(r["status"] == "optimal" for r in rows),
        "not_optimal_exact": sum(r["status"] != "optimal" for r in exact),
        "errors": sum(r["status"] == "error" for r in rows),
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=10.0)
    args = ap.parse_args(argv)
    results = [run(jobs, args.time_limit) for jobs in (1, 2)]
    for r in results:
        r["speedup"] = round(results[0]["wall_s"] / r["wall_s"], 2)
    write_csv_atomic(OUT, results, FIELDS)
    for r in results:
        print(", ".join(f"{k}={r[k]}" for k in FIELDS), file=sys.stdout)


if __name__ == "__main__":
    main()

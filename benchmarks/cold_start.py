"""First contact: the wall time of a user's first `tensorplan solve` against the tenth.

Each solver runs as a fresh CLI process on one instance of its problem (`seed-example` where the
problem has one) in three situations, each with its own numba cache folder (`NUMBA_CACHE_DIR`):
- *no set-up*: an empty cache, so every kernel the solve needs is compiled inside it;
- *first after set-up*: the cache that `tensorplan warm` (run once, by the README's set-up
  commands) leaves, i.e. a user's first solve after installing;
- *later*: the same solve again (what every later run costs).
Wall seconds of the whole process (interpreter and imports included) on this 2-core machine;
the table goes to `results/cold_start.md`.

    python -m benchmarks.cold_start [--solvers allocation:ffd,schedule:shift,...]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tensorplan.problems.core import write_text_atomic

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = (
    "allocation:ffd,allocation:bb,allocation:multistart,allocation:cpsat,"
    "schedule:shift,schedule:shift-anneal,schedule:greedy,schedule:cpsat,layout:greedy0,"
    "layout:mip,fusion:greedy,fusion:strong"
)
INSTANCE = {"layout": "matmul.json", "fusion": "normalize2.json"}


def timed(command: list[str], cache: str) -> tuple[float, str]:
    """Wall seconds of `command` run with numba's cache in `cache`, and its last output line."""
    env = {**os.environ, "NUMBA_CACHE_DIR": cache}
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    return wall, (done.stdout.strip().splitlines() or [done.stderr.strip()])[-1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--solvers", default=DEFAULT, help="comma-separated problem:solver pairs")
    ap.add_argument("-o", "--output", default=str(ROOT / "results" / "cold_start.md"))
    args = ap.parse_args(argv)
    tool = str(Path(sys.executable).with_name("tensorplan"))
    rows = [
        "| problem | solver | instance | no set-up (s) | first after set-up (s) | later (s) "
        "| first - later (s) | solve line |",
        "|---|---|---|---:|---:|---:|---:|---|",
    ]
    with tempfile.TemporaryDirectory(prefix="tensorplan-numba-") as warmed:
        setup, _ = timed([tool, "warm"], warmed)
        for pair in args.solvers.split(","):
            problem, solver = pair.split(":")
            path = ROOT / "instances" / problem / INSTANCE.get(problem, "seed-example.json")
            command = [tool, "solve", str(path), "--solver", solver]
            with tempfile.TemporaryDirectory(prefix="tensorplan-numba-") as empty:
                cold, _ = timed(command, empty)
            first, _ = timed(command, warmed)
            later, line = timed(command, warmed)
            rows.append(
                f"| {problem} | {solver} | {path.stem} | {cold:.2f} | {first:.2f} | {later:.2f} "
                f"| {first - later:+.2f} | `{line}` |"
            )
            print(rows[-1], flush=True)
    text = (
        "# Cold start: the first solve against a later one\n\n"
        "Written by `python -m benchmarks.cold_start`: fresh `tensorplan solve` processes, wall "
        "seconds (interpreter and imports included) on this 2-core machine. *no set-up*: an "
        "empty numba cache: the solve's warm-up compiles its solver's kernels first (its warm "
        "hook included), which `tensorplan solve` counts in its limit and reports; *first after "
        "set-up*: the cache `tensorplan warm` left (the README's set-up commands run it; "
        f"here it took {setup:.1f} s from an empty cache); *later*: the same solve again.\n\n"
        + "\n".join(rows)
        + "\n"
    )
    write_text_atomic(Path(args.output), text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Does every solver hold its time limit? Every solver on the shipped instances and on generated
instances 10x larger, through the batch runner (one worker, so one core), with a short limit.

The measured time is the row's `wall_s`: loading the file, the solve and the harness's
verification in the worker, i.e. the user's whole budget. Writes the rows to
`results/time_limits/`, and per problem the worst overrun to `results/time_limits.md`.

    python -m benchmarks.time_limits [--time-limit 2] [--jobs 1]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from importlib import import_module
from pathlib import Path

import pandas as pd

from tensorplan.harness import registry
from tensorplan.harness.batch import run_batch
from tensorplan.harness.report import markdown_table
from tensorplan.problems.core import Options, write_text_atomic

ROOT = Path(__file__).resolve().parents[1]
LARGE = {"allocation": 3000, "schedule": 1000, "fusion": 300, "layout": 1500}  # 10x shipped


def generated(outdir: Path, problems: list[str], seeds: tuple[int, ...] = (1, 2)) -> None:
    """Instances 10x the size of the shipped generated families, one folder per problem."""
    for problem in problems:
        size = LARGE[problem]
        spec = registry.problem(problem)
        gen = import_module(f"tensorplan.problems.{problem}_gen")
        for seed in seeds:
            inst = gen.sample(size, seed)
            doc = spec.instance_to_json(inst) | {"name": f"{problem}-x10-{size}-s{seed}"}
            path = outdir / problem / f"{problem}-x10-{size}-s{seed}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(doc))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=2.0)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--problems", default=",".join(LARGE), help="comma-separated problems")
    ap.add_argument("-o", "--output", default=str(ROOT / "results"))
    args = ap.parse_args(argv)
    out = Path(args.output)
    problems = args.problems.split(",")
    with tempfile.TemporaryDirectory(prefix="tensorplan-x10-") as tmp:
        generated(Path(tmp), problems)
        frame = run_batch(
            [ROOT / "instances" / p for p in problems] + [tmp],
            out / "time_limits",
            solvers=None,
            options=Options(time_limit=args.time_limit),
            jobs=args.jobs,
            force=True,
            solutions="none",
        )
    frame["overrun_s"] = pd.to_numeric(frame["wall_s"]) - args.time_limit
    frame["set"] = ["x10" if "-x10-" in str(i) else "shipped" for i in frame["instance"]]
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
    text = (
        f"# Time limits held (limit {args.time_limit:g} s, {args.jobs} worker)\n\n"
        "Wall time per solve = load + solve + verification in the worker (`wall_s`).\n\n"
        + markdown_table(table)
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

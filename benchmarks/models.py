"""Real-model benchmark (issue 17): `shift` on the shipped ONNX graphs in both objectives, and the
end-to-end memory plan of each. Writes results/models_benchmark.{csv,md} and one plan directory
per model under results/models_plans/<model>/ (report.md, pictures, checkable JSON).

Run: .venv/bin/python -m benchmarks.models [--time-limit 60] [--plan-limit 10] [--skip-plans]

- part `shift`: each graph of `instances/models/` (batch 1), and the two shipped training
  steps (`instances/schedule/model-*-train.json`), as a schedule instance with
  objective sum_liveness and with objective peak; the `shift` solver (n-shift ladder from the
  best of greedy / Kahn fifo / Kahn filo) through `harness.run.solve` with a time limit of 60 s
  (one thread; the harness re-verifies the order). `model` is the objective of the model's own
  node order, `start` that of shift's starting order, `converged` says whether shift reached a
  local minimum of every rotation inside the limit, `ms/move` = time / improving moves.
  `cpsat` is the exact CP-SAT schedule model's value (time limit `--exact-limit`, default 20 s,
  warm-started from nothing) with `opt` when proven optimal.
- part `plan`: `harness.plan.make_plan` with `--plan-limit` seconds per step: the four peaks of
  the report ((a) no reuse, (a') online first-fit, (b) model order + best packing, (c) planned
  order + best packing) and the time of each step.

Timings are wall-clock on a shared 2-core machine and noisy; the objective values are exact.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tensorplan.harness.onnx_import import import_onnx
from tensorplan.harness.plan import make_plan, write_plan
from tensorplan.harness.run import load_instance, solve
from tensorplan.problems import schedule
from tensorplan.problems.core import Options, write_csv_atomic, write_text_atomic
from tensorplan.problems.schedule import ScheduleInstance

ROOT = Path(__file__).resolve().parent.parent
MODELS = (
    "resnet50",
    "mobilenetv2",
    "bert-base",
    "gpt2-small",
    "resnet50-train",
    "mobilenetv2-train",
)
OUT = ROOT / "results"


def instance(name: str, objective: str) -> ScheduleInstance:
    """Inference graphs from their ONNX file, training steps from their shipped instance."""
    if name.endswith("-train"):
        inst = load_instance(ROOT / "instances" / "schedule" / f"model-{name}.json")
        return ScheduleInstance(inst.ops, inst.allocs, objective, name)  # type: ignore[arg-type]
    sched, _ = import_onnx(
        ROOT / "instances" / "models" / f"{name}.onnx",
        dims={"batch": 1},
        objective=objective,
        name=name,
    )
    return sched


def shift_rows(time_limit: float, exact_limit: float) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for name in MODELS:
        for objective in ("sum_liveness", "peak"):
            inst = instance(name, objective)
            g = inst.graph
            model = schedule.order_objective(g, list(range(g.n)), objective)
            res = solve(inst, "shift", Options(time_limit=time_limit))
            moves = int(res.stats.get("moves", 0))
            exact = (
                solve(inst, "cpsat", Options(time_limit=exact_limit)) if exact_limit > 0 else None
            )
            row = {
                "model": name,
                "objective": objective,
                "ops": g.n,
                "allocs": len(inst.allocs),
                "model_order": model,
                "start": res.stats.get("start_objective"),
                "shift": res.objective,
                "vs_model": f"{res.objective / model:.4f}"
                if model and res.objective is not None
                else "",
                "moves": moves,
                "time_s": round(res.runtime_s, 3),
                "ms_per_move": round(1000 * res.runtime_s / moves, 2) if moves else "",
                "converged": res.stats.get("converged"),
                "status": str(res.status),
                "cpsat": None if exact is None else exact.objective,
                "cpsat_status": None if exact is None else str(exact.status),
                "cpsat_time_s": None if exact is None else round(exact.runtime_s, 2),
            }
            rows.append(row)
            print(row, flush=True)
    return rows


def plan_rows(plan_limit: float, outdir: Path) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for name in MODELS:
        inst = instance(name, "peak")
        plan = make_plan(inst, time_limit=plan_limit)
        source = (
            f"instances/schedule/model-{name}.json"
            if name.endswith("-train")
            else f"instances/models/{name}.onnx"
        )
        write_plan(plan, outdir / name, model=source, dims={"batch": 1})
        rows.append(
            {
                "model": name,
                "ops": len(inst.ops),
                "tensors": len(inst.allocs),
                "a_no_reuse": plan.no_reuse,
                "a2_online_first_fit": plan.online_first_fit,
                "b_model_best": plan.model.peak,
                "b_solver": plan.model.result.solver,
                "c_planned_best": plan.planned.peak,
                "c_solver": plan.planned.result.solver,
                "order": plan.order_source,
                **{f"t_{k.replace(' ', '_')}_s": round(v, 2) for k, v in plan.timings.items()},
            }
        )
        print(rows[-1], flush=True)
    return rows


def mib(x: object) -> str:
    return f"{int(x) / 2**20:,.1f}"  # type: ignore[call-overload]


def markdown(shift: list[dict[str, object]], plans: list[dict[str, object]], args) -> str:
    lines = [
        "# Real models: schedule speed and memory plans",
        "",
        "Written by `.venv/bin/python -m benchmarks.models` "
        f"(`--time-limit {args.time_limit:g} --exact-limit {args.exact_limit:g} "
        f"--plan-limit {args.plan_limit:g}`). Graphs: `instances/models/*.onnx` at batch 1 "
        "(built by `instances/tools/build_models.py`); `-train`: one training step (forward + "
        "backward), `instances/schedule/model-*-train.json`. Timings are wall-clock on a "
        "shared, busy 2-core machine: read them as orders of magnitude.",
        "",
    ]
    if shift:
        lines += [
            f"## `shift` on the real graphs (time limit {args.time_limit:g} s, one core)",
            "",
            "| model | objective | ops | allocs | model order | shift start | shift | "
            "moves | time (s) | ms/move | converged | cpsat |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|",
        ]
        for r in shift:
            cp = "-" if r["cpsat"] is None else f"{r['cpsat']:,} ({r['cpsat_status']})"
            lines.append(
                f"| {r['model']} | {r['objective']} | {r['ops']} | {r['allocs']} | "
                f"{r['model_order']:,} | {r['start']:,} | {r['shift']:,} | {r['moves']} | "
                f"{r['time_s']} | {r['ms_per_move'] or '-'} | {r['converged']} | {cp} |"
            )
        lines.append("")
    if plans:
        lines += [
            f"## Memory plans (`tensorplan plan`, {args.plan_limit:g} s per step)",
            "",
            "Peaks in MiB. (a) no reuse: every tensor its own offset (sum of sizes); "
            "(a') online first-fit (`ff-start`) in the model's order; (b) the model's order "
            "with the best packing; (c) the planned order with the best packing. Reports: "
            "`results/models_plans/<model>/report.md`.",
            "",
            "| model | ops | tensors | (a) no reuse | (a') online first-fit | (b) model order | "
            "(c) planned | (c) order | plan time (s) |",
            "|---|---:|---:|---:|---:|---:|---:|---|---:|",
        ]
        for r in plans:
            total = sum(v for k, v in r.items() if k.startswith("t_"))  # type: ignore[misc]
            lines.append(
                f"| {r['model']} | {r['ops']} | {r['tensors']} | {mib(r['a_no_reuse'])} | "
                f"{mib(r['a2_online_first_fit'])} | {mib(r['b_model_best'])} "
                f"(`{r['b_solver']}`) | {mib(r['c_planned_best'])} (`{r['c_solver']}`) | "
                f"{r['order']} | {total:.1f} |"
            )
        lines.append("")
    return "\n".join(lines)


def write_csv(rows: list[dict[str, object]], path: Path) -> None:
    if not rows:
        return
    write_csv_atomic(path, rows, list(dict.fromkeys(k for r in rows for k in r)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=60.0, help="shift, seconds per run")
    ap.add_argument("--exact-limit", type=float, default=20.0, help="cpsat; 0 skips it")
    ap.add_argument("--plan-limit", type=float, default=10.0, help="plan, seconds per step")
    ap.add_argument("--skip-plans", action="store_true")
    ap.add_argument("--skip-shift", action="store_true")
    args = ap.parse_args(argv)
    shift = [] if args.skip_shift else shift_rows(args.time_limit, args.exact_limit)
    plans = [] if args.skip_plans else plan_rows(args.plan_limit, OUT / "models_plans")
    write_csv(shift, OUT / "models_shift.csv")
    write_csv(plans, OUT / "models_plans.csv")
    write_text_atomic(OUT / "models_benchmark.md", markdown(shift, plans, args))
    print(f"-> {OUT / 'models_benchmark.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Real-model benchmark (issue 17): `shift` on the shipped ONNX graphs in both objectives, and the
end-to-end memory plan of each. Writes results/models_benchmark.{csv,md} and one plan directory
per model under results/models_plans/<model>/ (report.md, pictures, checkable JSON).

Run: .venv/bin/python -m benchmarks.models [--time-limit 60] [--plan-limit 10] [--skip-plans]
     .venv/bin/python -m benchmarks.models --zoo-only [--zoo NAME ...]

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

- part `zoo` (issue 31, item 3; `--zoo-only` runs it alone, `--zoo NAME` picks models, default
  `DEFAULT_ZOO`: branchy_cnn, torchvision's resnet18, resnet50, mobilenet_v3_large,
  efficientnet_b0 and transformers' BERT-base, random weights): each model planned through both
  routes (ONNX export -> planned.onnx; torch.export -> plan_torch's GraphModule), the original
  and the planned model run in onnxruntime and in PyTorch (CPU), each runtime's measured peak
  set against the plan, with and without workspaces (`torch_import.TORCH_CPU_WORKSPACE`, and
  each op's scratch measured). torchvision and transformers are benchmark-only (installed into
  `--deps` by `benchmarks/zoo.py`, or `pip install transformers` into the venv); never
  dependencies of tensorplan. Writes results/models_zoo.csv and the zoo section of the note.

Timings are wall-clock on a shared 2-core machine and noisy; the objective values are exact.
"""

from __future__ import annotations

import argparse
import bisect
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tensorplan.harness.emit import planned_onnx_bytes
from tensorplan.harness.onnx_import import import_onnx
from tensorplan.harness.plan import best_packing, make_plan, write_plan
from tensorplan.harness.run import load_instance, solve
from tensorplan.problems import schedule
from tensorplan.problems.core import (
    Options,
    write_bytes_atomic,
    write_csv_atomic,
    write_text_atomic,
)
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
        if not name.endswith("-train"):  # the executable plan (no weights: graph and plan only)
            meta = {"model": source, "dims": {"batch": 1}}
            onnx_bytes = planned_onnx_bytes(ROOT / source, plan, meta)
            write_bytes_atomic(outdir / name / "planned.onnx", onnx_bytes)
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


# --- part `zoo`: planned models run and measured (issue 31, item 3) ------------------------------

ORT_CHILD = """
import json, sys
from benchmarks.models import ort_measure
print(json.dumps(ort_measure(*sys.argv[1:])))
"""


def ort_measure(path: str, feed: str, mode: str, outputs: str) -> dict[str, Any]:
    """One onnxruntime session's first run (a fresh process each: the arena's statistics start
    clean), profiled. `mode` "written": no graph optimisation, execution order PRIORITY_BASED
    (Kahn's order by node index: the file's order when it is topological), so the runtime runs
    the graph as written; "default": onnxruntime's defaults (all optimisations, fusions included,
    default order). One intra-op thread. The peak is the CPU arena's: its `mem_in_use_peak` at
    the run's last node less the bytes in use before its first (initializers and inputs are
    there before); `exact` is false when the arena's peak did not rise during the run (then the
    most in use after any node is taken: a lower bound). Writes the outputs to `outputs`."""
    import json as _json

    import numpy as np
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.enable_profiling = True
    so.profile_file_prefix = str(Path(outputs).with_suffix(""))
    if mode == "written":
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        so.execution_order = ort.ExecutionOrder.PRIORITY_BASED
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    values = dict(np.load(feed))
    result = sess.run(None, values)
    np.savez(outputs, *result)
    events = _json.loads(Path(sess.end_profiling()).read_text())
    nodes = [e for e in events if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")]
    args = [e["args"] for e in nodes]
    if not args or "mem_in_use_peak" not in args[0]:
        return {"peak": None, "exact": False, "order": []}
    base = int(args[0]["mem_bytes_in_use"]) - int(args[0]["mem_in_use_delta"])
    peaks = [int(a["mem_in_use_peak"]) for a in args]
    in_use = max(int(a["mem_bytes_in_use"]) for a in args)
    rose = peaks[-1] > max(base, peaks[0] - int(args[0]["mem_in_use_delta"]))
    peak = (peaks[-1] if rose else in_use) - base
    order = [e["name"].removesuffix("_kernel_time") for e in nodes]
    at = next(a["op_name"] for a in args if int(a["mem_in_use_peak"]) == peaks[-1])
    return {"peak": peak, "exact": rose, "order": order, "at": at if rose else "-"}


def ort_run(path: Path, feed: Path, mode: str) -> tuple[dict[str, Any], list[Any]]:
    """`ort_measure` in a fresh Python process; (its answer, the outputs)."""
    import json as _json
    import subprocess

    import numpy as np

    out = path.with_name(f"{path.stem}.{mode}.npz")
    done = subprocess.run(
        [sys.executable, "-c", ORT_CHILD, str(path), str(feed), mode, str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"onnxruntime ({mode}) failed: {done.stderr.strip()[-400:]}")
    answer = _json.loads(done.stdout.strip().splitlines()[-1])
    with np.load(out) as z:
        values = [z[k] for k in sorted(z.files, key=lambda k: int(k.split("_")[-1]))]
    return answer, values


def _profile(fn: Any) -> tuple[list[tuple[int, int]], list[tuple[int, int, str]]]:
    """Run `fn()` under torch.profiler (no_grad, memory events on): ((time, bytes live after
    it) for every CPU allocation and free, in time order, counting from 0 at the start; the
    top-level ATen ops (start, end, name), in time order)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out = fn()
    del out
    events = prof.profiler.kineto_results.events()
    mem = sorted(
        (e.start_ns(), i, e.nbytes()) for i, e in enumerate(events) if e.name() == "[memory]"
    )
    trace: list[tuple[int, int]] = []
    live = 0
    for t, _, nbytes in mem:
        live += nbytes
        trace.append((t, live))
    spans = sorted(
        ((e.start_ns(), e.end_ns(), e.name()) for e in events if e.name().startswith("aten::")),
        key=lambda x: (x[0], -x[1]),
    )
    tops: list[tuple[int, int, str]] = []
    for span in spans:  # the outermost ops: those not inside an earlier one
        if not tops or span[0] >= tops[-1][1]:
            tops.append(span)
    return trace, tops


def _live_at(trace: Sequence[tuple[int, int]], t: int) -> int:
    """Bytes live just before time `t`."""
    k = bisect.bisect_left(trace, (t, -1))
    return trace[k - 1][1] if k else 0


def torch_peak(fn: Any) -> tuple[int, str, int]:
    """(peak, op, scratch): the peak bytes that PyTorch's CPU allocator holds while `fn()` runs
    (under no_grad), from torch.profiler's memory events (their running sum in time order; what
    was allocated before, weights, inputs and folded constants, is not counted; the outputs
    are); the top-level ATen op running at the peak, and how far the peak rises above the
    bytes live when that op starts and when it ends (its scratch memory, beyond its output)."""
    trace, tops = _profile(fn)
    if not trace:
        return 0, "-", 0
    when, peak = max(trace, key=lambda x: (x[1], -x[0]))
    spans = [x for x in tops if x[0] <= when <= x[1]]
    if not spans:
        return peak, "-", 0
    start, end, name = spans[0]
    scratch = peak - max(_live_at(trace, start), _live_at(trace, end + 1))
    return peak, name.removeprefix("aten::"), scratch


def measured_workspace(gm: Any, inputs: Sequence[Any]) -> dict[str, int] | None:
    """Each op's scratch bytes in one run of GraphModule `gm` (after a warm-up run), measured:
    how far the bytes live rise while the op runs above the most live when it starts or ends
    (its output is counted by the plan already). The fx nodes calling ATen ops, in graph order,
    are matched one to one with the top-level ATen ops of the profile, in time order; None
    when they do not match (then no measured table)."""
    import torch

    calls = [
        n
        for n in gm.graph.nodes
        if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)
    ]
    with torch.no_grad():
        gm(*inputs)
    trace, tops = _profile(lambda: gm(*inputs))
    if len(calls) != len(tops):
        return None
    out: dict[str, int] = {}
    for node, (start, end, name) in zip(calls, tops, strict=True):
        if name != node.target._schema.name:
            return None
        a = bisect.bisect_left(trace, (start, -1))
        b = bisect.bisect_right(trace, (end, 2**62))
        if b > a:
            top = max(v for _, v in trace[a:b])
            out[node.name] = max(0, top - max(_live_at(trace, start), trace[b - 1][1]))
    return out


def shape_scratch(traced: Any) -> dict[str, int]:
    """Each op's scratch bytes in eager PyTorch on the CPU, from its shapes in the traced graph:
    the library's `torch_import.cpu_scratch` (what `import_torch(workspace="runtime")` adds)."""
    from tensorplan.harness.torch_import import cpu_scratch

    return cpu_scratch(traced.module.graph)


def _with_workspace(
    order: Sequence[str],
    flow: Any,
    table: Mapping[str, float] | None = None,
    per_op: Mapping[str, int] | None = None,
    limit: float = 5.0,
) -> tuple[int, int]:
    """(live peak, best packing's peak) of `order` with workspaces: a workspace table's allocs
    (`to_instances(workspace=table)`), or one alloc of `per_op[op]` bytes live at each op;
    packed as `tensorplan plan` packs (`best_packing`, `limit` seconds)."""
    from dataclasses import replace

    from tensorplan.harness.onnx_import import lifetimes, to_instances
    from tensorplan.problems import allocation
    from tensorplan.problems.schedule import Alloc

    ws, _ = to_instances(flow, workspace=table)
    if per_op:
        ids = {o.id for o in ws.ops}
        extra = [Alloc(f"{k}.scratch", v, (k,)) for k, v in per_op.items() if v > 0 and k in ids]
        ws = replace(ws, allocs=ws.allocs + tuple(extra))
    inst = lifetimes(ws, order)
    return allocation.lower_bound(inst), best_packing(inst, time_limit=limit).peak


def onnx_route(
    name: str, module: Any, inputs: tuple[Any, ...], work: Path, limit: float
) -> dict[str, Any]:
    """Export, import, plan, emit planned.onnx; run both in onnxruntime (both modes)."""
    import numpy as np

    from tensorplan.harness.onnx_import import WORKSPACE, read_onnx, to_instances
    from tensorplan.problems import allocation

    sys.path.insert(0, str(ROOT))
    from benchmarks.zoo import export_onnx

    path = export_onnx(module, inputs, work / f"{name}.onnx")
    flow = read_onnx(path, name=name)
    sched, _ = to_instances(flow)
    plan = make_plan(sched, time_limit=limit)
    planned = work / f"{name}.planned.onnx"
    planned.write_bytes(planned_onnx_bytes(path, plan))
    import onnxruntime as ort

    names = [i.name for i in ort.InferenceSession(str(path)).get_inputs()]
    feed = work / f"{name}.feed.npz"
    np.savez(feed, **{k: x.numpy() for k, x in zip(names, inputs, strict=True)})
    row: dict[str, Any] = {
        "onnx_ops": len(sched.ops) - 1,
        "onnx_live_b": allocation.lower_bound(plan.model.instance),
        "onnx_b": plan.model.peak,
        "onnx_live_c": allocation.lower_bound(plan.planned.instance),
        "onnx_c": plan.planned.peak,
        "onnx_order": plan.order_source,
    }
    row["onnx_ws_live_c"], row["onnx_ws_c"] = _with_workspace(
        plan.order, flow, WORKSPACE, limit=limit
    )
    identical = True
    for mode in ("written", "default"):
        (m, want), (p, got) = ort_run(path, feed, mode), ort_run(planned, feed, mode)
        identical &= all(np.array_equal(a, b) for a, b in zip(want, got, strict=True))
        row[f"ort_{mode}_model"], row[f"ort_{mode}_planned"] = m["peak"], p["peak"]
        row[f"ort_{mode}_exact"] = bool(m["exact"] and p["exact"])
        if mode == "written":
            import onnx

            nodes = onnx.load(str(planned)).graph.node  # Constant nodes are initializers there
            file_order = [n.name for n in nodes if n.op_type != "Constant"]
            row["ort_follows_order"] = p["order"] == file_order
            row["ort_peak_op"] = p["at"]
    row["ort_identical"] = identical
    return row


def torch_route(name: str, module: Any, inputs: tuple[Any, ...], limit: float) -> dict[str, Any]:
    """plan_torch's steps; eager, the model-order and the planned GraphModule, measured."""
    import torch

    from tensorplan.harness.onnx_import import to_instances
    from tensorplan.harness.torch_import import TORCH_CPU_WORKSPACE, torch_dataflow
    from tensorplan.harness.torch_plan import ordered, trace
    from tensorplan.problems import allocation

    traced = trace(module, inputs, name=name)
    sched, _ = to_instances(traced.dataflow)
    plan = make_plan(sched, time_limit=limit)
    model_gm, planned_gm = ordered(traced, plan.model_order), ordered(traced, plan.order)
    with torch.no_grad():
        eager_out, model_out = module(*inputs), model_gm(*inputs)
        planned_out = planned_gm(*inputs)
    flat = torch.utils._pytree.tree_leaves
    same = all(torch.equal(a, b) for a, b in zip(flat(model_out), flat(planned_out), strict=True))
    close = all(
        torch.allclose(a, b, rtol=1e-4, atol=1e-5)
        for a, b in zip(flat(eager_out), flat(planned_out), strict=True)
    )
    row: dict[str, Any] = {
        "torch_ops": len(sched.ops) - 1,
        "torch_live_b": allocation.lower_bound(plan.model.instance),
        "torch_b": plan.model.peak,
        "torch_live_c": allocation.lower_bound(plan.planned.instance),
        "torch_c": plan.planned.peak,
        "torch_order": plan.order_source,
        "torch_identical": same and close,
    }
    flow = traced.dataflow
    table = _with_workspace(plan.order, flow, TORCH_CPU_WORKSPACE, limit=limit)
    row["torch_ws_live_c"], row["torch_ws_c"] = table
    shaped = _with_workspace(plan.order, flow, per_op=shape_scratch(traced), limit=limit)
    row["torch_wss_live_c"], row["torch_wss_c"] = shaped
    # the eager module's own run: its order, runtime scratch, module arguments held
    eager_flow = torch_dataflow(module, inputs, name=name, eager=True)
    _, eager_inst = to_instances(eager_flow, workspace="runtime")
    row["torch_eager_live"] = allocation.lower_bound(eager_inst)
    row["torch_eager_plan"] = best_packing(eager_inst, time_limit=limit).peak
    per_op = measured_workspace(model_gm, inputs)
    if per_op is not None:
        row["torch_wsm_live_c"], row["torch_wsm_c"] = _with_workspace(
            plan.order, flow, per_op=per_op, limit=limit
        )
    for key, fn in (
        ("eager", lambda: module(*inputs)),
        ("gm_model", lambda: model_gm(*inputs)),
        ("gm_planned", lambda: planned_gm(*inputs)),
    ):
        fn()  # warm: first-call allocations (oneDNN primitives, caches) are not the model's
        row[key], op, scratch = torch_peak(fn)
        if key == "gm_planned":
            row["peak_op"], row["peak_scratch"] = op, scratch
    return row


DEFAULT_ZOO = (
    "branchy_cnn",
    "resnet18",
    "resnet50",
    "mobilenet_v3_large",
    "efficientnet_b0",
    "bert",
)
"""The models part `zoo` runs unless `--zoo` names others."""


def zoo_models(deps: Path, only: Sequence[str]) -> list[tuple[str, str, Any]]:
    """(name, source, builder) of the zoo models named in `only` (in that order): the small
    ones of benchmarks/zoo.py, torchvision's and transformers' (random weights; both are
    installed into `deps` the first time one is asked for, never the project's dependencies).
    """
    sys.path.insert(0, str(ROOT))
    from benchmarks import zoo

    known: dict[str, tuple[str, Any]] = {
        n: ("code (benchmarks/zoo.py)", lambda n=n: zoo.build(n)) for n in zoo.ZOO
    }
    known |= {n: ("torchvision", lambda n=n: zoo.hub(n)) for n in zoo.TORCHVISION}
    known |= {n: ("transformers", lambda n=n: zoo.hub(n)) for n in zoo.TRANSFORMERS}
    unknown = [n for n in only if n not in known]
    if unknown:
        raise SystemExit(f"unknown zoo model(s) {unknown}; known: {sorted(known)}")
    if any(known[n][0] != "code (benchmarks/zoo.py)" for n in only):
        zoo.install_hub(deps)
    return [(n, *known[n]) for n in only]


def zoo_rows(limit: float, deps: Path, only: Sequence[str] = DEFAULT_ZOO) -> list[dict]:
    import tempfile
    import time
    import traceback

    rows: list[dict[str, Any]] = []
    for name, source, build in zoo_models(deps, only):
        row: dict[str, Any] = {"model": name, "source": source}
        started = time.perf_counter()
        module, inputs = build()
        with tempfile.TemporaryDirectory() as tmp:
            for route in ("onnx", "torch"):
                try:
                    if route == "onnx":
                        row.update(onnx_route(name, module, inputs, Path(tmp), limit))
                    else:
                        row.update(torch_route(name, module, inputs, limit))
                except Exception as err:  # a model one exporter cannot take: say so, go on
                    row[f"{route}_error"] = f"{type(err).__name__}: {str(err)[:200]}"
                    traceback.print_exc()
        row["time_s"] = round(time.perf_counter() - started, 1)
        rows.append(row)
        print(row, flush=True)
    return rows


def mib(x: object) -> str:
    return f"{int(x) / 2**20:,.1f}"  # type: ignore[call-overload]


def markdown(
    shift: list[dict[str, object]],
    plans: list[dict[str, object]],
    args: Any,
    zoo: Sequence[dict[str, Any]] = (),
) -> str:
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
    if zoo:
        lines += zoo_markdown(zoo, args)
    return "\n".join(lines)


def kib(x: Any) -> str:
    return "-" if x is None or x == "" else f"{int(x) / 1024:,.0f}"


def _ratio(a: Any, b: Any) -> str:
    """a / b - 1 as a signed percentage ("-" when either is missing)."""
    if a in (None, "") or b in (None, "", 0):
        return "-"
    return f"{int(a) / int(b) - 1:+.1%}"


def _yes(x: Any) -> str:
    return "-" if x in (None, "") else ("yes" if x else "**no**")


def zoo_markdown(zoo: Sequence[dict[str, Any]], args: Any) -> list[str]:
    """The two tables of part `zoo`: onnxruntime and PyTorch peaks against the plans."""
    lines = [
        "## Planned models, run and measured (issue 31)",
        "",
        "Written by `.venv/bin/python -m benchmarks.models --zoo-only` (models: "
        + ", ".join(f"`{r['model']}`" for r in zoo)
        + "; torchvision's with `weights=None`, BERT-base from `BertConfig()` with "
        '`attn_implementation="eager"` (explicit matmul + softmax attention), random weights, '
        "no download; batch 1, images 224 x 224, 128 tokens). torchvision and transformers are "
        "benchmark-only: `install_hub` in `benchmarks/zoo.py` puts torchvision into `--deps` "
        "(the index's build is the CUDA one; its model definitions are loaded without its "
        "compiled operators) and transformers there too unless the venv has it; neither is a "
        "dependency of tensorplan. Each model is planned twice: its ONNX export (TorchScript "
        "exporter, opset 17) through `tensorplan plan`'s steps, which also write "
        "`planned.onnx`; and its `torch.export` graph through `tensorplan.plan_torch`, which "
        "returns a GraphModule running in the planned order "
        f"({args.zoo_limit:g} s per planning step). Then the original and the planned model "
        "run on the same inputs and their outputs are compared. Peaks in KiB, activations only "
        "(weights and inputs excluded, outputs included). Raw rows: `results/models_zoo.csv`.",
        "",
        "- plan (b): the model's own order, best packing; plan (c): the planned order, best "
        "packing; live (c): the bytes live at the planned order's worst step (no packing goes "
        "below it). +ws: (c)'s order with one workspace alloc per op, live at that op only, "
        "packed by the same portfolio (`best_packing`): onnxruntime, the table "
        "`onnx_import.WORKSPACE` (an assumption: one output per Conv and Gelu, not calibrated "
        "for onnxruntime); PyTorch, *+ws table*: `torch_import.TORCH_CPU_WORKSPACE` (measured: "
        "a convolution holds a copy of its input and of its weight, `max_pool2d` its int64 "
        "indices; see its docstring), *+ws shapes*: `torch_import.cpu_scratch` "
        "(`import_torch(workspace='runtime')`), the table's terms "
        "from each op's shapes and arguments plus the two cases a per-byte table cannot say "
        "(the 3-channel stem convolution; a 1x1 convolution with stride 2 holds one more "
        "output), *+ws measured*: each op's own scratch, measured in the "
        "model-order GraphModule's run (the rise of the bytes live while the op runs above "
        "what is live when it starts or ends).",
        "- onnxruntime: the CPU arena's peak over the first run of a fresh session (its "
        "profiler's `mem_in_use_peak` less what was in use before the first node; one thread). "
        "*as written*: no graph optimisation and `ExecutionOrder.PRIORITY_BASED`, which runs a "
        "topologically sorted file in its own order (`follows`: the profiler's node sequence is "
        "planned.onnx's); *default*: onnxruntime's defaults (fusions, its own order), a "
        "different graph from the planned one. `same`: both files give identical outputs "
        "(bit for bit) in both modes. A `≥` marks a peak the arena's counter hid (lower bound). "
        "onnxruntime reuses buffers in place (an activation's output in its input's buffer), "
        "which the ONNX graph does not show, so it can run below the plan's live bound.",
        "- PyTorch: the running sum of torch.profiler's CPU memory events over one call "
        "(after a warm-up call; the CPU allocator keeps no cache, so every allocation and free "
        "is an event) of the eager module, of the traced "
        "GraphModule in the model's order and in the planned order (constants folded, values "
        "freed after their last use). *GM* = GraphModule. `same`: the planned GraphModule's "
        "outputs equal the model-order one's bit for bit and the eager module's within 1e-4. "
        "*At the peak*: the op running when the planned GraphModule peaks, and how far the "
        "peak rises above the bytes live when that op starts and ends (its scratch). *gain "
        "planned*: (c) against (b), and the planned GraphModule's measured peak against the "
        "model-order one's (a gain shows only if both agree).",
        "",
        "### onnxruntime",
        "",
        "| model | source | ops | plan (b) | plan (c) | live (c) | (c) +ws | as written: model "
        "order | as written: planned | default: model / planned | gain planned (plan / "
        "measured) | at the peak (planned, as written) | follows | same |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|",
    ]
    for r in zoo:
        if r.get("onnx_error"):
            lines.append(f"| {r['model']} | {r['source']} | export failed: {r['onnx_error']} |")
            continue
        mark = "" if r.get("ort_written_exact") else "≥"
        dmark = "" if r.get("ort_default_exact") else "≥"
        lines.append(
            f"| {r['model']} | {r['source']} | {r['onnx_ops']} | {kib(r['onnx_b'])} | "
            f"{kib(r['onnx_c'])} | {kib(r['onnx_live_c'])} | {kib(r['onnx_ws_c'])} | "
            f"{mark}{kib(r['ort_written_model'])} | {mark}{kib(r['ort_written_planned'])} | "
            f"{dmark}{kib(r['ort_default_model'])} / {dmark}{kib(r['ort_default_planned'])} | "
            f"{_ratio(r['onnx_c'], r['onnx_b'])} / "
            f"{_ratio(r['ort_written_planned'], r['ort_written_model'])} | "
            f"`{r.get('ort_peak_op')}` | "
            f"{_yes(r.get('ort_follows_order'))} | {_yes(r.get('ort_identical'))} |"
        )
    lines += [
        "",
        "### PyTorch (CPU): plan against measured",
        "",
        "| model | ops | plan (b) | plan (c) | live (c) | (c) +ws table | (c) +ws shapes | "
        "(c) +ws measured | eager module | GM, model order | GM, planned | (c) vs GM planned | "
        "+ws table vs GM planned | +ws shapes vs GM planned | +ws shapes vs eager | gain "
        "planned (plan / measured) | at the peak (GM planned) | same | eager plan | "
        "eager plan vs eager module |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"
        "---:|---:|",
    ]
    for r in zoo:
        if r.get("torch_error"):
            lines.append(f"| {r['model']} | trace failed: {r['torch_error']} |")
            continue
        lines.append(
            f"| {r['model']} | {r['torch_ops']} | {kib(r['torch_b'])} | {kib(r['torch_c'])} | "
            f"{kib(r['torch_live_c'])} | {kib(r['torch_ws_c'])} | {kib(r['torch_wss_c'])} | "
            f"{kib(r.get('torch_wsm_c'))} | {kib(r['eager'])} | "
            f"{kib(r['gm_model'])} | {kib(r['gm_planned'])} | "
            f"{_ratio(r['torch_c'], r['gm_planned'])} | "
            f"{_ratio(r['torch_ws_c'], r['gm_planned'])} | "
            f"{_ratio(r['torch_wss_c'], r['gm_planned'])} | "
            f"{_ratio(r['torch_wss_c'], r['eager'])} | "
            f"{_ratio(r['torch_c'], r['torch_b'])} / {_ratio(r['gm_planned'], r['gm_model'])} | "
            f"`{r.get('peak_op')}` +{kib(r.get('peak_scratch'))} | "
            f"{_yes(r.get('torch_identical'))} | {kib(r.get('torch_eager_plan'))} | "
            f"{_ratio(r.get('torch_eager_plan'), r['eager'])} |"
        )
    lines += ["", *ZOO_NOTES, ""]
    return lines


ZOO_NOTES = [
    "*eager plan*: the eager module's own run as an instance, `import_torch(eager=True, "
    "workspace='runtime')` in the model's order, packed: the runtime scratch per op, every "
    "module call's arguments held until the call returns (`hold_module_arguments`: the "
    "caller's and the callee's frames keep them), and the locals a `forward` keeps past their "
    "last use (BERT's unused attention probabilities, `_`, and its `embedding_output`) held as "
    "long as one eager run of the module kept them (`torch_eager`: a TorchFunctionMode notes "
    "each call's fresh storages, weak references note when each dies, and the calls are "
    "aligned with the traced nodes by the bytes they allocate).\n",
    "Where PyTorch's peak comes from (torch.profiler memory events, per op; torch 2.13 CPU, "
    "float32). Without workspaces the plan counts each op's inputs and outputs only, and "
    "falls short of the measured GraphModule by the scratch of the op at the peak, which is "
    "almost always a convolution: oneDNN copies the input into its blocked layout and "
    "reorders the weight on every call (eager mode keeps no packed weight), writes a blocked "
    "output, then copies it to the plain output; a 1x1 convolution with stride 2 also holds "
    "an output-sized buffer, and `max_pool2d` computes int64 indices and drops them. GELU, "
    "softmax, tanh, add, mul, embedding, addmm/linear and matmul/bmm take no scratch from "
    "PyTorch's allocator; layer_norm and batch_norm keep their per-row (per-channel) "
    "statistics (at most 16 KiB here), left out. `TORCH_CPU_WORKSPACE` holds these terms "
    "that a graph's sizes can express (a convolution: its input and weight bytes; "
    "`max_pool2d`: twice its output); what it cannot see: which convolutions oneDNN runs in "
    "the plain layout without copies (the table overstates those, e.g. efficientnet_b0's "
    "1x1 convolutions on 7 x 7 maps, never at the peak here), the stem convolution (3 input "
    "channels: no input copy, but the blocked and plain outputs coexist; not at the peak "
    "here) and the stride-2 1x1 convolution's extra output-sized buffer (resnet50's peak sits "
    "at one: the table misses it by one output there). *+ws shapes* adds those two cases "
    "from the convolution's shapes and stride (`torch_import.cpu_scratch`, which "
    "`import_torch(workspace='runtime')` adds to the instance). "
    "*+ws measured* adds every op's measured scratch instead: it matches the GraphModule's "
    "measured peak, so the whole gap is per-op scratch, none of it an allocator effect (the "
    "CPU allocator keeps no cache: each event is one allocation or free of the bytes asked "
    "for; its 64-byte alignment is below 0.01 % here).",
    "",
    "The eager module is not the graph: its Python code keeps tensors referenced after "
    "their last use in the graph, and no trace shows that. The gap *eager module* vs *GM, "
    "model order* is that. mobilenet_v3_large and efficientnet_b0: a block's `forward` "
    "argument stays referenced until the block returns, though only its first convolution "
    "reads it when the block has no residual (784 KiB at the peak). BERT (transformers "
    "5.24): `BertLayer.forward` keeps the attention probabilities it discards "
    "(`self_attention_output, _ = self.attention(...)`, 12 x 128 x 128 floats, 768 KiB) and "
    "its input hidden states (384 KiB) through the feed-forward, and `BertModel.forward` "
    "keeps `embedding_output` (384 KiB) for the whole encoder: 1,536 KiB at the GELU where "
    "both peak; the eager plan now holds all three, as measured. The plan is the graph's; it "
    "is held to the GraphModule, which runs exactly "
    "the planned ops and frees each value after its last use.",
]


def read_csv(path: Path) -> list[dict[str, Any]]:
    """Rows written by an earlier run (numbers and booleans restored), for a part not re-run."""
    import csv

    if not path.exists():
        return []

    def value(x: str) -> Any:
        if x == "":
            return None
        if x in ("True", "False"):
            return x == "True"
        for kind in (int, float):
            try:
                return kind(x)
            except ValueError:
                pass
        return x

    with path.open(newline="", encoding="utf-8") as f:
        return [{k: value(v) for k, v in row.items()} for row in csv.DictReader(f)]


def write_csv(rows: list[dict[str, object]], path: Path) -> None:
    if not rows:
        return
    write_csv_atomic(path, rows, list(dict.fromkeys(k for r in rows for k in r)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=60.0, help="shift, seconds per run")
    ap.add_argument("--exact-limit", type=float, default=20.0, help="cpsat; 0 skips it")
    ap.add_argument("--plan-limit", type=float, default=10.0, help="plan, seconds per step")
    ap.add_argument("--zoo-limit", type=float, default=5.0, help="zoo, seconds per plan step")
    ap.add_argument("--skip-plans", action="store_true", help="keep models_plans.csv's rows")
    ap.add_argument("--skip-shift", action="store_true", help="keep models_shift.csv's rows")
    ap.add_argument("--skip-zoo", action="store_true", help="keep models_zoo.csv's rows")
    ap.add_argument(
        "--zoo",
        action="append",
        metavar="NAME",
        help=f"zoo models to run (repeatable; default: {', '.join(DEFAULT_ZOO)})",
    )
    ap.add_argument(
        "--zoo-only", action="store_true", help="only part zoo (--skip-shift --skip-plans)"
    )
    ap.add_argument(
        "--deps",
        type=Path,
        default=Path("/tmp/tensorplan-benchmark-deps"),
        help="where torchvision (and transformers, unless installed) go for part zoo",
    )
    args = ap.parse_args(argv)
    if args.zoo_only:
        args.skip_shift = args.skip_plans = True
    parts = {"shift": "models_shift.csv", "plans": "models_plans.csv", "zoo": "models_zoo.csv"}
    rows: dict[str, list[dict[str, Any]]] = {}
    for part, csv_name in parts.items():
        if getattr(args, f"skip_{part}"):
            rows[part] = read_csv(OUT / csv_name)
            continue
        if part == "shift":
            rows[part] = shift_rows(args.time_limit, args.exact_limit)
        elif part == "plans":
            rows[part] = plan_rows(args.plan_limit, OUT / "models_plans")
        else:
            rows[part] = zoo_rows(args.zoo_limit, args.deps, args.zoo or DEFAULT_ZOO)
        write_csv(rows[part], OUT / csv_name)
    text = markdown(rows["shift"], rows["plans"], args, rows["zoo"])
    write_text_atomic(OUT / "models_benchmark.md", text)
    print(f"-> {OUT / 'models_benchmark.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

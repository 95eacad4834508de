"""End-to-end memory plan of a model: order -> lifetimes -> offsets -> report (issue 17).

Given a schedule instance (one op per node, one alloc per tensor, as the importers build it) and
the model's own node order, `make_plan`:

1. orders the ops: the model's order, `shift` from its usual start and `shift` from the model's
   order (each with half the time limit), plus the exact `cpsat` schedule model, warm-started,
   when the graph is small (<= `EXACT_OPS` ops) so that it can close; the order with the lowest
   live peak (the schedule instance's `peak` objective) is the candidate;
2. derives the lifetimes of that order (`onnx_import.lifetimes`) and packs them with a small
   portfolio of registered allocation solvers (`PORTFOLIO`, through `harness.run.solve`, so
   every packing is re-verified by the checker); the lowest verified peak wins;
3. packs the model's own order with the same portfolio, and keeps the model's order when the
   planned order does not pack lower: the planned peak is never above the model's order with
   the same allocator.

Baselines of the report, all under the model's own order:

- (a) *no reuse*: every tensor its own offset, peak = the sum of the sizes (what running without
  any memory planner costs; `allocation.upper_bound`);
- (a') *online first-fit*: `ff-start`, each tensor placed at the lowest free address when it is
  created, in creation order, like a simple arena/caching allocator that frees on last use;
- (b) the best packing of the model's order; (c) the planned order with its best packing.

`write_plan` writes the instances, solutions (each accepted by `tensorplan check`), `plan.json`,
`report.md` and two pictures; `check_plan` re-verifies a written plan end to end.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tensorplan.harness import registry
from tensorplan.harness.onnx_import import Constants, lifetimes
from tensorplan.harness.run import (
    check,
    load_instance,
    load_solution,
    solution_document,
    solve,
)
from tensorplan.problems import allocation, schedule
from tensorplan.problems.allocation import AllocationInstance, AllocationSolution
from tensorplan.problems.core import (
    InstanceError,
    Options,
    Result,
    Status,
    check_output,
    heuristic_result,
    stopwatch,
    write_bytes_atomic,
)
from tensorplan.problems.schedule import ScheduleInstance, ScheduleSolution

PORTFOLIO = (
    "ffd",
    "bfd",
    "ff-lifetime",
    "ff-area",
    "xla",
    "ff-start",
    "omnimalloc-omni",
    "multistart",
    "bb-lds",
    "cpsat",
)
"""Allocation solvers tried on each order, in this order, while the best peak is above the
live-size lower bound; those not registered (an extra not installed) are skipped. Each solver
that takes a time limit gets `SHARE` of the time left (default: all of it); solvers that take
a hint start from the best packing so far."""
SHARE = {"multistart": 1 / 3, "bb-lds": 1 / 2}
EXACT_OPS = 60
"""Graphs up to this many ops also get the exact `cpsat` schedule model (it closes quickly)."""
FILES = {
    "schedule": "schedule.json",
    "schedule_solution": "schedule.solution.json",
    "model_allocation": "model-order.allocation.json",
    "model_solution": "model-order.solution.json",
    "planned_allocation": "planned.allocation.json",
    "planned_solution": "planned.solution.json",
}


@dataclass(frozen=True)
class Packing:
    """The best verified packing of one allocation instance and every portfolio try."""

    instance: AllocationInstance
    result: Result
    tries: tuple[tuple[str, str, int | None, float], ...]  # (solver, status, peak, seconds)
    runtime_s: float

    @property
    def peak(self) -> int:
        assert self.result.objective is not None
        return int(self.result.objective)

    @property
    def solution(self) -> AllocationSolution:
        return self.result.solution


@dataclass(frozen=True)
class Plan:
    """Everything the report shows; `order` is the planned order (op ids)."""

    name: str
    schedule: ScheduleInstance
    model_order: tuple[str, ...]
    order: tuple[str, ...]
    order_source: str
    schedule_tries: tuple[tuple[str, str, int | None, float], ...]
    schedule_runtime_s: float
    model: Packing
    planned: Packing
    no_reuse: int
    online_first_fit: int
    timings: dict[str, float] = field(default_factory=dict)

    def offsets(self) -> dict[str, int]:
        inst = self.planned.instance
        return {b.id: o for b, o in zip(inst.buffers, self.planned.solution.offsets, strict=True)}


def best_packing(
    inst: AllocationInstance,
    *,
    time_limit: float = 10.0,
    seed: int = 0,
    solvers: Sequence[str] = PORTFOLIO,
) -> Packing:
    """Run each available solver of `solvers` (warm-started from the best so far) and keep the
    lowest verified peak; stops as soon as a packing meets the live-size lower bound."""
    known = registry.solvers("allocation")
    best: Result | None = None
    best_peak: int | None = None
    tries: list[tuple[str, str, int | None, float]] = []
    with stopwatch() as elapsed:
        for name in solvers:
            if name not in known:
                continue
            left = max(time_limit - elapsed(), 0.1)
            limit = left * SHARE.get(name, 1.0)
            takes_hint = "hint" in known[name].honours
            hint = best.solution if best is not None and takes_hint else None
            res = solve(inst, name, Options(time_limit=limit, seed=seed, hint=hint))
            ok = res.status in (Status.OPTIMAL, Status.FEASIBLE) and res.solution is not None
            peak = None if res.objective is None or not ok else int(res.objective)
            tries.append((name, str(res.status), peak, res.runtime_s))
            if peak is not None and (best_peak is None or peak < best_peak):
                best, best_peak = res, peak
            if best_peak is not None and best_peak <= allocation.lower_bound(inst):
                break
    if best is None:
        raise RuntimeError(f"no allocation solver among {', '.join(solvers)} found a packing")
    return Packing(inst, best, tuple(tries), elapsed())


def plan_order(
    sched: ScheduleInstance, model_order: Sequence[str], *, time_limit: float = 10.0
) -> tuple[tuple[str, ...], str, tuple[tuple[str, str, int | None, float], ...], float]:
    """(order, where it came from, the tries, seconds): the lowest live peak among the model's
    order, `shift` from its own start and from the model's order, and `cpsat` on small graphs."""
    if sched.objective != "peak":
        raise ValueError("plan_order needs a schedule instance with objective 'peak'")
    g = sched.graph
    index = sched.index()
    model = tuple(model_order)
    model_peak = schedule.order_objective(g, [index[x] for x in model], "peak")
    candidates: list[tuple[int, int, str, tuple[str, ...]]] = [
        (model_peak, 0, "model order", model)
    ]
    tries: list[tuple[str, str, int | None, float]] = [("model order", "given", model_peak, 0.0)]
    with stopwatch() as elapsed:
        runs: list[tuple[str, str, Any]] = [
            ("shift", "shift", None),
            ("shift from the model order", "shift", ScheduleSolution(model)),
        ]
        for k, (label, solver, hint) in enumerate(runs, start=1):
            res = solve(sched, solver, Options(time_limit=time_limit / 2, hint=hint))
            _consider(res, label, k, candidates, tries)
        if len(sched.ops) <= EXACT_OPS and "cpsat" in registry.solvers("schedule"):
            best = min(candidates)
            hint = ScheduleSolution(best[3])
            res = solve(sched, "cpsat", Options(time_limit=time_limit, hint=hint))
            _consider(res, "cpsat (exact)", len(runs) + 1, candidates, tries)
    _, _, source, order = min(candidates)
    return order, source, tuple(tries), elapsed()


def _consider(
    res: Result,
    label: str,
    rank: int,
    candidates: list[tuple[int, int, str, tuple[str, ...]]],
    tries: list[tuple[str, str, int | None, float]],
) -> None:
    ok = res.status in (Status.OPTIMAL, Status.FEASIBLE) and res.solution is not None
    value = int(res.objective) if ok and res.objective is not None else None
    tries.append((label, str(res.status), value, res.runtime_s))
    if value is not None:
        candidates.append((value, rank, label, tuple(res.solution.order)))


def make_plan(
    sched: ScheduleInstance,
    model_order: Sequence[str] | None = None,
    *,
    time_limit: float = 10.0,
    seed: int = 0,
    alignment: int = 1,
    solvers: Sequence[str] = PORTFOLIO,
) -> Plan:
    """Plan a schedule instance (its `peak` variant is used) whose model order is `model_order`
    (default: the order of `sched.ops`). `time_limit` bounds each of the three steps."""
    if not sched.ops:
        raise InstanceError("ops", "the model has no op: nothing to plan")
    if not sched.allocs:
        raise InstanceError("allocs", "the model has no tensor to place: nothing to plan")
    if sched.objective != "peak":
        sched = ScheduleInstance(sched.ops, sched.allocs, "peak", sched.name)
    model = tuple(model_order) if model_order is not None else tuple(o.id for o in sched.ops)
    violations = schedule.check(sched, ScheduleSolution(model))
    if violations:
        raise InstanceError("model order", f"not a valid schedule: {violations[0]}")
    name = sched.name or "model"
    timings: dict[str, float] = {}
    with stopwatch() as elapsed:
        model_inst = lifetimes(sched, model, alignment=alignment, name=f"{name} (model order)")
        model_pack = best_packing(model_inst, time_limit=time_limit, seed=seed, solvers=solvers)
    timings["pack model order"] = elapsed()
    online = solve(model_inst, "ff-start").objective
    order, source, tries, sched_s = plan_order(sched, model, time_limit=time_limit)
    timings["schedule"] = sched_s
    with stopwatch() as elapsed:
        if order == model:
            planned = model_pack
        else:
            inst = lifetimes(sched, order, alignment=alignment, name=f"{name} (planned order)")
            planned = best_packing(inst, time_limit=time_limit, seed=seed, solvers=solvers)
    timings["pack planned order"] = elapsed()
    if planned.peak > model_pack.peak:  # planning did not help once packed: keep the model's
        order, source, planned = model, f"model order ({source} packed higher)", model_pack
    planned = Packing(
        _renamed(planned.instance, f"{name} (planned order)"),
        planned.result,
        planned.tries,
        planned.runtime_s,
    )
    return Plan(
        name,
        sched,
        model,
        order,
        source,
        tries,
        sched_s,
        model_pack,
        planned,
        allocation.upper_bound(model_inst),
        int(online) if online is not None else allocation.upper_bound(model_inst),
        timings,
    )


def _renamed(inst: AllocationInstance, name: str) -> AllocationInstance:
    return AllocationInstance(inst.buffers, inst.alignment, inst.capacity, name)


# --- writing and checking ------------------------------------------------------------------------


def write_plan(plan: Plan, outdir: str | Path, *, pictures: bool = True, **meta: Any) -> Path:
    """Write the plan's files into `outdir` (see FILES, plus plan.json, report.md, PNGs); every
    file is built first (`plan_files`), so a failure leaves nothing half-made behind."""
    out = Path(outdir)
    _write_files(out, plan_files(plan, pictures=pictures, **meta))
    return out / "report.md"


def output_names(pictures: bool = True) -> list[str]:
    """The names of the files a plan writes (`plan_files`)."""
    return [*FILES.values(), "plan.json", *_figures(pictures), "report.md"]


def check_outputs(outdir: str | Path, pictures: bool = True) -> None:
    """Before planning: every file of the plan can be written (`core.check_output`); OSError
    naming the first that cannot."""
    out = Path(outdir)
    if out.exists() and not out.is_dir():
        raise InstanceError("-o", "is a file, not a directory", out)
    for name in output_names(pictures):
        check_output(out / name)


def plan_files(plan: Plan, *, pictures: bool = True, **meta: Any) -> dict[str, bytes]:
    """Every file of a written plan (name -> contents), built in memory: nothing is written."""
    files: dict[str, bytes] = {}

    def put(name: str, doc: Any) -> None:
        files[name] = (json.dumps(doc, indent=1) + "\n").encode()

    put(FILES["schedule"], schedule.instance_to_json(plan.schedule))
    order_value = schedule.evaluate(plan.schedule, ScheduleSolution(plan.order))
    order_res = heuristic_result(
        plan.order_source, order_value, ScheduleSolution(plan.order), plan.schedule_runtime_s
    )
    put(FILES["schedule_solution"], solution_document(plan.schedule, order_res))
    for key, pack in (("model", plan.model), ("planned", plan.planned)):
        put(FILES[f"{key}_allocation"], allocation.instance_to_json(pack.instance))
        put(FILES[f"{key}_solution"], solution_document(pack.instance, pack.result))
    inst = plan.planned.instance
    put(
        "plan.json",
        {
            "name": plan.name,
            **meta,
            "peak": plan.planned.peak,
            "order_source": plan.order_source,
            "order": list(plan.order),
            "offsets": plan.offsets(),
            "sizes": {b.id: b.size for b in inst.buffers},
            "lifetimes": {b.id: [b.start, b.end] for b in inst.buffers},
            "baselines": baselines(plan),
            "files": FILES,
            "check": [
                f"tensorplan check {FILES['schedule']} {FILES['schedule_solution']}",
                f"tensorplan check {FILES['planned_allocation']} {FILES['planned_solution']}",
                f"tensorplan check {FILES['model_allocation']} {FILES['model_solution']}",
            ],
        },
    )
    figures = picture_files(plan) if pictures else {}
    files.update(figures)
    files["report.md"] = report(plan, list(figures), **meta).encode()
    return files


def _write_files(out: Path, files: dict[str, bytes]) -> None:
    """Write `files` into `out`, each through a temporary file renamed over its target."""
    for name in files:  # refuse before writing any: a device or FIFO where a file goes
        check_output(out / name)
    for name, data in files.items():
        write_bytes_atomic(out / name, data)


def baselines(plan: Plan) -> dict[str, int]:
    return {
        "a_model_order_no_reuse": plan.no_reuse,
        "a2_model_order_online_first_fit": plan.online_first_fit,
        "b_model_order_best_packing": plan.model.peak,
        "c_planned_order_best_packing": plan.planned.peak,
        "live_peak_model_order": allocation.lower_bound(plan.model.instance),
        "live_peak_planned_order": allocation.lower_bound(plan.planned.instance),
    }


def check_plan(outdir: str | Path) -> list[str]:
    """Re-verify a written plan: the order is a valid schedule of the schedule instance, the
    planned allocation instance holds exactly that order's lifetimes, the offsets pass the
    allocation checker and plan.json agrees with the solution files. Returns violations."""
    out = Path(outdir)
    sched = load_instance(out / FILES["schedule"])
    _, order = load_solution(out / FILES["schedule_solution"], sched)
    problems = [f"schedule: {v}" for v in check(sched, order)[0]]
    if problems:
        return problems
    inst = load_instance(out / FILES["planned_allocation"])
    expected = lifetimes(sched, order.order, alignment=inst.alignment)
    want = {b.id: (b.size, b.start, b.end) for b in expected.buffers}
    have = {b.id: (b.size, b.start, b.end) for b in inst.buffers}
    if want != have:
        bad = sorted(set(want.items()) ^ set(have.items()))[:3]
        problems.append(f"lifetimes: planned allocation does not follow the order: {bad}")
    _, sol = load_solution(out / FILES["planned_solution"], inst)
    violations, peak = check(inst, sol)
    problems += [f"allocation: {v}" for v in violations]
    doc = json.loads((out / "plan.json").read_text(encoding="utf-8"))
    offsets = {b.id: o for b, o in zip(inst.buffers, sol.offsets, strict=True)}
    if doc["order"] != list(order.order) or doc["offsets"] != offsets:
        problems.append("plan.json: order or offsets differ from the solution files")
    if doc["peak"] != peak:
        problems.append(f"plan.json: peak {doc['peak']} but the offsets reach {peak}")
    return problems


# --- report --------------------------------------------------------------------------------------


def _mib(x: float) -> str:
    return f"{x / 2**20:,.2f}"


def report(plan: Plan, figures: Sequence[str] = (), **meta: Any) -> str:
    """The Markdown report: the four peaks, time per step, the portfolio tries, the files."""
    b = baselines(plan)
    n_tensors = len(plan.schedule.allocs)
    total = sum(a.size for a in plan.schedule.allocs)

    def row(label: str, order: str, allocator: str, peak: int) -> str:
        share = f"{peak / plan.no_reuse:.1%}" if plan.no_reuse else "–"
        return f"| {label} | {order} | {allocator} | {peak:,} | {_mib(peak)} | {share} |"

    lines = [
        f"# Memory plan: {plan.name}",
        "",
        *(f"- {k}: `{v}`" for k, v in meta.items()),
        f"- {len(plan.schedule.ops)} ops, {n_tensors} planned tensors, {total:,} bytes in all",
        f"- planned order: {plan.order_source}",
        "",
        "| plan | order | allocator | peak (bytes) | peak (MiB) | vs (a) |",
        "|---|---|---|---:|---:|---:|",
        row("(a) no reuse", "model", "every tensor its own offset", plan.no_reuse),
        row("(a') online first-fit", "model", "`ff-start`", plan.online_first_fit),
        row(
            "(b) model order, best packing",
            "model",
            f"`{plan.model.result.solver}`",
            b["b_model_order_best_packing"],
        ),
        row("(c) planned", "planned", f"`{plan.planned.result.solver}`", plan.planned.peak),
        "",
        f"Live peak (sum of the sizes live at one step; no packing can go below it): "
        f"{b['live_peak_model_order']:,} bytes under the model's order, "
        f"{b['live_peak_planned_order']:,} under the planned order.",
        "",
        "## Time per step",
        "",
        "| step | seconds |",
        "|---|---:|",
        *(f"| {k} | {v:.2f} |" for k, v in plan.timings.items()),
        "",
        "## Tries",
        "",
        "| step | solver | status | peak (bytes) | seconds |",
        "|---|---|---|---:|---:|",
    ]
    for step, tries in (
        ("schedule (live peak)", plan.schedule_tries),
        ("pack model order", plan.model.tries),
        ("pack planned order", plan.planned.tries if plan.order != plan.model_order else ()),
    ):
        for solver, status, peak, secs in tries:
            shown = "-" if peak is None else f"{peak:,}"
            lines.append(f"| {step} | {solver} | {status} | {shown} | {secs:.2f} |")
    lines += ["", "## Files", ""]
    lines += [f"- `{f}`" for f in FILES.values()]
    lines += [
        "- `plan.json`: the order, every tensor's offset, size and lifetime, the baselines",
        "",
        "Verify (each prints the objective: live peak of the order, then the packed peaks):",
        "",
        "```",
        f"tensorplan check {FILES['schedule']} {FILES['schedule_solution']}",
        f"tensorplan check {FILES['planned_allocation']} {FILES['planned_solution']}",
        f"tensorplan check {FILES['model_allocation']} {FILES['model_solution']}",
        "```",
        "",
        "`tensorplan.harness.plan.check_plan(DIR)` also checks that the planned allocation's "
        "lifetimes are exactly those of the planned order.",
    ]
    if figures:
        lines += ["", *(f"![{f}]({f})" for f in figures)]
    return "\n".join(lines) + "\n"


def picture_files(plan: Plan) -> dict[str, bytes]:
    """PNGs: `live-memory.png` (bytes live per step, both orders) and `packing.png` (planned
    order), by name."""
    from tensorplan.harness.figures import subplots
    from tensorplan.harness.picture_allocation import picture

    g = plan.schedule.graph
    index = plan.schedule.index()
    fig, ax = subplots(figsize=(9, 3.6))
    for label, order, colour, width in (
        ("model order", plan.model_order, "tab:grey", 2.5),
        ("planned order", plan.order, "tab:blue", 1.0),
    ):
        live = schedule.profile(g, [index[x] for x in order]) / 2**20
        ax.step(
            range(len(live)), live, where="post", color=colour, lw=width, label=f"{label}: live"
        )
    ax.axhline(plan.model.peak / 2**20, color="tab:grey", ls="--", lw=0.8, label="(b) packed")
    ax.axhline(plan.planned.peak / 2**20, color="tab:blue", ls="--", lw=0.8, label="(c) packed")
    ax.set(xlabel="step", ylabel="MiB", title=f"{plan.name}: memory live at each step")
    ax.legend(fontsize=8)
    fig.tight_layout()
    out = {"live-memory.png": _png(fig)}
    fig = picture(
        plan.planned.instance, {f"planned, {plan.planned.result.solver}": plan.planned.solution}
    )
    out["packing.png"] = _png(fig)
    return out


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    return buf.getvalue()


def plan_model(
    model: str | Path,
    outdir: str | Path,
    *,
    dims: Sequence[str] | dict[str, int] = (),
    include_inputs: bool = False,
    time_limit: float = 10.0,
    seed: int = 0,
    pictures: bool = True,
    alignment: int = 1,
    constants: Constants = "exclude",
    workspace: Mapping[str, float] | None = None,
) -> tuple[Plan, Path]:
    """`tensorplan plan MODEL.onnx`: import, plan, write; returns (plan, report path).

    `model` may also be a schedule instance file (`.json`, e.g. `instances/schedule/model-*`):
    its op list is then the model's order. `alignment`: every buffer's offset is a multiple of
    it (the allocation instances' alignment); `constants` and `workspace` (a table like
    `onnx_import.WORKSPACE`): as `onnx_import.to_instances`, ONNX models only."""
    from tensorplan.harness.onnx_import import import_onnx, parse_dims

    bound = dict(dims) if isinstance(dims, dict) else parse_dims(dims)
    check_outputs(outdir, pictures)  # before the work: a failing -o is found at once
    with stopwatch() as elapsed:
        if Path(model).suffix == ".json":
            sched = load_instance(model)
            if not isinstance(sched, ScheduleInstance):
                raise InstanceError("problem", "plan needs an ONNX model or a schedule instance")
        else:
            sched, _ = import_onnx(
                model,
                dims=bound,
                include_inputs=include_inputs,
                constants=constants,
                workspace=workspace,
                name=Path(model).stem,
            )
    imported = elapsed()
    try:
        plan = make_plan(sched, time_limit=time_limit, seed=seed, alignment=alignment)
    except InstanceError as err:
        raise (err if err.file else err.in_file(model)) from None
    plan = replace(plan, timings={"import": imported, **plan.timings})
    meta: dict[str, Any] = {"model": str(model)}
    if bound:
        meta["dims"] = bound
    if include_inputs:
        meta["include_inputs"] = True
    if alignment != 1:
        meta["alignment"] = alignment
    if constants != "exclude":
        meta["constants"] = constants
    if workspace:
        meta["workspace"] = dict(workspace)
    with stopwatch() as elapsed:
        files = plan_files(plan, pictures=pictures, **meta)
    plan.timings["report"] = elapsed()
    files["report.md"] = report(plan, _figures(pictures), **meta).encode()  # with its own time
    if Path(model).suffix != ".json":  # the executable plan (issue 31): harness/emit.py
        from tensorplan.harness.emit import planned_onnx_bytes

        files["planned.onnx"] = planned_onnx_bytes(model, plan, meta)
    _write_files(Path(outdir), files)
    return plan, Path(outdir) / "report.md"


def _figures(pictures: bool) -> list[str]:
    return ["live-memory.png", "packing.png"] if pictures else []

"""Executable plans (issue 31, items 2 and 4): `tensorplan plan` writes `planned.onnx` (the nodes
in the planned order, the memory plan in its metadata) that passes `onnx.checker` and gives the
original's outputs in onnxruntime; `tensorplan.plan_torch` returns a GraphModule that runs in
the planned order and gives the module's outputs. Every zoo model (`benchmarks/zoo.py`: a
branchy CNN with in-place ReLUs, an attention block, an MoE router, an unrolled recurrent loop;
built in code, no weights file) goes through both routes, under the planned order and under
random valid orders (the emitters must keep any order the schedule allows correct)."""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

onnx = pytest.importorskip("onnx")
torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")
import numpy as np  # noqa: E402

from tensorplan.harness.emit import (  # noqa: E402
    PLAN_KEY,
    interleave,
    planned_onnx,
    read_memory_plan,
)
from tensorplan.harness.onnx_import import END_OP, import_onnx, lifetimes  # noqa: E402
from tensorplan.harness.plan import best_packing, plan_model  # noqa: E402
from tensorplan.problems.core import InstanceError  # noqa: E402
from tensorplan.problems.schedule import ScheduleInstance  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 1.0  # seconds per planning step: the zoo's graphs are small


def _zoo() -> ModuleType:
    spec = importlib.util.spec_from_file_location("zoo", ROOT / "benchmarks" / "zoo.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


ZOO = _zoo()
NAMES = list(ZOO.ZOO)


def random_order(sched: ScheduleInstance, seed: int) -> list[str]:
    """A random valid order of a schedule instance (Kahn's algorithm, random pick)."""
    rng = random.Random(seed)
    waiting = {o.id: set(o.after) for o in sched.ops}
    order: list[str] = []
    while waiting:
        ready = sorted(x for x, deps in waiting.items() if not deps)
        pick = rng.choice(ready)
        order.append(pick)
        del waiting[pick]
        for deps in waiting.values():
            deps.discard(pick)
    return order


def stub_plan(sched: ScheduleInstance, order: list[str]) -> Any:
    """What the emitters read of a Plan, for an order the planner did not choose."""
    pack = best_packing(lifetimes(sched, order), time_limit=1, solvers=("ffd",))
    model = tuple(o.id for o in sched.ops)
    return SimpleNamespace(
        name="random", order=tuple(order), model_order=model, order_source="random", planned=pack
    )


def session(model: Any) -> Any:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    data = model if isinstance(model, bytes) else str(model)
    return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])


def random_feed(sess: Any, example: tuple[Any, ...], seed: int = 0) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    return {
        i.name: rng.standard_normal(x.shape).astype(np.float32)
        for i, x in zip(sess.get_inputs(), example, strict=True)
    }


def op_sequence(names: list[str], order: tuple[str, ...] | list[str]) -> list[str]:
    ops = set(order)
    return [x for x in names if x in ops]


def outputs(value: Any) -> tuple[Any, ...]:
    return tuple(value) if isinstance(value, tuple | list) else (value,)


# --- the interleaving of non-op nodes ------------------------------------------------------------


def test_interleave_places_non_ops_before_their_first_user_and_sinks_early() -> None:
    """Nodes: 0 an input (first), 1 = op A(0), 2 = a view of 1 (no op), 3 = op B(0), 4 = op C(2),
    5 = a dead node reading 1 (a sink, no op), 6 = output(3, 4) (last). Order B, A, C: the view
    goes just before C, the sink right after A."""
    deps = [[], [0], [1], [0], [2], [1], [3, 4]]
    assert interleave(deps, [3, 1, 4], first=[0], last=[6]) == [0, 3, 1, 5, 2, 4, 6]
    with pytest.raises(ValueError, match="comes later"):
        interleave(deps, [4, 1, 3], first=[0], last=[6])  # C needs A through the view


# --- ONNX: tensorplan plan -> planned.onnx -> onnxruntime ----------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_plan_writes_planned_onnx_that_checks_and_runs(name: str, tmp_path: Path) -> None:
    module, example = ZOO.build(name)
    path = ZOO.export_onnx(module, example, tmp_path / f"{name}.onnx")
    plan, _ = plan_model(path, tmp_path / "plan", pictures=False, time_limit=LIMIT)
    planned = tmp_path / "plan" / "planned.onnx"
    onnx.checker.check_model(str(planned), full_check=True)
    model = onnx.load(str(planned))
    names = [n.name for n in model.graph.node]
    assert op_sequence(names, plan.order) == [x for x in plan.order if x != END_OP]
    doc = read_memory_plan(model)
    assert doc["order"] == list(plan.order) and doc["peak"] == plan.planned.peak
    offsets = plan.offsets()
    buffers = {b["id"]: b for b in doc["buffers"]}
    assert {k: b["offset"] for k, b in buffers.items()} == offsets
    for b in plan.planned.instance.buffers:
        assert (buffers[b.id]["size"], buffers[b.id]["start"], buffers[b.id]["end"]) == (
            b.size,
            b.start,
            b.end,
        )
    spans = sorted(buffers.values(), key=lambda b: b["offset"])  # no two live ones overlap
    for i, a in enumerate(spans):
        for b in spans[i + 1 :]:
            if b["offset"] >= a["offset"] + a["size"]:
                break
            assert b["end"] < a["start"] or a["end"] < b["start"], (a, b)
    assert max(b["offset"] + b["size"] for b in spans) <= doc["peak"]
    want, got = session(path), session(planned)
    for seed in (0, 1):
        feed = random_feed(want, example, seed)
        for a, b in zip(want.run(None, feed), got.run(None, feed), strict=True):
            np.testing.assert_array_equal(a, b)
    with torch.no_grad():  # and the runtime computes what PyTorch does
        ref = outputs(module(*example))
    feed = {i.name: x.numpy() for i, x in zip(want.get_inputs(), example, strict=True)}
    for r, b in zip(ref, got.run(None, feed), strict=True):
        np.testing.assert_allclose(r.numpy(), b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", NAMES)
def test_planned_onnx_under_random_valid_orders_gives_the_same_outputs(
    name: str, tmp_path: Path
) -> None:
    """Any order the schedule allows (its write-after-read edges included) emits a model that
    runs with the original's outputs, its nodes in that order."""
    module, example = ZOO.build(name)
    path = ZOO.export_onnx(module, example, tmp_path / f"{name}.onnx")
    sched, _ = import_onnx(path)
    want = session(path)
    feed = random_feed(want, example)
    expected = want.run(None, feed)
    for seed in (1, 2, 3):
        order = random_order(sched, seed)
        model = planned_onnx(path, stub_plan(sched, order))
        assert op_sequence([n.name for n in model.graph.node], order) == [
            x for x in order if x != END_OP
        ]
        got = session(model.SerializeToString()).run(None, feed)
        for a, b in zip(expected, got, strict=True):
            np.testing.assert_array_equal(a, b)


def test_planned_onnx_of_a_model_without_its_weights(tmp_path: Path) -> None:
    """The shipped graphs hold no weights (absent external data): planned.onnx keeps the same
    references, says so in the plan, and its structure passes the checker."""
    from tensorplan.harness.plan import make_plan

    path = ROOT / "instances" / "models" / "mobilenetv2.onnx"
    sched, _ = import_onnx(path, dims={"batch": 1})
    order = random_order(sched, 0)
    model = planned_onnx(path, stub_plan(sched, order), meta={"dims": {"batch": 1}})
    doc = read_memory_plan(model)
    assert doc["weights"].startswith("external data") and doc["dims"] == {"batch": 1}
    assert [p.key for p in model.metadata_props].count(PLAN_KEY) == 1
    assert len(model.graph.node) == len(onnx.load(str(path), load_external_data=False).graph.node)
    plan = make_plan(sched, time_limit=LIMIT)
    with pytest.raises(InstanceError, match="no node"):  # a plan of another model
        planned_onnx(ROOT / "instances" / "models" / "resnet50.onnx", plan)


def test_cli_plan_writes_planned_onnx(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tensorplan.harness.cli import main

    module, example = ZOO.build("recurrent")
    path = ZOO.export_onnx(module, example, tmp_path / "rnn.onnx")
    out = tmp_path / "out"
    assert main(["plan", str(path), "-o", str(out), "--no-plots", "--time-limit", "1"]) == 0
    doc = read_memory_plan(out / "planned.onnx")
    assert f"peak {doc['peak']}" in capsys.readouterr().out


def test_cli_plan_takes_workspace_and_constants(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`plan --workspace table` adds one scratch buffer per convolution, sized as
    `onnx_import.WORKSPACE` says (its output's bytes), and records the table in the plan;
    `--workspace FILE.json` takes the user's own table; `--constants plan` plans the tensors
    computed from constants alone, which the default folds: more buffers, none of them scratch."""
    import json

    from tensorplan.harness.cli import main

    module, example = ZOO.build("branchy_cnn")
    path = ZOO.export_onnx(module, example, tmp_path / "cnn.onnx")
    _, plain = import_onnx(path)
    convs = [n for n in onnx.load(str(path)).graph.node if n.op_type == "Conv"]
    assert convs

    def plan(*flags: str) -> dict[str, Any]:
        out = tmp_path / f"out{len(list(tmp_path.iterdir()))}"
        argv = ["plan", str(path), "-o", str(out), "--no-plots", "--time-limit", "1", *flags]
        assert main(argv) == 0
        return read_memory_plan(out / "planned.onnx")

    def scratch(doc: dict[str, Any]) -> dict[str, int]:
        return {b["id"]: b["size"] for b in doc["buffers"] if b["id"].endswith(".workspace")}

    sizes = {b.id: b.size for b in plain.buffers}
    outs = {n.name: sizes[n.output[0]] for n in convs}
    table = plan("--workspace", "table")
    assert scratch(table) == {f"{k}.workspace": v for k, v in outs.items()}
    assert table["workspace"]["Conv"] == 1.0
    assert "workspace" not in plan() and not scratch(plan())
    mine = tmp_path / "mine.json"
    mine.write_text(json.dumps({"Conv": 0.5}))
    assert scratch(plan("--workspace", str(mine))) == {
        f"{k}.workspace": v // 2 for k, v in outs.items()
    }
    kept = plan("--constants", "plan")
    assert kept["constants"] == "plan" and not scratch(kept)
    assert len(kept["buffers"]) >= len(plan()["buffers"])
    capsys.readouterr()


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--workspace", "nope.json"], "--workspace: expected `table` or a JSON file"),
        (["--workspace", "BAD"], "--workspace: expected `table`"),
        (["--constants", "fold"], "--constants: invalid choice"),
    ],
)
def test_cli_plan_workspace_errors_are_one_line(
    flags: list[str], needle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tensorplan.harness.cli import main

    bad = tmp_path / "bad.json"
    bad.write_text('{"Conv": -1}')
    with pytest.raises(SystemExit) as stop:
        main(["plan", "m.onnx", "-o", str(tmp_path / "o"), *flags])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1
    with pytest.raises(SystemExit):
        main(["plan", "m.onnx", "-o", str(tmp_path / "o"), "--workspace", str(bad)])
    assert "'Conv' must map to a number >= 0, got -1" in capsys.readouterr().err
    schedule = ROOT / "instances" / "schedule" / "grid-3x3-s2.json"
    with pytest.raises(SystemExit):
        main(["plan", str(schedule), "-o", str(tmp_path / "o"), "--workspace", "table"])
    assert "--workspace is for ONNX models" in capsys.readouterr().err


# --- PyTorch: plan_torch -> GraphModule ----------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_plan_torch_graph_module_runs_in_the_planned_order(name: str) -> None:
    import tensorplan

    module, example = ZOO.build(name)
    gm, plan = tensorplan.plan_torch(module, example, time_limit=LIMIT)
    assert isinstance(gm, torch.fx.GraphModule)
    names = [n.name for n in gm.graph.nodes]
    assert op_sequence(names, plan.order) == [x for x in plan.order if x != END_OP]
    with torch.no_grad():
        want = outputs(module(*example))
        x = tuple(torch.randn_like(t) for t in example)
        again = outputs(module(*x))
        got, got_x = outputs(gm(*example)), outputs(gm(*x))
    for a, b in zip((*want, *again), (*got, *got_x), strict=True):
        torch.testing.assert_close(a, b)


def test_plan_torch_with_runtime_workspaces_plans_the_scratch_and_runs_the_same() -> None:
    """workspace="runtime": every convolution of the branchy CNN gets its measured scratch as
    a buffer of the plan (none without it), and the GraphModule still gives the module's
    outputs."""
    import tensorplan
    from tensorplan.harness.torch_plan import trace

    module, example = ZOO.build("branchy_cnn")
    _, plain = tensorplan.plan_torch(module, example, time_limit=LIMIT)
    gm, plan = tensorplan.plan_torch(module, example, time_limit=LIMIT, workspace="runtime")
    scratch = trace(module, example).dataflow.scratch
    assert scratch and all(v > 0 for v in scratch.values())
    sizes = {b.id: b.size for b in plan.planned.instance.buffers}
    assert {k: sizes.get(f"{k}.workspace") for k in scratch} == dict(scratch)
    assert not any(b.id.endswith(".workspace") for b in plain.planned.instance.buffers)
    with torch.no_grad():
        for a, b in zip(outputs(module(*example)), outputs(gm(*example)), strict=True):
            torch.testing.assert_close(a, b)


@pytest.mark.parametrize("name", NAMES)
def test_graph_module_under_random_valid_orders_gives_the_same_outputs(name: str) -> None:
    from tensorplan.harness.onnx_import import to_instances
    from tensorplan.harness.torch_plan import ordered, trace

    module, example = ZOO.build(name)
    traced = trace(module, example)
    sched, _ = to_instances(traced.dataflow)
    model = ordered(traced, [o.id for o in sched.ops])
    with torch.no_grad():
        expected = outputs(model(*example))
        for seed in (1, 2, 3):
            order = random_order(sched, seed)
            gm = ordered(traced, order)
            assert op_sequence([n.name for n in gm.graph.nodes], order) == order[:-1]
            for a, b in zip(expected, outputs(gm(*example)), strict=True):
                assert torch.equal(a, b)


def test_constants_are_folded_into_buffers() -> None:
    """The recurrent cell's `zeros` start state and the MoE's `zeros_like` routing table: the
    first is computed from nothing (a constant, folded into a buffer), the second is written in
    place (`scatter_`), so it stays an op of the plan."""
    import tensorplan

    gm, plan = tensorplan.plan_torch(*ZOO.build("recurrent"), time_limit=LIMIT)
    targets = {str(n.target) for n in gm.graph.nodes if n.op == "call_function"}
    assert "aten.zeros.default" not in targets and "zeros" not in plan.order
    assert any(name.startswith("_tensorplan_constant") for name, _ in gm.named_buffers())
    _, moe = tensorplan.plan_torch(*ZOO.build("moe_router"), time_limit=LIMIT)
    assert "zeros_like" in moe.order and "scatter_" in moe.order


@pytest.mark.parametrize("name", ["branchy_cnn", "attention"])
def test_plan_torch_training_step_matches_autograd(name: str) -> None:
    """One training step: the stand-in loss (the mean of the output), every parameter gradient
    and the updated BatchNorm statistics equal eager autograd's on a copy of the module
    (dropout off: its draws would differ)."""
    import copy

    import tensorplan

    module, example = ZOO.build(name)
    for m in module.modules():  # random in training: the two runs would draw differently
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    eager = copy.deepcopy(module).train()
    gm, plan = tensorplan.plan_torch(module, example, training=True, time_limit=LIMIT)
    assert plan.order[-1] == END_OP
    loss, grads, buffers = gm(*example)
    assert not loss.requires_grad  # the module's own parameters are read, not recorded
    out = outputs(eager(*example))
    want = sum(t.mean() for t in out[1:]) + out[0].mean()
    want.backward()
    torch.testing.assert_close(loss, want.detach())
    params = dict(eager.named_parameters())
    assert {k.removeprefix("inner.") for k in grads} == set(params)
    for k, g in grads.items():
        torch.testing.assert_close(g, params[k.removeprefix("inner.")].grad)
    states = dict(eager.named_buffers())
    for k, b in buffers.items():
        torch.testing.assert_close(b, states[k.removeprefix("inner.")])
    for p in module.parameters():  # the planned step left the module untouched
        assert p.grad is None


def test_plan_torch_is_a_lazy_attribute() -> None:
    import tensorplan
    from tensorplan.harness.torch_plan import plan_torch

    assert tensorplan.plan_torch is plan_torch and "plan_torch" in tensorplan.__all__

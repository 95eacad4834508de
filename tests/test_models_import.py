"""ONNX / PyTorch import, the end-to-end memory plan, and the shipped real-model instances.

Every graph here is built with `onnx.helper` (no exporter needed) and small enough that the
expected sizes and lifetimes are worked out by hand in the comments.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

onnx = pytest.importorskip("onnx")
from onnx import ModelProto, TensorProto, helper  # noqa: E402

from tensorplan.harness.cli import main  # noqa: E402
from tensorplan.harness.onnx_import import (  # noqa: E402
    END_OP,
    Dataflow,
    Node,
    import_onnx,
    lifetimes,
    parse_dims,
    to_instances,
)
from tensorplan.harness.plan import check_plan, make_plan, write_plan  # noqa: E402
from tensorplan.harness.run import load_instance  # noqa: E402
from tensorplan.problems import allocation, schedule  # noqa: E402
from tensorplan.problems.core import InstanceError  # noqa: E402
from tensorplan.problems.schedule import Alloc, Op, ScheduleInstance  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
F32, F16 = TensorProto.FLOAT, TensorProto.FLOAT16


def weight(name: str, shape: list[int], dtype: int = F32) -> TensorProto:
    """An initializer with dims but no data (external data that is absent), like the shipped
    graph-only models: only its shape matters to the importer."""
    t = TensorProto(name=name, data_type=dtype, dims=shape)
    t.data_location = TensorProto.EXTERNAL
    e = t.external_data.add()
    e.key, e.value = "location", "absent.bin"
    return t


def model(nodes, inputs, outputs, inits=(), opset: int = 17) -> ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def conv_block() -> ModelProto:
    """x[N,3,8,8] -> conv(3->8, pad 1) -> a -> relu -> b -> conv(8->8, pad 1) -> c; d = b + c."""
    return model(
        [
            helper.make_node("Conv", ["x", "w1"], ["a"], "conv1", pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["a"], ["b"], "relu"),
            helper.make_node("Conv", ["b", "w2"], ["c"], "conv2", pads=[1, 1, 1, 1]),
            helper.make_node("Add", ["b", "c"], ["d"], "add"),
        ],
        [helper.make_tensor_value_info("x", F32, ["N", 3, 8, 8])],
        [helper.make_tensor_value_info("d", F32, None)],
        [weight("w1", [8, 3, 3, 3]), weight("w2", [8, 8, 3, 3])],
    )


def attention_block() -> ModelProto:
    """Single-head attention in float16 (2 bytes): X[1,4,8]; Q, K, V = X @ W*; S = Q @ K^T;
    P = softmax(S); O = P @ V. Q, K, V, Kt, O: 1*4*8*2 = 64 bytes; S, P: 1*4*4*2 = 32 bytes."""
    return model(
        [
            helper.make_node("MatMul", ["X", "wq"], ["Q"], "q"),
            helper.make_node("MatMul", ["X", "wk"], ["K"], "k"),
            helper.make_node("MatMul", ["X", "wv"], ["V"], "v"),
            helper.make_node("Transpose", ["K"], ["Kt"], "kt", perm=[0, 2, 1]),
            helper.make_node("MatMul", ["Q", "Kt"], ["S"], "s"),
            helper.make_node("Softmax", ["S"], ["P"], "p", axis=-1),
            helper.make_node("MatMul", ["P", "V"], ["O"], "o"),
        ],
        [helper.make_tensor_value_info("X", F16, [1, 4, 8])],
        [helper.make_tensor_value_info("O", F16, None)],
        [weight(w, [8, 8], F16) for w in ("wq", "wk", "wv")],
    )


def allocs(inst: ScheduleInstance) -> dict[str, tuple[int, tuple[str, ...]]]:
    return {a.id: (a.size, a.ops) for a in inst.allocs}


def spans(inst: allocation.AllocationInstance) -> dict[str, tuple[int, int, int]]:
    return {b.id: (b.size, b.start, b.end) for b in inst.buffers}


# --- import -------------------------------------------------------------------------------------


def test_conv_block_sizes_and_lifetimes_by_hand() -> None:
    sched, alloc = import_onnx(conv_block(), dims={"N": 2})
    assert [(o.id, o.after) for o in sched.ops] == [
        ("conv1", ()),
        ("relu", ("conv1",)),
        ("conv2", ("relu",)),
        ("add", ("relu", "conv2")),
        (END_OP, ("add",)),  # after every sink: it holds the graph output
    ]
    act = 2 * 8 * 8 * 8 * 4  # N * C * H * W * float32 = 4096 bytes
    assert allocs(sched) == {
        "a": (act, ("conv1", "relu")),
        "b": (act, ("relu", "conv2", "add")),
        "c": (act, ("conv2", "add")),
        "d": (act, ("add", END_OP)),  # the graph output: from its producer to the end
    }
    assert spans(alloc) == {"a": (act, 0, 1), "b": (act, 1, 3), "c": (act, 2, 3), "d": (act, 3, 4)}
    assert allocation.lower_bound(alloc) == 3 * act  # b, c and d at the add
    assert sched.objective == "peak"


def test_include_inputs_adds_graph_inputs_and_weights() -> None:
    sched, alloc = import_onnx(conv_block(), dims={"N": 2}, include_inputs=True)
    extra = {k: v for k, v in allocs(sched).items() if k not in "abcd"}
    assert extra == {
        "x": (2 * 3 * 8 * 8 * 4, ("conv1",)),  # 1536
        "w1": (8 * 3 * 3 * 3 * 4, ("conv1",)),  # 864
        "w2": (8 * 8 * 3 * 3 * 4, ("conv2",)),  # 2304
    }
    assert spans(alloc)["w2"] == (2304, 2, 2)


def test_attention_block_float16_sizes_by_hand() -> None:
    sched, alloc = import_onnx(attention_block())
    assert {k: v[0] for k, v in allocs(sched).items()} == {
        "Q": 64,
        "K": 64,
        "V": 64,
        "Kt": 64,
        "S": 32,
        "P": 32,
        "O": 64,
    }
    assert spans(alloc) == {
        "Q": (64, 0, 4),
        "K": (64, 1, 3),
        "V": (64, 2, 6),
        "Kt": (64, 3, 4),
        "S": (32, 4, 5),
        "P": (32, 5, 6),
        "O": (64, 6, 7),  # held by the end op
    }
    # model order: Q, K, V and Kt live together at the transpose
    assert allocation.lower_bound(alloc) == 256


def test_symbolic_dims() -> None:
    with pytest.raises(InstanceError, match=r"tensor 'x'.*symbolic \('N'\).*--dim N=VALUE"):
        import_onnx(conv_block())
    with pytest.raises(InstanceError, match=r"--dim batch.*symbolic dims: N"):
        import_onnx(conv_block(), dims={"batch": 1})
    small, _ = import_onnx(conv_block(), dims={"N": 1})
    big, _ = import_onnx(conv_block(), dims={"N": 5})
    assert [5 * a.size for a in small.allocs] == [a.size for a in big.allocs]
    assert parse_dims(["N=3", " seq = 128"]) == {"N": 3, "seq": 128}
    for bad in ("N", "N=0", "N=x", "=3"):
        with pytest.raises(InstanceError, match="--dim"):
            parse_dims([bad])


def test_unsupported_op_names_the_tensor() -> None:
    m = model(
        [
            helper.make_node("Relu", ["x"], ["y"], "relu"),
            helper.make_node("FrobnicateX", ["y"], ["z"], "frob"),
            helper.make_node("Relu", ["z"], ["out"], "relu2"),
        ],
        [helper.make_tensor_value_info("x", F32, [2, 2])],
        [helper.make_tensor_value_info("out", F32, None)],
    )
    with pytest.raises(InstanceError, match=r"tensor 'z'.*node 'frob'.*'FrobnicateX'.*unsupported"):
        import_onnx(m)


def test_subgraph_is_rejected_naming_the_node() -> None:
    branch = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["t"])],
        "branch",
        [],
        [helper.make_tensor_value_info("t", F32, [2])],
    )
    m = model(
        [
            helper.make_node("Constant", [], ["c"], value=helper.make_tensor("v", 9, [], [True])),
            helper.make_node("If", ["c"], ["y"], "choose", then_branch=branch, else_branch=branch),
        ],
        [helper.make_tensor_value_info("x", F32, [2])],
        [helper.make_tensor_value_info("y", F32, None)],
    )
    with pytest.raises(InstanceError, match=r"node 'choose' \(If\).*subgraph.*control flow"):
        import_onnx(m)


def test_unsupported_dtype_is_a_clear_error() -> None:
    m = model(
        [helper.make_node("Cast", ["x"], ["s"], "to_text", to=TensorProto.STRING)],
        [helper.make_tensor_value_info("x", F32, [3])],
        [helper.make_tensor_value_info("s", TensorProto.STRING, None)],
    )
    with pytest.raises(InstanceError, match=r"tensor 's'.*dtype STRING has no fixed size"):
        import_onnx(m)


def test_shape_arithmetic_is_folded() -> None:
    """y = x[:, : shape(x)[1] // 2], the pattern exporters emit for chunk/split: after binding N
    the Shape -> Gather -> Div -> Unsqueeze chain is evaluated, so Slice's output is [3, 4]."""
    i64 = TensorProto.INT64
    m = model(
        [
            helper.make_node("Shape", ["x"], ["s"], "shape"),
            helper.make_node("Gather", ["s", "one"], ["g"], "gather", axis=0),
            helper.make_node("Div", ["g", "two"], ["h"], "div"),
            helper.make_node("Unsqueeze", ["h", "zero1"], ["u"], "unsq"),
            helper.make_node("Slice", ["x", "zero1", "u", "one1"], ["y"], "slice"),
            helper.make_node("Relu", ["y"], ["z"], "relu"),
        ],
        [helper.make_tensor_value_info("x", F32, ["N", 8])],
        [helper.make_tensor_value_info("z", F32, None)],
        [
            helper.make_tensor("one", i64, [], [1]),
            helper.make_tensor("two", i64, [], [2]),
            helper.make_tensor("zero1", i64, [1], [0]),
            helper.make_tensor("one1", i64, [1], [1]),
        ],
    )
    sched, _ = import_onnx(m, dims={"N": 3})
    sizes = {a.id: a.size for a in sched.allocs}
    assert sizes["y"] == sizes["z"] == 3 * 4 * 4


def test_graph_output_lives_to_the_end() -> None:
    """Two outputs: `early` is made first, the sinks are `head` and `tail`; the end op comes after
    both and holds `early` from its producer on, whatever the order."""
    m = model(
        [
            helper.make_node("Relu", ["x"], ["early"], "head"),
            helper.make_node("Relu", ["x"], ["m"], "mid"),
            helper.make_node("Relu", ["m"], ["late"], "tail"),
        ],
        [helper.make_tensor_value_info("x", F32, [4])],
        [helper.make_tensor_value_info(t, F32, None) for t in ("early", "late")],
    )
    sched, alloc = import_onnx(m)
    assert allocs(sched)["early"] == (16, ("head", END_OP))
    assert sched.ops[-1] == Op(END_OP, ("head", "tail"))
    assert spans(alloc)["early"] == (16, 0, 3)


def test_node_list_must_be_topological() -> None:
    flow = Dataflow("f", (Node("b", "Relu", ("t",), ("u",)), Node("a", "Relu", (), ("t",))), {})
    with pytest.raises(InstanceError, match="reads tensor 't' before"):
        to_instances(flow)


def test_unnamed_and_duplicate_node_names_get_unique_ids() -> None:
    m = model(
        [
            helper.make_node("Relu", ["x"], ["y"]),
            helper.make_node("Relu", ["y"], ["z"], "r"),
            helper.make_node("Relu", ["z"], ["w"], "r"),
        ],
        [helper.make_tensor_value_info("x", F32, [4])],
        [helper.make_tensor_value_info("w", F32, None)],
    )
    sched, _ = import_onnx(m)
    assert [o.id for o in sched.ops] == ["Relu_0", "r", "Relu_2", END_OP]


def test_missing_file_names_it(tmp_path: Path) -> None:
    with pytest.raises(InstanceError, match="no such file"):
        import_onnx(tmp_path / "nope.onnx")
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\xff\x00 not protobuf")
    with pytest.raises(InstanceError, match=r"bad\.onnx"):
        import_onnx(bad)


# --- plan ---------------------------------------------------------------------------------------


def test_plan_reorders_attention_to_the_optimum(tmp_path: Path) -> None:
    """Computing K and K^T before Q, and V last, keeps at most 160 bytes live (the 160 bytes
    the Q @ K^T matmul itself needs: an exact lower bound); the model's order needs 256."""
    sched, _ = import_onnx(attention_block())
    plan = make_plan(sched, time_limit=5)
    assert plan.model.peak == 256
    assert plan.planned.peak == 160 == schedule.lower_bound(sched)
    assert plan.no_reuse == 64 * 5 + 32 * 2
    write_plan(plan, tmp_path, pictures=False)
    assert check_plan(tmp_path) == []
    doc = json.loads((tmp_path / "plan.json").read_text())
    assert doc["peak"] == 160 and len(doc["order"]) == 8  # 7 nodes and the end op


def test_plan_check_catches_tampering(tmp_path: Path) -> None:
    sched, _ = import_onnx(attention_block())
    write_plan(make_plan(sched, time_limit=2), tmp_path, pictures=False)
    doc = json.loads((tmp_path / "planned.allocation.json").read_text())
    doc["buffers"][0]["end"] += 1  # a lifetime the order does not give
    (tmp_path / "planned.allocation.json").write_text(json.dumps(doc))
    assert any(p.startswith("lifetimes:") for p in check_plan(tmp_path))


def random_graph(n: int, seed: int) -> ScheduleInstance:
    """A random DAG in topological order: op i reads 1-2 earlier outputs; alloc i is op i's
    output (size 1-9) used by its readers."""
    r = random.Random(seed)
    reads: list[list[int]] = [[]]
    for i in range(1, n):
        reads.append(sorted(r.sample(range(i), min(i, r.randint(1, 2)))))
    users = {i: [i] + [j for j in range(n) if i in reads[j]] for i in range(n)}
    ops = tuple(Op(f"o{i}", tuple(f"o{j}" for j in reads[i])) for i in range(n))
    return ScheduleInstance(
        ops,
        tuple(Alloc(f"t{i}", r.randint(1, 9), tuple(f"o{j}" for j in users[i])) for i in range(n)),
        "peak",
        f"random-{n}-{seed}",
    )


@pytest.mark.parametrize("seed", range(6))
def test_planned_peak_never_above_model_order_same_allocator(seed: int) -> None:
    sched = random_graph(14, seed)
    for solvers in (("ffd",), ("ff-start",), ("ffd", "multistart")):
        plan = make_plan(sched, time_limit=1, solvers=solvers)
        assert plan.planned.peak <= plan.model.peak
        assert plan.planned.result.solver in solvers and plan.model.result.solver in solvers
        assert allocation.check(plan.planned.instance, plan.planned.solution) == []
        # the planned instance's lifetimes are those of the planned order
        assert spans(plan.planned.instance) == spans(lifetimes(sched, plan.order))


def test_cli_import_plan_and_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "attn.onnx"
    onnx.save(attention_block(), str(path))
    assert main(["import", "onnx", str(path), "-o", str(tmp_path / "imp")]) == 0
    sched = load_instance(tmp_path / "imp" / "attn.schedule.json")
    alloc = load_instance(tmp_path / "imp" / "attn.allocation.json")
    assert len(sched.ops) == 8 and len(alloc.buffers) == 7  # 7 nodes and the end op
    assert main(["import", "onnx", str(path), "-o", str(tmp_path / "w"), "--include-inputs"]) == 0
    assert len(load_instance(tmp_path / "w" / "attn.allocation.json").buffers) == 11
    out = tmp_path / "plan"
    assert main(["plan", str(path), "-o", str(out), "--time-limit", "3", "--no-plots"]) == 0
    capsys.readouterr()
    for inst, sol, value in (
        ("schedule.json", "schedule.solution.json", "160"),
        ("planned.allocation.json", "planned.solution.json", "160"),
        ("model-order.allocation.json", "model-order.solution.json", "256"),
    ):
        assert main(["check", str(out / inst), str(out / sol)]) == 0
        assert capsys.readouterr().out.strip() == f"feasible, peak {value}"
    assert "(c) planned" in (out / "report.md").read_text()
    conv = tmp_path / "conv.onnx"
    onnx.save(conv_block(), str(conv))
    assert main(["import", "onnx", str(conv), "-o", str(tmp_path / "x")]) == 2
    assert "--dim N=VALUE" in capsys.readouterr().err
    assert main(["import", "onnx", str(conv), "-o", str(tmp_path / "x"), "--dim", "N=1"]) == 0


def test_plan_pictures(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    sched, _ = import_onnx(conv_block(), dims={"N": 1})
    write_plan(make_plan(sched, time_limit=1), tmp_path)
    assert (tmp_path / "live-memory.png").stat().st_size > 0
    assert (tmp_path / "packing.png").stat().st_size > 0


# --- shipped models -----------------------------------------------------------------------------

MODELS = ("resnet50", "mobilenetv2", "bert-base", "gpt2-small")


@pytest.mark.parametrize("name", MODELS)
def test_shipped_model_instances_match_their_onnx_file(name: str) -> None:
    """`instances/tools/build_models.py --instances-only` would rewrite exactly these files."""
    path = ROOT / "instances" / "models" / f"{name}.onnx"
    assert path.stat().st_size < 300_000  # graph only: no weights inside
    sched, alloc = import_onnx(path, dims={"batch": 1}, name=f"model-{name}")
    for problem, inst in (("schedule", sched), ("allocation", alloc)):
        shipped = load_instance(ROOT / "instances" / problem / f"model-{name}.json")
        assert shipped == inst


@pytest.mark.parametrize("name", ("resnet50-train", "mobilenetv2-train"))
def test_shipped_training_steps_are_consistent(name: str) -> None:
    """The allocation instance is the schedule instance's lifetimes under its own op order."""
    sched = load_instance(ROOT / "instances" / "schedule" / f"model-{name}.json")
    alloc = load_instance(ROOT / "instances" / "allocation" / f"model-{name}.json")
    assert spans(alloc) == spans(lifetimes(sched, [o.id for o in sched.ops]))
    assert schedule.check(sched, schedule.ScheduleSolution(tuple(o.id for o in sched.ops))) == []


def test_weight_sizes_of_shipped_resnet50() -> None:
    """The stripped weights keep their shapes: ResNet-50 has 25.5 M parameters (BatchNorm folded
    into the convolutions: 25,530,472 weights and biases), 4 bytes each."""
    sched, _ = import_onnx(
        ROOT / "instances" / "models" / "resnet50.onnx", dims={"batch": 1}, include_inputs=True
    )
    image = 3 * 224 * 224 * 4
    planned = {a.id: a.size for a in sched.allocs}
    plain, _ = import_onnx(ROOT / "instances" / "models" / "resnet50.onnx", dims={"batch": 1})
    inputs = sum(planned.values()) - sum(a.size for a in plain.allocs)
    assert inputs - image == 25_530_472 * 4


# --- PyTorch ------------------------------------------------------------------------------------


def test_import_torch_both_routes() -> None:
    torch = pytest.importorskip("torch")
    from torch import nn

    from tensorplan import import_torch

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(4, 8)

        def forward(self, x):
            return torch.relu(self.fc(x)) * 2

    x = torch.zeros(2, 4)
    # every intermediate is [2, 8] float32 = 64 bytes: linear, relu, mul
    sched, alloc = import_torch(Block(), (x,))
    assert [a.size for a in sched.allocs] == [64, 64, 64]
    assert [(b.start, b.end) for b in alloc.buffers] == [(0, 1), (1, 2), (2, 3)]  # 3: end op
    # through ONNX: Gemm, Relu, a Constant node (the scalar 2: excluded, like a weight), Mul
    sched, alloc = import_torch(Block(), (x,), via="onnx")
    assert [a.size for a in sched.allocs] == [64, 64, 64]
    assert [(b.start, b.end) for b in alloc.buffers] == [(0, 1), (1, 2), (2, 3)]
    sched, alloc = import_torch(Block(), (x,), via="onnx", constants="plan")
    assert [a.size for a in sched.allocs] == [64, 64, 4, 64]  # the Constant planned (4 bytes)
    assert [(b.start, b.end) for b in alloc.buffers] == [(0, 1), (1, 3), (2, 3), (3, 4)]
    sched, _ = import_torch(Block(), (x,), include_inputs=True)
    assert sorted(a.size for a in sched.allocs) == [32, 32, 64, 64, 64, 128]  # x, bias, W


def test_import_torch_views_alias_and_training_step() -> None:
    torch = pytest.importorskip("torch")
    from torch import nn

    from tensorplan.harness.torch_import import import_torch

    class Heads(nn.Module):
        def forward(self, x):
            a, b = x.view(2, 2, 4).transpose(1, 2).split(1, dim=2)  # views only: no memory
            return (a * b).sum()

    sched, _ = import_torch(Heads(), (torch.zeros(4, 4),), include_inputs=True)
    # x (64 bytes) is read by the mul through its views; mul [2,4,1] = 32 bytes; sum 4 bytes,
    # the output, used by its producer and the end op
    assert [o.id.rstrip("_0123456789") for o in sched.ops] == ["mul", "sum", END_OP]
    assert sorted((a.size, len(a.ops)) for a in sched.allocs) == [(4, 2), (32, 2), (64, 1)]

    class MLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc1, self.fc2 = torch.nn.Linear(4, 8), torch.nn.Linear(8, 2)

        def forward(self, x):
            return self.fc2(torch.relu(self.fc1(x)))

    sched, alloc = import_torch(MLP(), (torch.zeros(3, 4),), training=True)
    g = sched.graph
    order = list(range(g.n))
    # the forward activation relu(fc1(x)) [3, 8] is read by the backward: it lives past the loss
    relu = next(a for a in sched.allocs if a.id.startswith("relu"))
    assert relu.size == 3 * 8 * 4 and len(relu.ops) >= 3
    assert schedule.order_objective(g, order, "peak") == allocation.lower_bound(alloc)

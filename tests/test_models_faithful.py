"""Faithful instances (issue 31, item 1): lifetimes from the producer, constants excluded, one
buffer per storage, in-place writes ordered after their readers, workspaces, training steps that
hold the loss and the gradients, the shape folder, and the importer's refusals (issue 34).

Every expected number is worked out by hand in the comments, or counted by a walker written here
that does not use the importer: it runs the exported graph node by node on real tensors (PyTorch)
or walks the ONNX graph, and follows each storage by its address."""

from __future__ import annotations

import importlib.util
import itertools
import json
import random
from pathlib import Path
from typing import Any, cast

import pytest
from hypothesis import given
from hypothesis import strategies as st

onnx = pytest.importorskip("onnx")
from onnx import ModelProto, TensorProto, helper  # noqa: E402

from tensorplan.harness.onnx_import import (  # noqa: E402
    END_OP,
    WORKSPACE,
    _copy,
    _evaluate,
    import_onnx,
    load_model,
    parse_dims,
    write_onnx_instances,
)
from tensorplan.harness.run import load_instance  # noqa: E402
from tensorplan.problems import allocation, schedule  # noqa: E402
from tensorplan.problems.core import InstanceError  # noqa: E402
from tensorplan.problems.schedule import ScheduleInstance, ScheduleSolution  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
F32, I64 = TensorProto.FLOAT, TensorProto.INT64


def model(nodes, inputs, outputs, inits=(), opset: int = 17) -> ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def vi(name: str, shape: Any, dtype: int = F32) -> Any:
    return helper.make_tensor_value_info(name, dtype, shape)


def spans(inst: allocation.AllocationInstance) -> dict[str, tuple[int, int, int]]:
    return {b.id: (b.size, b.start, b.end) for b in inst.buffers}


def model_peak(inst: allocation.AllocationInstance) -> int:
    return allocation.lower_bound(inst)


# --- lifetimes start at the producer --------------------------------------------------------------


def test_onnx_output_is_live_from_its_producer_not_from_a_dead_node() -> None:
    """`dead = Relu(x)` is read by nobody (a sink) and comes first; `y = Relu(Relu(x))` is the
    output. The output lives from its producer (step 2) to the end op (step 3), not from step 0."""
    m = model(
        [
            helper.make_node("Relu", ["x"], ["dead"], "dead"),
            helper.make_node("Relu", ["x"], ["h"], "h"),
            helper.make_node("Relu", ["h"], ["y"], "y"),
        ],
        [vi("x", [4])],
        [vi("y", None)],
    )
    sched, alloc = import_onnx(m)
    assert spans(alloc) == {"dead": (16, 0, 0), "h": (16, 1, 2), "y": (16, 2, 3)}
    assert [o.id for o in sched.ops] == ["dead", "h", "y", END_OP]
    assert sched.ops[-1].after == ("dead", "y")  # after every sink: last in any order
    assert model_peak(alloc) == 32  # h and y at step 2; before the fix, dead + h + y = 48


def test_torch_output_is_live_from_its_producer() -> None:
    """BERT's pattern: torch.export keeps an unused `arange` at the top. x [2, 8] float32: every
    activation is 64 bytes; the output (`mul`) is live from its producer only."""
    torch = pytest.importorskip("torch")
    from torch import nn

    from tensorplan import import_torch

    class M(nn.Module):
        def forward(self, x):
            torch.arange(8)  # unused, like transformers' position ids
            h = torch.relu(x)
            g = torch.sigmoid(h)
            return g * h

    sched, alloc = import_torch(M(), (torch.zeros(2, 8),))
    assert [o.id for o in sched.ops] == ["relu", "sigmoid", "mul", END_OP]  # arange: constant
    assert spans(alloc) == {"relu": (64, 0, 2), "sigmoid": (64, 1, 2), "mul": (64, 2, 3)}
    _, kept = import_torch(M(), (torch.zeros(2, 8),), constants="plan")
    # planned as an activation, arange (8 x int64 = 64 bytes) is a dead node: its own step only
    assert spans(kept)["arange"] == (64, 0, 0) and spans(kept)["mul"] == (64, 3, 4)
    assert model_peak(kept) == model_peak(alloc) == 192


# --- constants -----------------------------------------------------------------------------------


def constant_heavy() -> ModelProto:
    """x [2, 4]; w [4] a weight; wi = Identity(w); c = Constant [4]; k = wi + c (all computable
    ahead: 16 bytes each); s = Shape(x) (16 bytes), n = Gather(s, 1); r = Reshape(x * k, s);
    out = Relu(r). Activations: x * k and out (32 bytes each); r aliases x * k."""
    return model(
        [
            helper.make_node("Identity", ["w"], ["wi"], "wi"),
            helper.make_node(
                "Constant", [], ["c"], "c", value=helper.make_tensor("v", F32, [4], [1.0] * 4)
            ),
            helper.make_node("Add", ["wi", "c"], ["k"], "k"),
            helper.make_node("Shape", ["x"], ["s"], "s"),
            helper.make_node("Mul", ["x", "k"], ["xk"], "xk"),
            helper.make_node("Reshape", ["xk", "s"], ["r"], "r"),
            helper.make_node("Relu", ["r"], ["out"], "out"),
        ],
        [vi("x", [2, 4])],
        [vi("out", None)],
        [helper.make_tensor("w", F32, [4], [0.5] * 4)],
    )


def test_onnx_constants_excluded_by_default_planned_on_request() -> None:
    sched, alloc = import_onnx(constant_heavy())
    assert [o.id for o in sched.ops] == ["xk", "r", "out", END_OP]
    assert spans(alloc) == {"xk": (32, 0, 2), "out": (32, 2, 3)}  # r, read by out, is xk
    sched, alloc = import_onnx(constant_heavy(), constants="plan")
    assert [o.id for o in sched.ops] == ["wi", "c", "k", "s", "xk", "r", "out", END_OP]
    # wi aliases the weight w (the caller's memory); c, k: 16 bytes; s: 2 x int64 = 16 bytes
    assert spans(alloc) == {
        "c": (16, 1, 2),
        "k": (16, 2, 4),
        "s": (16, 3, 5),
        "xk": (32, 4, 6),
        "out": (32, 6, 7),
    }
    # with include_inputs the excluded constants are weights: used by their readers
    sched, _ = import_onnx(constant_heavy(), include_inputs=True)
    sizes = {a.id: a.size for a in sched.allocs}
    assert sizes == {"x": 32, "k": 16, "s": 16, "xk": 32, "out": 32}  # w: read by wi only


def test_torch_constants_excluded_unless_written_in_place() -> None:
    """A parameter-only computation (`w * 2`), an `arange` and `zeros_like` are constants; a
    `zeros` buffer that is then written in place (`index_fill_`) is not."""
    torch = pytest.importorskip("torch")
    from torch import nn

    from tensorplan import import_torch

    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(4))

        def forward(self, x):
            k = self.w * 2 + torch.arange(4)  # 16 bytes each, all constant
            m = torch.zeros(4).index_fill_(0, torch.tensor([1]), 1.0)  # written: planned
            return x * k + m + torch.zeros_like(x)

    sched, alloc = import_torch(M(), (torch.zeros(2, 4),))
    kinds = [o.id.rstrip("_0123456789") for o in sched.ops]
    assert kinds == ["zeros", "index_fill", "mul", "add", "add", END_OP]
    assert sorted(b.size for b in alloc.buffers) == [16, 32, 32, 32]  # zeros; 3 x [2, 4]


# --- storage shared ------------------------------------------------------------------------------


def test_onnx_aliases_are_one_buffer_with_the_union_of_lifetimes() -> None:
    """a = Relu(x) [2, 6] (48 bytes); b = Reshape(a) [3, 4]; c = Flatten(b) [3, 4];
    d = Squeeze(Unsqueeze(c)); e = Identity(d); f = Dropout(e) (inference: no training_mode);
    the outputs g = Relu(f) and h = Sigmoid(a): a..f are one storage, live from Relu to the last
    reader of any of them (g at step 7, h at step 8)."""
    i64 = helper.make_tensor
    m = model(
        [
            helper.make_node("Relu", ["x"], ["a"], "a"),
            helper.make_node("Reshape", ["a", "shape"], ["b"], "b"),
            helper.make_node("Flatten", ["b"], ["c"], "c"),
            helper.make_node("Unsqueeze", ["c", "ax"], ["u"], "u"),
            helper.make_node("Squeeze", ["u", "ax"], ["d"], "d"),
            helper.make_node("Identity", ["d"], ["e"], "e"),
            helper.make_node("Dropout", ["e"], ["f"], "f"),
            helper.make_node("Relu", ["f"], ["g"], "g"),
            helper.make_node("Sigmoid", ["a"], ["h"], "h"),
        ],
        [vi("x", [2, 6])],
        [vi("g", None), vi("h", None)],
        [i64("shape", I64, [2], [3, 4]), i64("ax", I64, [1], [0])],
    )
    sched, alloc = import_onnx(m)
    assert spans(alloc) == {"a": (48, 0, 8), "g": (48, 7, 9), "h": (48, 8, 9)}
    ops = {o.id: o.after for o in sched.ops}
    assert ops["g"] == ("f",) and ops["b"] == ("a",)  # the alias nodes stay ops, in order
    # Dropout in training mode is no alias: its output and its mask are new tensors
    train = helper.make_tensor("on", TensorProto.BOOL, [], [True])
    m2 = model(
        [
            helper.make_node("Relu", ["x"], ["a"], "a"),
            helper.make_node("Dropout", ["a", "", "on"], ["f", "mask"], "f"),
        ],
        [vi("x", [2, 6])],
        [vi("f", None)],
        [train],
    )
    assert spans(import_onnx(m2)[1]) == {"a": (48, 0, 1), "f": (48, 1, 2), "mask": (12, 1, 1)}


def test_torch_views_reshapes_dropout_and_outputs_aliasing_inputs() -> None:
    """x [4, 4] float32 (64 bytes). `reshape` of a contiguous tensor, `contiguous()` of one,
    `.to(same dtype)` and eval-mode dropout share storage; `reshape` of a transposed tensor
    copies (a new 64-byte buffer); `x.view(-1)` returned as an output is the caller's memory."""
    torch = pytest.importorskip("torch")
    from torch import nn

    from tensorplan import import_torch

    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.drop = torch.nn.Dropout(0.5)

        def forward(self, x):
            a = torch.relu(x)  # 64 bytes
            b = self.drop(a.reshape(16).contiguous().to(torch.float32))  # all a's storage
            c = a.t().reshape(16)  # a copy: 64 bytes
            return b + c, x.view(-1)

    sched, alloc = import_torch(M(), (torch.zeros(4, 4),))
    assert [o.id.rstrip("_0123456789") for o in sched.ops] == ["relu", "reshape", "add", END_OP]
    assert spans(alloc) == {"relu": (64, 0, 2), "reshape_1": (64, 1, 2), "add": (64, 2, 3)}


# --- in-place writes -----------------------------------------------------------------------------


def test_in_place_writer_comes_after_the_readers_of_its_storage() -> None:
    """`y = x*2; z = y.sum(1); y.relu_()`: relu_ writes y's storage, so the reader `sum` must
    stay before it; the in-place result is no new buffer."""
    torch = pytest.importorskip("torch")
    from torch import nn

    from tensorplan import import_torch

    class M(nn.Module):
        def forward(self, x):
            y = x * 2
            v = y.view(-1)
            z = y.sum(1)
            w = v.sum()  # a reader through a view
            y.relu_()
            return y + 1, z, w

    sched, alloc = import_torch(M(), (torch.zeros(3, 4),))
    ops = {o.id: o.after for o in sched.ops}
    assert set(ops["relu_"]) == {"mul", "sum_1", "sum_2"}
    assert [b.size for b in alloc.buffers] == [48, 12, 4, 48]  # y (x2 and relu_), z, w, y + 1
    assert "relu_" not in {b.id for b in alloc.buffers}
    bad = ScheduleSolution(("mul", "relu_", "sum_1", "sum_2", "add", END_OP))
    assert any("precedence" in v for v in schedule.check(sched, bad))


def random_orders(sched: ScheduleInstance, count: int, seed: int) -> list[list[int]]:
    """Random topological orders (op indices) of a schedule instance."""
    g = sched.graph
    r = random.Random(seed)
    out = []
    for _ in range(count):
        need = [len(p) for p in g.preds]
        ready = [v for v in range(g.n) if need[v] == 0]
        order: list[int] = []
        while ready:
            v = ready.pop(r.randrange(len(ready)))
            order.append(v)
            for w in g.succs[v]:
                need[w] -= 1
                if need[w] == 0:
                    ready.append(w)
        out.append(order)
    return out


# --- an independent count: run the exported graph, follow each storage by its address ----------


def run_graph(
    graph: Any, env: dict[str, Any], tainted: set[str], order: list[str] | None, training: bool
) -> dict[str, Any]:
    """Run an ATen fx graph on real tensors, keeping every result alive (so no address is
    reused), and follow each storage by its address: the steps touching it (reading, writing,
    producing), its size, whether it is returned. The steps are the nodes named in `order`
    (default: every node, in the graph's order); any other node runs when a step needs it.
    The placeholders' storages (weights, inputs) and what does not depend on `tainted` (in
    inference `*_like` reads the shape only) are left out."""
    import torch

    torch.manual_seed(0)  # the same random numbers for every run (one random op at most here)
    nodes = {n.name: n for n in graph.nodes}
    external = {ptr(t) for t in env.values() if isinstance(t, torch.Tensor)}
    steps: list[tuple[str, set[int], set[int]]] = []  # node, storages touched, storages written
    made: dict[int, int] = {}  # storage -> bytes, for those first made by a node
    dependent: set[int] = set()
    stepped = set(order or ())

    def value(a: Any) -> Any:
        if a.name not in env:
            assert a.name not in stepped, f"{a.name} is read before its step"
            run(a, step=False)
        return env[a.name]

    def run(n: Any, step: bool) -> None:
        args = torch.fx.node.map_arg(n.args, value)
        kwargs = torch.fx.node.map_arg(n.kwargs, value)
        env[n.name] = n.target(*args, **kwargs)
        like = getattr(n.target, "__name__", "").split(".")[0].endswith("_like")
        if not (like and not training) and any(a.name in tainted for a in n.all_input_nodes):
            tainted.add(n.name)
        for t in leaves(env[n.name]):
            if ptr(t) not in made and ptr(t) not in external:
                made[ptr(t)] = t.untyped_storage().nbytes()
                if n.name in tainted:
                    dependent.add(ptr(t))
        touched = {ptr(t) for t in leaves((args, kwargs, env[n.name]))}
        schema = getattr(n.target, "_schema", None)
        written = set()
        for i, arg in enumerate(schema.arguments if schema else ()):
            if arg.alias_info is not None and arg.alias_info.is_write:
                got = args[i] if i < len(args) else kwargs.get(arg.name)
                written |= {ptr(t) for t in leaves(got)}
        if step and touched:
            steps.append((n.name, touched, written))

    names = order or [n.name for n in graph.nodes if n.op == "call_function"]
    for name in names:
        run(nodes[name], step=True)
    (out,) = [n for n in graph.nodes if n.op == "output"]
    results = torch.fx.node.map_arg(out.args, value)
    planned = {p: s for p, s in made.items() if p in dependent and s > 0}
    returned = {ptr(t) for t in leaves(results)}
    return {"steps": steps, "sizes": planned, "returned": returned, "results": leaves(results)}


def ptr(t: Any) -> int:
    return t.untyped_storage().data_ptr()


def leaves(x: Any) -> list[Any]:
    import torch

    return [v for v in torch.utils._pytree.tree_leaves(x) if isinstance(v, torch.Tensor)]


def torch_walk(module: Any, inputs: tuple[Any, ...], order: list[str] | None = None) -> dict:
    """`run_graph` on `torch.export`'s graph of the module in eval mode: the user inputs are the
    data; parameters, buffers and constants are weights."""
    import torch

    program = torch.export.export(module.eval(), inputs)
    user = iter(inputs)
    env: dict[str, Any] = {}
    for spec in program.graph_signature.input_specs:
        name = spec.arg.name
        if spec.kind.name == "USER_INPUT":
            env[name] = next(user)
        elif spec.kind.name in ("PARAMETER", "BUFFER"):
            env[name] = program.state_dict[spec.target]
        else:
            env[name] = program.constants[spec.target]
    users = {s.arg.name for s in program.graph_signature.input_specs if s.kind.name == "USER_INPUT"}
    return run_graph(program.graph, env, users, order, training=False)


def joint_walk(module: Any, inputs: tuple[Any, ...], order: list[str] | None = None) -> dict:
    """`run_graph` on the joint forward + backward graph of one training step, traced here with
    the same stand-in loss (the sum of the means of the floating-point outputs): parameters,
    buffers and inputs are all data."""
    import torch
    from torch._functorch.aot_autograd import aot_export_module

    class Loss(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *xs: Any) -> tuple[Any]:
            parts = [t.mean() for t in leaves(self.inner(*xs)) if t.is_floating_point()]
            return (sum(parts[1:], parts[0]),)

    wrapped = Loss(module).train()
    gm, sig = aot_export_module(wrapped, list(inputs), trace_joint=True, output_loss_index=0)
    graph = cast(torch.fx.GraphModule, gm).graph  # a joint trace is always a GraphModule
    state = dict(wrapped.named_parameters()) | dict(wrapped.named_buffers())
    values = [state[n].detach().clone() for n in [*sig.parameters, *sig.buffers]] + list(inputs)
    names = [n.name for n in graph.nodes if n.op == "placeholder"]
    env = dict(zip(names, values, strict=True))
    return run_graph(graph, env, set(names), order, training=True)


def walk_peak(walk: dict[str, Any]) -> int:
    """The model-order peak: a storage lives from the first step touching it to the last (to the
    end when it is returned); steps touching no planned storage are left out."""
    sizes = walk["sizes"]
    steps = [s for s in walk["steps"] if s[1] & set(sizes)]
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for k, (_, touched, _) in enumerate(steps):
        for p in touched & set(sizes):
            first.setdefault(p, k)
            last[p] = k
    for p in walk["returned"] & set(sizes):
        last[p] = len(steps)
    return max(
        sum(sizes[p] for p in sizes if p in first and first[p] <= k <= last[p])
        for k in range(len(steps) + 1)
    )


def branchy_cnn(p: float = 0.2) -> Any:
    """Two branches with in-place ReLU, an in-place gate written after two readers, a residual
    `+=`, BatchNorm, pooling, dropout, a head."""
    import torch
    from torch import nn

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(inplace=True))
            self.a = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8))
            self.b = nn.Sequential(nn.Conv2d(8, 8, 1), nn.ReLU(inplace=True), nn.Conv2d(8, 8, 1))
            self.head = nn.Sequential(nn.Dropout(p), nn.Linear(8 * 4 * 4, 10))

        def forward(self, x):
            x = self.stem(x)
            gate = torch.sigmoid(x.mean((2, 3), keepdim=True))  # reads x
            y = self.a(x)  # reads x
            if self.training:  # autograd needs x unchanged for ReLU's backward
                x = x * gate
            else:
                x.mul_(gate)  # writes x in place: after both readers
            y += self.b(x)
            y = nn.functional.relu(y, inplace=True)
            y = nn.functional.max_pool2d(y, 2)
            return self.head(y.flatten(1))

    return Net()


def attention() -> Any:
    """One attention layer with an unused `arange`, views, a reshape of a transposed tensor,
    `masked_fill`, GELU and eval-mode dropout; two outputs."""
    import torch
    from torch import nn

    class Attn(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv, self.out = nn.Linear(16, 48), nn.Linear(16, 16)
            self.ff, self.drop = nn.Linear(16, 32), nn.Dropout(0.1)

        def forward(self, x):
            torch.arange(x.shape[1])
            q, k, v = self.qkv(x).split(16, dim=-1)
            q, k, v = (t.view(2, 6, 4, 4).transpose(1, 2) for t in (q, k, v))
            s = (q @ k.transpose(-1, -2)) / 2
            s = s.masked_fill(torch.ones(6, 6, dtype=torch.bool).triu(1), -1e9)
            h = (s.softmax(-1) @ v).transpose(1, 2).reshape(2, 6, 16)
            h = x + self.drop(self.out(h))
            return nn.functional.gelu(self.ff(h)), h

    return Attn()


def _build_models() -> Any:
    spec = importlib.util.spec_from_file_location(
        "build_models", ROOT / "instances/tools/build_models.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("which", ["branchy_cnn", "attention", "bert-base"])
def test_model_order_peak_equals_an_independent_storage_count(which: str) -> None:
    torch = pytest.importorskip("torch")
    from tensorplan import import_torch

    torch.manual_seed(0)
    if which == "bert-base":
        build = _build_models()
        module, inputs = build.bert_base(), build.example_inputs("tokens")
    elif which == "branchy_cnn":
        module, inputs = branchy_cnn(), (torch.randn(2, 3, 8, 8),)
    else:
        module, inputs = attention(), (torch.randn(2, 6, 16),)
    walk = torch_walk(module, inputs)
    sched, alloc = import_torch(module, inputs)
    assert model_peak(alloc) == walk_peak(walk)
    assert sorted(a.size for a in sched.allocs) == sorted(walk["sizes"].values())
    # every reorder the instance allows reads and writes each storage in the model's order:
    # per storage, the writes an op sees before it are the same as in the model order
    by_name = {name: (touched, written) for name, touched, written in walk["steps"]}
    index = sched.index()
    ops = [o.id for o in sched.ops if o.id in by_name]
    model_seen = versions(ops, by_name)
    for order in random_orders(sched, 20, seed=1):
        ids = [sched.ops[v].id for v in order if sched.ops[v].id in by_name]
        assert versions(ids, by_name) == model_seen
    assert len(index) == len(sched.ops)


@pytest.mark.parametrize("training", [False, True])
def test_planned_and_random_orders_run_and_their_peaks_are_counted_independently(
    training: bool,
) -> None:
    """Run the graph in the planned order and in random orders the instance allows: the results
    are the model order's, bit for bit (the in-place writes stay after their readers), and the
    planned peak is the one the run counts. In training, the count holds every returned tensor
    (the loss, the statistics, the gradients) to the end, as the instance does."""
    torch = pytest.importorskip("torch")
    from tensorplan import import_torch
    from tensorplan.harness.plan import make_plan

    torch.manual_seed(0)
    module, inputs = branchy_cnn(0.0 if training else 0.2), (torch.randn(2, 3, 8, 8),)
    walk = joint_walk if training else torch_walk
    sched, alloc = import_torch(module, inputs, training=training)
    if not training:  # the gate's in-place write comes after x's two readers (write-after-read)
        assert {"mean", "conv2d_1"} <= set({o.id: o.after for o in sched.ops}["mul_"])
    model = walk(module, inputs)
    assert model_peak(alloc) == walk_peak(model)
    plan = make_plan(sched, time_limit=2)
    planned = walk(module, inputs, [x for x in plan.order if x != END_OP])
    assert walk_peak(planned) == model_peak(plan.planned.instance) <= model_peak(alloc)
    for order in [None, *random_orders(sched, 10, seed=2)]:
        ids = None if order is None else [sched.ops[v].id for v in order]
        run = planned if ids is None else walk(module, inputs, [x for x in ids if x != END_OP])
        assert all(torch.equal(a, b) for a, b in zip(run["results"], model["results"], strict=True))


def versions(order: list[str], by_name: dict[str, tuple[set[int], set[int]]]) -> dict:
    """For each (op, storage it touches): how many writes to that storage come before it."""
    writes: dict[int, int] = {}
    seen = {}
    for op in order:
        touched, written = by_name[op]
        for p in touched:
            seen[op, p] = writes.get(p, 0)
        for p in written:
            writes[p] = writes.get(p, 0) + 1
    return seen


def onnx_walk_peak(path: Path) -> int:
    """The model-order peak of an ONNX file with batch 1, counted without the importer: shapes
    from onnx's shape inference, one storage per alias class (Reshape, Flatten, Squeeze,
    Unsqueeze, Identity, Dropout), only tensors that depend on the graph input (a Shape node
    depends on nothing), each live from its first to its last node, outputs to the end."""
    m = onnx.load(str(path), load_external_data=False)
    for d in m.graph.input[0].type.tensor_type.shape.dim:
        if d.dim_param == "batch":
            d.dim_value = 1
    m = onnx.shape_inference.infer_shapes(m, data_prop=True)
    width = {TensorProto.FLOAT: 4, TensorProto.INT64: 8, TensorProto.BOOL: 1}
    size = {}
    for v in [*m.graph.value_info, *m.graph.output]:
        t = v.type.tensor_type
        dims = [d.dim_value for d in t.shape.dim]
        n = 1
        for d in dims:
            n *= d
        size[v.name] = n * width[t.elem_type]
    root: dict[str, str] = {}
    dep = {i.name for i in m.graph.input}
    users: dict[str, list[int]] = {}
    nodes = list(m.graph.node)
    for k, n in enumerate(nodes):
        if n.op_type != "Shape" and any(t in dep for t in n.input):
            dep.update(n.output)
        if n.op_type in ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout"):
            root[n.output[0]] = root.get(n.input[0], n.input[0])
        for t in [*n.input, *n.output]:
            if t in dep and t not in {i.name for i in m.graph.input}:
                users.setdefault(root.get(t, t), []).append(k)
    end = len(nodes)
    for o in m.graph.output:
        users[root.get(o.name, o.name)].append(end)
    live = [0] * (end + 1)
    for t, us in users.items():
        for k in range(min(us), max(us) + 1):
            live[k] += size[t]
    return max(live)


@pytest.mark.parametrize("name", ["resnet50", "mobilenetv2", "bert-base", "gpt2-small"])
def test_shipped_model_order_peaks_equal_an_independent_count(name: str) -> None:
    path = ROOT / "instances" / "models" / f"{name}.onnx"
    shipped = load_instance(ROOT / "instances" / "allocation" / f"model-{name}.json")
    assert model_peak(shipped) == onnx_walk_peak(path)


# --- workspace -----------------------------------------------------------------------------------


def test_workspace_is_an_alloc_live_only_at_its_op() -> None:
    """Conv x[1,3,8,8] -> a [1,8,8,8] (2048 bytes) -> Relu -> b: with the table, the conv gets
    a 2048-byte workspace (1.0 x its output) live at step 0 only; off by default."""
    m = model(
        [
            helper.make_node("Conv", ["x", "w"], ["a"], "conv", pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["a"], ["b"], "relu"),
        ],
        [vi("x", [1, 3, 8, 8])],
        [vi("b", None)],
        [helper.make_tensor("w", F32, [8, 3, 3, 3], [0.0] * 216)],
    )
    assert "conv.workspace" not in spans(import_onnx(m)[1])
    _, alloc = import_onnx(m, workspace=WORKSPACE)
    assert spans(alloc)["conv.workspace"] == (2048, 0, 0)
    assert model_peak(alloc) == 4096  # a + its workspace at the conv (a + b at relu: 4096 too)
    _, alloc = import_onnx(m, workspace={"Relu": 0.5})
    assert spans(alloc)["relu.workspace"] == (1024, 1, 1)
    torch = pytest.importorskip("torch")
    from tensorplan import import_torch

    _, alloc = import_torch(torch.nn.GELU(), (torch.zeros(4, 4),), workspace=WORKSPACE)
    assert spans(alloc)["gelu.workspace"] == (64, 0, 0)


def test_workspace_entries_per_input_and_per_weight_byte() -> None:
    """`Conv/inputs` counts the activation x (1*3*8*8*4 = 768 bytes), `Conv/weights` the weight
    w (8*3*3*3*4 = 864): a workspace of 0.5 * 768 + 2 * 864 = 2112 bytes, plus 0.25 of the
    output a (512); an op kind without entries gets none. The measured PyTorch table holds a
    convolution to one input's and one weight's worth."""
    m = model(
        [
            helper.make_node("Conv", ["x", "w"], ["a"], "conv", pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["a"], ["b"], "relu"),
        ],
        [vi("x", [1, 3, 8, 8])],
        [vi("b", None)],
        [helper.make_tensor("w", F32, [8, 3, 3, 3], [0.0] * 216)],
    )
    table = {"Conv/inputs": 0.5, "Conv/weights": 2.0, "Conv": 0.25}
    _, alloc = import_onnx(m, workspace=table)
    assert spans(alloc)["conv.workspace"] == (2112 + 512, 0, 0)
    assert "relu.workspace" not in spans(alloc)
    torch = pytest.importorskip("torch")
    from tensorplan import import_torch
    from tensorplan.harness.torch_import import TORCH_CPU_WORKSPACE

    conv = torch.nn.Conv2d(3, 8, 3, padding=1, bias=False)
    _, alloc = import_torch(conv, (torch.zeros(1, 3, 8, 8),), workspace=TORCH_CPU_WORKSPACE)
    ws = {k: v for k, v in spans(alloc).items() if k.endswith(".workspace")}
    assert [size for size, _, _ in ws.values()] == [768 + 864]


def test_runtime_workspace_follows_the_convolutions_shapes() -> None:
    """workspace="runtime" on the PyTorch route (`cpu_scratch`): a stem conv (3 channels in)
    holds max(weight, output) = max(8*3*3*3*4, 8*8*8*4) = 2048; a 3x3 conv copies its input and
    weight, 2048 + 8*8*3*3*4 = 4352; a stride-2 1x1 conv also holds its output: 2048 + 8*8*4 +
    8*4*4*4 = 2816; max_pool2d drops int64 indices, twice its output: 2 * 8*4*4*4 = 1024. The
    ONNX route measures nothing and refuses it."""
    torch = pytest.importorskip("torch")
    from tensorplan import import_torch

    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1, bias=False),
        torch.nn.Conv2d(8, 8, 3, padding=1, bias=False),
        torch.nn.Conv2d(8, 8, 1, stride=2, bias=False),
        torch.nn.MaxPool2d(2, ceil_mode=True, stride=1, padding=1),
    )
    _, alloc = import_torch(net, (torch.zeros(1, 3, 8, 8),), workspace="runtime")
    ws = [size for k, (size, _, _) in spans(alloc).items() if k.endswith(".workspace")]
    assert ws == [2048, 4352, 2816, 2 * 8 * 5 * 5 * 4]
    mlp = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.GELU())  # no scratch measured
    _, alloc = import_torch(mlp, (torch.zeros(2, 4),), workspace="runtime")
    assert not [k for k in spans(alloc) if k.endswith(".workspace")]
    m = model(
        [helper.make_node("Relu", ["x"], ["b"], "relu")], [vi("x", [1, 4])], [vi("b", None)], []
    )
    with pytest.raises(ValueError, match="PyTorch route"):
        import_onnx(m, workspace="runtime")


def test_eager_holds_a_module_calls_arguments_until_it_returns() -> None:
    """Net: x -> b1 (conv, relu, + 1) -> b2 (conv, relu, + 1). In the graph, b1's output `add`
    dies at b2's conv; eager PyTorch's frames keep it, b2's argument, until b2 returns (its
    last node, `add_1`). Inside b2, the conv's output is produced there: not held."""
    pytest.importorskip("torch")
    import torch
    from torch import nn

    from tensorplan import import_torch

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c, self.r = torch.nn.Conv2d(4, 4, 3, padding=1), torch.nn.ReLU()

        def forward(self, x: Any) -> Any:
            return self.r(self.c(x)) + 1

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.b1, self.b2 = Block(), Block()

        def forward(self, x: Any) -> Any:
            return self.b2(self.b1(x))

    x = (torch.zeros(1, 4, 8, 8),)
    _, graph = import_torch(Net(), x)
    eager_sched, eager = import_torch(Net(), x, eager=True)
    step = {op.id: i for i, op in enumerate(eager_sched.ops)}
    assert spans(graph)["add"][2] == step["conv2d_1"]
    assert spans(eager)["add"][2] == step["add_1"]
    assert spans(eager)["conv2d_1"] == spans(graph)["conv2d_1"]


def _eager_vs_graph(module: Any, x: Any) -> tuple[Any, Any, dict[str, int]]:
    from tensorplan import import_torch

    _, graph = import_torch(module, (x,))
    sched, eager = import_torch(module, (x,), eager=True)
    return graph, eager, {op.id: i for i, op in enumerate(sched.ops)}


def test_eager_keeps_locals_until_the_forward_returns() -> None:
    """`a = x * 2; b = a + 1; c = b * 3; return c - 1`: the graph frees `a` at the add and `b`
    at the second mul; eager PyTorch's frame keeps a, b and c until the return, so at `sub`
    four 1 KiB tensors are live (the graph: two)."""
    pytest.importorskip("torch")
    import torch
    from torch import nn

    class Keeps(nn.Module):
        def forward(self, x: Any) -> Any:
            a = x * 2
            b = a + 1
            c = b * 3
            return c - 1

    graph, eager, step = _eager_vs_graph(Keeps(), torch.zeros(256))
    assert spans(graph)["mul"] == (1024, step["mul"], step["add"])
    assert {t: spans(eager)[t][2] for t in ("mul", "add", "mul_1")} == dict.fromkeys(
        ("mul", "add", "mul_1"), step["sub"]
    )
    assert (model_peak(graph), model_peak(eager)) == (2 * 1024, 4 * 1024)


def test_eager_frees_a_rebound_local_as_the_graph_does() -> None:
    """`x = x * 2; x = x + 1; ...`: each rebinding drops the previous tensor right after the
    call that reads it, so eager lifetimes are the graph's."""
    pytest.importorskip("torch")
    import torch
    from torch import nn

    class Rebinds(nn.Module):
        def forward(self, x: Any) -> Any:
            x = x * 2
            x = x + 1
            x = x * 3
            return x - 1

    graph, eager, _ = _eager_vs_graph(Rebinds(), torch.zeros(256))
    assert spans(eager) == spans(graph)
    assert model_peak(eager) == 2 * 1024


def test_eager_keeps_an_unused_tuple_element_like_berts_attention_probabilities() -> None:
    """`y, _ = self.inner(x)`, as BertLayer discards its attention probabilities: the softmax
    output is read last by the inner matmul in the graph, but `_` keeps it until the outer
    forward returns (its last node, `add`); `y` too. 16 x 16 floats each: at `add` eager holds
    the probabilities, `y`, `mul` and the output (4 KiB), the graph two of them."""
    pytest.importorskip("torch")
    import torch
    from torch import nn

    class Inner(nn.Module):
        def forward(self, x: Any) -> Any:
            p = torch.softmax(x, -1)
            return p @ x, p

    class Outer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = Inner()

        def forward(self, x: Any) -> Any:
            y, _ = self.inner(x)
            return y * 2 + 1

    graph, eager, step = _eager_vs_graph(Outer(), torch.randn(16, 16))
    assert spans(graph)["softmax"][2] == step["matmul"]
    assert spans(eager)["softmax"][2] == spans(eager)["matmul"][2] == step["add"]
    assert (model_peak(graph), model_peak(eager)) == (2 * 1024, 4 * 1024)


def test_tied_weights_train_with_one_gradient() -> None:
    """An embedding and an output layer sharing one weight (as T5 and GPT-2 tie them): the
    training step imports (aot_export_module refuses a parameter under two names), and one
    gradient of the shared weight is held to the optimizer step, not two; untied, two are."""
    pytest.importorskip("torch")
    import torch
    from torch import nn

    from tensorplan import import_torch

    class Tied(nn.Module):
        def __init__(self, tie: bool) -> None:
            super().__init__()
            self.emb, self.out = nn.Embedding(10, 6), nn.Linear(6, 10, bias=False)
            if tie:
                self.out.weight = self.emb.weight

        def forward(self, x: Any) -> Any:
            return self.out(self.emb(x))

    def held_grads(tie: bool) -> int:
        module = Tied(tie)
        sched, alloc = import_torch(module, (torch.tensor([[1, 2, 3]]),), training=True)
        end = len(sched.ops) - 1
        assert len(list(module.named_parameters(remove_duplicate=False))) == 2  # untouched
        return sum(1 for b in alloc.buffers if b.size == 10 * 6 * 4 and b.end == end)

    assert held_grads(tie=True) == 1
    assert held_grads(tie=False) == 2


# --- training ------------------------------------------------------------------------------------


def test_training_holds_the_loss_and_the_gradients_until_the_optimizer_step() -> None:
    """Linear(4 -> 8) + BatchNorm1d(8) + Linear(8 -> 2), batch 3. The gradients (weights 128 and
    64 bytes, biases 32, 8; BatchNorm's weight and bias 32 each) and the loss (4 bytes) are held
    to the end op; the new running statistics too (32 bytes each, and an int64 counter). With
    `free_gradients`, a gradient lives at its producer only (none is read again)."""
    torch = pytest.importorskip("torch")
    from tensorplan import import_torch

    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 2))
    sched, alloc = import_torch(net, (torch.randn(3, 4),), training=True)
    held = sorted(a.size for a in sched.allocs if a.ops[-1] == END_OP)
    assert held == sorted([128, 32, 32, 32, 64, 8, 32, 32, 8, 4])  # grads, stats, loss
    end = len(sched.ops) - 1
    assert all(b.end == end for b in alloc.buffers if b.size == 128)
    sched, _ = import_torch(net, (torch.randn(3, 4),), training=True, free_gradients=True)
    assert sorted(a.size for a in sched.allocs if a.ops[-1] == END_OP) == [4, 8, 32, 32]
    grads = [a for a in sched.allocs if a.size == 128]
    assert len(grads) == 1 and len(grads[0].ops) == 1


def test_training_takes_dict_outputs_and_heads_without_a_gradient_of_their_own() -> None:
    """A transformers-like output (a dict with a pooled head) and a tensor constant made in the
    forward: the loss sums the means of every floating-point output, so every parameter gets
    a gradient; the tensor constant is lifted, not refused."""
    torch = pytest.importorskip("torch")
    from torch import nn

    from tensorplan import import_torch

    class Enc(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb, self.pool = torch.nn.Linear(4, 8), torch.nn.Linear(8, 8)

        def forward(self, x):
            h = torch.relu(self.emb(x)) * torch.tensor([2.0] * 8)
            return {"last_hidden_state": h, "pooler_output": torch.tanh(self.pool(h[:, 0]))}

    sched, _ = import_torch(Enc(), (torch.zeros(2, 3, 4),), training=True)
    grads = [a for a in sched.allocs if a.ops[-1] == END_OP and a.size in (32 * 4, 8 * 8 * 4)]
    assert len(grads) == 2  # both weight gradients (emb 8 x 4, pool 8 x 8), held


# --- the shape folder ----------------------------------------------------------------------------


def test_mod_in_shape_arithmetic_is_folded() -> None:
    """vit_b_16's pattern: y = x[:, : d - d % 4] with d = shape(x)[1] = 10, so y is [N, 8]."""
    m = model(
        [
            helper.make_node("Shape", ["x"], ["s"], "shape"),
            helper.make_node("Gather", ["s", "one"], ["d"], "d"),
            helper.make_node("Mod", ["d", "four"], ["r"], "mod"),
            helper.make_node("Sub", ["d", "r"], ["e"], "sub"),
            helper.make_node("Unsqueeze", ["e", "zero"], ["end"], "unsq"),
            helper.make_node("Slice", ["x", "zero", "end", "one1"], ["y"], "slice"),
            helper.make_node("Relu", ["y"], ["z"], "relu"),
        ],
        [vi("x", ["N", 10])],
        [vi("z", None)],
        [
            helper.make_tensor("one", I64, [], [1]),
            helper.make_tensor("four", I64, [], [4]),
            helper.make_tensor("zero", I64, [1], [0]),
            helper.make_tensor("one1", I64, [1], [1]),
        ],
    )
    _, alloc = import_onnx(m, dims={"N": 3})
    assert spans(alloc) == {"y": (3 * 8 * 4, 0, 1), "z": (96, 1, 2)}


@pytest.mark.parametrize(
    ("op", "ins", "attrs", "want"),
    [
        ("Mod", [[-7, 7], [3, -3]], {}, [2, -2]),  # the sign of the divisor
        ("Mod", [[-7, 7], [3, -3]], {"fmod": 1}, [-1, 1]),  # the sign of the dividend
        ("Neg", [[1, -2]], {}, [-1, 2]),
        ("Abs", [[1, -2]], {}, [1, 2]),
        ("Floor", [[1.5, -1.5]], {}, [1.0, -2.0]),
        ("Ceil", [[1.5, -1.5]], {}, [2.0, -1.0]),
        ("Max", [[1, 5], [4, 2], [3, 3]], {}, [4, 5]),
        ("Min", [[1, 5], [4, 2]], {}, [1, 2]),
        ("Sum", [[1, 5], [4, 2], [1, 1]], {}, [6, 8]),
        ("Pow", [[2, 3], [2, 2]], {}, [4, 9]),
        ("GreaterOrEqual", [[1, 5], [4, 5]], {}, [False, True]),
        ("Expand", [[1, 2], [2, 2]], {}, [[1, 2], [1, 2]]),
        ("Tile", [[1, 2], [2]], {}, [1, 2, 1, 2]),
        ("Transpose", [[[1, 2], [3, 4]]], {}, [[1, 3], [2, 4]]),
        ("ReduceProd", [[2, 3, 4], [0]], {"keepdims": 0}, 24),
        ("ReduceSum", [[2, 3, 4], [0]], {"keepdims": 1}, [9]),
        ("Clip", [[-1, 5, 9], 0, 6], {}, [0, 5, 6]),
        ("CumSum", [[1, 2, 3], 0], {}, [1, 3, 6]),
    ],
)
def test_shape_arithmetic_ops(op: str, ins: list, attrs: dict, want: Any) -> None:
    import numpy as np

    arrays = [np.asarray(x) for x in ins]
    names = [f"i{k}" for k in range(len(ins))]
    out = _evaluate(op, names, arrays, attrs, {})
    assert out is not None and np.asarray(out[0]).tolist() == want


def test_split_is_folded_into_equal_parts() -> None:
    import numpy as np

    out = _evaluate("Split", ["a"], [np.arange(6)], {}, {}, n_out=3)
    assert out is not None and [x.tolist() for x in out] == [[0, 1], [2, 3], [4, 5]]


# --- refusals (issue 34) ------------------------------------------------------------------------


def test_negative_dimension_is_refused_naming_the_tensor(tmp_path: Path) -> None:
    m = model([helper.make_node("Relu", ["x"], ["y"], "r")], [vi("x", [-1, 4])], [vi("y", None)])
    with pytest.raises(InstanceError, match=r"tensor 'x'.*dimension 0 is -1.*negative"):
        import_onnx(m)
    path = tmp_path / "neg.onnx"
    onnx.save(m, str(path))
    with pytest.raises(InstanceError, match="negative"):
        write_onnx_instances(path, tmp_path)
    assert not (tmp_path / "neg.allocation.json").exists()


def test_empty_file_and_empty_graph_are_refused(tmp_path: Path) -> None:
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    with pytest.raises(InstanceError, match=r"empty\.onnx.*empty file \(0 bytes\)"):
        import_onnx(empty)
    with pytest.raises(InstanceError, match="has no nodes"):
        import_onnx(model([], [vi("x", [4])], [vi("x", [4])]))
    no_graph = tmp_path / "nograph.onnx"
    no_graph.write_bytes(ModelProto(ir_version=8).SerializeToString())
    with pytest.raises(InstanceError, match="holds no graph"):
        load_model(no_graph)


def test_cycle_is_reported_as_a_cycle() -> None:
    m = model(
        [
            helper.make_node("Add", ["x", "b"], ["a"], "n1"),
            helper.make_node("Relu", ["a"], ["b"], "n2"),
            helper.make_node("Relu", ["a"], ["y"], "n3"),
        ],
        [vi("x", [4])],
        [vi("y", None)],
    )
    with pytest.raises(InstanceError, match=r"cycle: 'n1' \(Add\) -> 'n2' \(Relu\) -> 'n1'"):
        import_onnx(m)


def test_sizes_the_loaders_refuse_are_refused_at_import() -> None:
    big = model(
        [helper.make_node("Relu", ["x"], ["y"], "r")],
        [vi("x", ["N", 2**31, 2**30])],
        [vi("y", None)],
    )
    # N * 2**61 floats: 2**63 bytes for N = 1, past 2**62
    with pytest.raises(InstanceError, match=r"tensor 'y'.*past 2\*\*62"):
        import_onnx(big, dims={"N": 1})
    two = model(
        [helper.make_node("Relu", ["x"], ["y"], "r"), helper.make_node("Relu", ["y"], ["z"], "s")],
        [vi("x", [2**30, 2**30])],  # 2**62 bytes each: either loads, not both together
        [vi("z", None)],
    )
    with pytest.raises(InstanceError, match=r"model 'g'.*(add up|total)"):
        import_onnx(two)


def test_parse_dims_refuses_what_is_no_positive_integer() -> None:
    for bad in (["N=²"], ["N=99999999999999999999"], ["N=0"], ["N=-1"]):
        with pytest.raises(InstanceError, match=r"--dim.*POSITIVE_INTEGER"):
            parse_dims(bad)
    with pytest.raises(InstanceError, match=r"--dim N.*given twice"):
        parse_dims(["N=1", "N=2"])
    m = model([helper.make_node("Relu", ["x"], ["y"], "r")], [vi("x", ["N"])], [vi("y", None)])
    with pytest.raises(InstanceError, match=r"--dim N.*positive integer"):
        import_onnx(m, dims={"N": 0})


# --- alignment and memory -----------------------------------------------------------------------


def test_alignment_reaches_the_written_allocation_instance(tmp_path: Path) -> None:
    m = model([helper.make_node("Relu", ["x"], ["y"], "r")], [vi("x", [3])], [vi("y", None)])
    assert import_onnx(m, alignment=64)[1].alignment == 64
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    _, written = write_onnx_instances(path, tmp_path, alignment=64)
    assert json.loads(written.read_text())["alignment"] == 64


def test_weights_are_not_copied() -> None:
    """The importer's working copy holds the large initializers' shapes, not their data; the
    caller's model is left as it was."""
    import numpy as np

    big = onnx.numpy_helper.from_array(np.ones((256, 64), np.float32), "w")
    m = model(
        [helper.make_node("MatMul", ["x", "w"], ["y"], "mm")],
        [vi("x", [2, 256])],
        [vi("y", None)],
        [big],
    )
    copy = _copy(m)
    (w,) = copy.graph.initializer
    assert list(w.dims) == [256, 64] and not w.raw_data and not w.float_data
    assert len(m.graph.initializer[0].raw_data) == 256 * 64 * 4
    assert spans(import_onnx(m)[1]) == {"y": (2 * 64 * 4, 0, 1)}


@given(
    st.lists(st.integers(0, 999), max_size=80, unique=True),
    st.integers(0, 80),
    st.lists(st.integers(1000, 1999), max_size=12),
    st.integers(0, 6),
)
def test_eager_call_alignment_is_monotone_and_resumes_after_a_difference(
    keys: list[int], at: int, inserted: list[int], dropped: int
) -> None:
    """`torch_eager._align`: pairs only equal keys, in increasing order on both sides; equal
    sequences align one to one; where the eager calls insert keys the trace lacks and the trace
    has a few the calls lack, every key outside the difference is still paired."""
    from tensorplan.harness.torch_eager import _align

    assert _align(keys, keys) == [(i, i) for i in range(len(keys))]
    at = min(at, len(keys))
    trace = [*keys[:at], *([-1] * dropped), *keys[at:]]
    calls = [*keys[:at], *inserted, *keys[at:]]
    pairs = _align(calls, trace)
    assert all(calls[i] == trace[j] for i, j in pairs)
    assert all(a < c and b < d for (a, b), (c, d) in itertools.pairwise(pairs))
    assert {j for _, j in pairs} == set(range(at)) | set(range(at + dropped, len(trace)))

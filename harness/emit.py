"""Executable plans (issue 31, item 2): a memory plan turned back into a model that a runtime runs.

- `planned_onnx(model, plan)`: the ONNX model with its nodes in the planned order and the memory
  plan in its metadata (`metadata_props[PLAN_KEY]`, JSON, see `memory_plan`). Node names become
  the importer's op ids (the node's name, or `<op_type>_<index>` when it had none or a taken
  one), so the plan's order names the nodes. It passes `onnx.checker`; the graph's inputs,
  outputs and weights are the original's (weights inline when the original's external data is
  there, else the same external references).
- `order_graph_module(gm, order, ...)`: an fx `GraphModule` whose nodes run in the planned order
  (`tensorplan.plan_torch` builds the plan and calls it). With `fold`, the nodes that compute
  constants only (the plan's excluded constants: weights computed ahead) are evaluated once
  and become buffers of the module, as the plan assumes.

The nodes that are no op of the plan (ONNX: nodes that compute constants only; fx: placeholders,
`get_attr`, views, `getitem`, guards) are placed by `interleave`: one with users just before its
first user, one without (a dead `arange`, a guard) as soon as its inputs exist. They do no work
on planned memory (views, constants) or read no planned data, so the plan's order is the order
in which every planned tensor is made, read and freed. A runtime may still reorder: PyTorch
runs an fx module's nodes as written and frees each value after its last use; onnxruntime
derives its own execution order from the graph (`benchmarks/models.py` reports whether it
followed the file's order).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from tensorplan.harness.onnx_import import END_OP
from tensorplan.problems.core import InstanceError

PLAN_KEY = "tensorplan.memory_plan"
"""The `metadata_props` key of `planned.onnx` that holds the memory plan (JSON)."""
FORMAT = "tensorplan.memory_plan/1"
ONNX_MAX_BYTES = 2**31 - 1  # a protobuf message cannot be larger


class _Packing(Protocol):
    @property
    def instance(self) -> Any: ...

    @property
    def solution(self) -> Any: ...

    @property
    def peak(self) -> int: ...


class PlanLike(Protocol):
    """What the emitters read of a `harness.plan.Plan`."""

    @property
    def name(self) -> str: ...

    @property
    def order(self) -> tuple[str, ...]: ...

    @property
    def model_order(self) -> tuple[str, ...]: ...

    @property
    def order_source(self) -> str: ...

    @property
    def planned(self) -> _Packing: ...


def memory_plan(
    plan: PlanLike,
    tensors: Mapping[str, Sequence[str]] | None = None,
    meta: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The plan as a JSON document: the order (op ids; step t is its t-th op), and per buffer its
    offset, size, lifetime [start, end] (steps, both included) and the tensors that share it
    (`tensors`: buffer id -> tensor names; default: the buffer's own id); `meta` joins it."""
    pack = plan.planned
    inst = pack.instance
    buffers = [
        {
            "id": b.id,
            "offset": int(o),
            "size": b.size,
            "start": b.start,
            "end": b.end,
            "tensors": list((tensors or {}).get(b.id, [b.id])),
        }
        for b, o in zip(inst.buffers, pack.solution.offsets, strict=True)
    ]
    return {
        "format": FORMAT,
        "name": plan.name,
        **(meta or {}),
        "peak": pack.peak,
        "alignment": inst.alignment,
        "order_source": plan.order_source,
        "order": list(plan.order),
        "steps": "step t is the t-th op of `order`; a buffer is live from `start` to `end`",
        "buffers": buffers,
    }


def interleave(
    deps: Sequence[Sequence[int]],
    ops: Sequence[int],
    *,
    first: Sequence[int] = (),
    last: Sequence[int] = (),
) -> list[int]:
    """A topological order of nodes 0..n-1 (`deps[i]`: the nodes i reads) in which the nodes of
    `ops` come in that order: `first`, then each op preceded by the nodes it needs that are not
    ops (just before their first user), then `last`. A node that is no op and has no user is
    placed as soon as the ops it depends on are. ValueError when an op needs an op the order
    puts later, or a node depends on nothing placeable."""
    n = len(deps)
    rank = {i: k for k, i in enumerate(ops)}
    fixed = set(first) | set(last)
    users = [0] * n
    for ds in deps:
        for d in set(ds):
            users[d] += 1
    placed = [False] * n
    out: list[int] = []

    def place(i: int) -> None:
        stack = [(i, iter(deps[i]))]
        while stack:
            node, todo = stack[-1]
            for d in todo:
                if placed[d]:
                    continue
                if d in rank or d in last:
                    raise ValueError(f"node {node} needs node {d}, which comes later")
                stack.append((d, iter(deps[d])))
                break
            else:
                stack.pop()
                if not placed[node]:
                    placed[node] = True
                    out.append(node)

    upstream: dict[int, int] = {}  # a non-op node -> the rank of the latest op it depends on

    def latest(i: int) -> int:
        stack = [i]
        while stack:  # iterative post-order over non-op nodes
            v = stack[-1]
            todo = [d for d in deps[v] if d not in rank and d not in upstream]
            if todo:
                stack.extend(todo)
                continue
            stack.pop()
            if v in upstream:
                continue
            ranks = [rank[d] if d in rank else upstream[d] for d in deps[v]]
            upstream[v] = max(ranks, default=-1)
        return upstream[i]

    sinks: dict[int, list[int]] = {}
    for i in range(n):
        if users[i] == 0 and i not in rank and i not in fixed:
            sinks.setdefault(latest(i), []).append(i)
    for i in first:
        place(i)
    for i in sinks.get(-1, []):
        place(i)
    for k, i in enumerate(ops):
        place(i)
        for s in sinks.get(k, []):
            place(s)
    for i in last:
        place(i)
    for i in range(n):  # anything only `last` or a sink needed is placed by now; the rest:
        if not placed[i]:
            place(i)
    return out


def _op_ranks(order: Sequence[str], index: Mapping[str, int], what: str) -> list[int]:
    steps = [x for x in order if x != END_OP]
    missing = [x for x in steps if x not in index]
    if missing:
        raise InstanceError(
            "plan", f"the order names {missing[0]!r}, which is no node of the {what}"
        )
    return [index[x] for x in steps]


# --- ONNX ----------------------------------------------------------------------------------------


def _load_onnx(model: Any) -> tuple[Any, str]:
    """(a copy of the model, where its weights are): with its external data when it is there."""
    from tensorplan.harness.onnx_import import _onnx, load_model

    onnx = _onnx()
    if not isinstance(model, str | Path):
        out = onnx.ModelProto()
        out.CopyFrom(model)
        return out, "as given"
    proto = load_model(model)  # the importer's checks and messages; no external data yet
    external = [t for t in proto.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    if not external:
        return proto, "inline"
    try:
        from onnx.external_data_helper import load_external_data_for_model

        load_external_data_for_model(proto, str(Path(model).parent))
    except Exception:  # absent or unreadable: keep the references, relative to the model's folder
        return load_model(model), "external data of the original model (not loaded)"
    if proto.ByteSize() > ONNX_MAX_BYTES:  # too large to hold inline: keep the references
        return load_model(model), "external data of the original model (over 2 GB)"
    return proto, "inline (loaded from the original's external data)"


def planned_onnx(
    model: Any,
    plan: PlanLike,
    *,
    meta: Mapping[str, Any] | None = None,
    check: bool = True,
    key: str = PLAN_KEY,
) -> Any:
    """The ONNX model (path or ModelProto) with its nodes in `plan.order` and the memory plan in
    `metadata_props[key]`; `meta` joins the plan's document. `check`: run `onnx.checker` on the
    original and on the result: InstanceError when the result fails and the original passes (an
    original that fails already is noted in the document, `checker`, and written all the same)."""
    from onnx import NodeProto, StringStringEntryProto

    from tensorplan.harness.onnx_import import _known_values, _nodes, _onnx_storage

    proto, weights = _load_onnx(model)
    if proto.functions:  # the importer plans the inlined graph: emit that one
        from onnx import inliner

        proto = inliner.inline_local_functions(proto)
    before = _check_error(proto, weights) if check else None
    graph = proto.graph
    nodes = _nodes(graph.node)
    index = {n.id: i for i, n in enumerate(nodes)}
    ranks = _op_ranks(plan.order, index, "model")
    made = {t: i for i, n in enumerate(graph.node) for t in n.output if t}
    deps = [[made[t] for t in n.input if t in made] for n in graph.node]
    sequence = interleave(deps, ranks)
    placed = []
    for i in sequence:
        copy = NodeProto()
        copy.CopyFrom(graph.node[i])
        copy.name = nodes[i].id
        placed.append(copy)
    del graph.node[:]
    graph.node.extend(placed)
    storage = _onnx_storage(nodes, _known_values(graph))
    tensors: dict[str, list[str]] = {}
    names = [*(i.name for i in graph.input), *(t for n in nodes for t in n.outputs if t)]
    for t in dict.fromkeys(names):
        tensors.setdefault(storage.get(t, t), []).append(t)
    notes = {"weights": weights}
    if before is not None:
        notes["checker"] = f"the original model fails onnx.checker: {before}"
    doc = memory_plan(plan, tensors, {**(meta or {}), **notes})
    kept = [p for p in proto.metadata_props if p.key != key]
    del proto.metadata_props[:]
    proto.metadata_props.extend([*kept, StringStringEntryProto(key=key, value=json.dumps(doc))])
    if check and before is None and (after := _check_error(proto, weights)) is not None:
        raise InstanceError("planned.onnx", f"fails onnx.checker: {after}")
    return proto


def _check_error(proto: Any, weights: str) -> str | None:
    """The first line of `onnx.checker`'s complaint about a model, or None when it passes."""
    from onnx import checker

    try:
        checker.check_model(proto if weights.startswith("inline") else _checkable(proto))
    except checker.ValidationError as err:
        return str(err).strip().splitlines()[0]
    return None


def _checkable(proto: Any) -> Any:
    """A copy of a model whose external weights are absent, with those weights as graph inputs
    of the same type and shape, for `onnx.checker` (it refuses a missing data file, as it does
    for the original model)."""
    from onnx import TensorProto, helper

    out = type(proto)()
    out.CopyFrom(proto)
    graph = out.graph
    absent = [t for t in graph.initializer if t.data_location == TensorProto.EXTERNAL]
    keep = [t for t in graph.initializer if t.data_location != TensorProto.EXTERNAL]
    inputs = {i.name for i in graph.input}
    graph.input.extend(
        helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
        for t in absent
        if t.name not in inputs
    )
    del graph.initializer[:]
    graph.initializer.extend(keep)
    return out


def planned_onnx_bytes(model: Any, plan: PlanLike, meta: Mapping[str, Any] | None = None) -> bytes:
    """`planned_onnx(model, plan)` serialised: the contents of `planned.onnx`."""
    return bytes(planned_onnx(model, plan, meta=meta).SerializeToString())


def read_memory_plan(model: Any, key: str = PLAN_KEY) -> dict[str, Any]:
    """The memory plan stored in a planned ONNX model (path or ModelProto)."""
    if isinstance(model, str | Path):
        from tensorplan.harness.onnx_import import load_model

        model = load_model(model)
    for p in model.metadata_props:
        if p.key == key:
            doc: dict[str, Any] = json.loads(p.value)
            return doc
    raise InstanceError("metadata_props", f"no {key!r} entry: not a planned model")


# --- torch.fx ------------------------------------------------------------------------------------


def order_graph_module(
    gm: Any,
    order: Sequence[str],
    *,
    nodes: Mapping[str, Any] | None = None,
    fold: Collection[str] = (),
    inputs: Sequence[Any] = (),
) -> Any:
    """Reorder `gm`'s graph in place so that its op nodes run in `order` (op ids: node names,
    or `nodes[id]`), then recompile; returns `gm`. `fold`: names of nodes computed from
    constants alone, evaluated once (`inputs`: the flat example inputs, for shape-only nodes like
    `zeros_like(x)`) and turned into buffers of the module; those without users are removed."""
    graph = gm.graph
    by_name = {n.name: n for n in graph.nodes}
    if fold:
        fold_constants(gm, [by_name[x] for x in fold if x in by_name], inputs)
        by_name = {n.name: n for n in graph.nodes}
    pick = dict(nodes or {})
    listed = list(graph.nodes)
    where = {n: i for i, n in enumerate(listed)}
    index = {x: where[pick.get(x, by_name.get(x))] for x in order if pick.get(x, by_name.get(x))}
    ranks = _op_ranks(order, index, "graph")
    deps = [[where[d] for d in n.all_input_nodes] for n in listed]
    first = [i for i, n in enumerate(listed) if n.op == "placeholder"]
    last = [i for i, n in enumerate(listed) if n.op == "output"]
    sequence = interleave(deps, ranks, first=first, last=last)
    head = listed[sequence[0]]
    if listed[0] is not head:
        listed[0].prepend(head)
    for a, b in itertools.pairwise(sequence):
        listed[a].append(listed[b])
    graph.lint()
    gm.recompile()
    return gm


def fold_constants(gm: Any, targets: Sequence[Any], inputs: Sequence[Any]) -> None:
    """Evaluate the fx nodes `targets` (and what they read) once and replace each by a buffer
    of `gm` (`get_attr`); a node without users is removed. A node returning several tensors is
    replaced through its `getitem` users."""
    import operator

    import torch

    graph = gm.graph
    want = set(targets)
    needed: set[Any] = set()
    stack = list(want)
    while stack:
        v = stack.pop()
        if v not in needed:
            needed.add(v)
            stack.extend(v.all_input_nodes)
    places = [n for n in graph.nodes if n.op == "placeholder"]
    feed = dict(zip(places, inputs, strict=False))
    env: dict[Any, Any] = {}
    for n in graph.nodes:
        if n not in needed or (n not in want and not n.users):
            continue
        if n.op == "placeholder":
            env[n] = feed[n]
        elif n.op == "get_attr":
            obj = gm
            for part in str(n.target).split("."):
                obj = getattr(obj, part)
            env[n] = obj
        elif n.op == "call_function":
            args, kwargs = torch.fx.node.map_arg((n.args, n.kwargs), env.__getitem__)
            with torch.no_grad():
                env[n] = n.target(*args, **kwargs)
    count = sum(1 for n in graph.nodes if n.op == "get_attr")

    def buffer(value: Any, at: Any) -> Any:
        nonlocal count
        name = f"_tensorplan_constant_{count}"
        count += 1
        gm.register_buffer(name, value.detach().clone(), persistent=False)
        with graph.inserting_before(at):
            return graph.get_attr(name)

    for n in reversed([n for n in graph.nodes if n in want]):  # consumers first
        value = env.get(n)
        if isinstance(value, torch.Tensor) and n.users:
            n.replace_all_uses_with(buffer(value, n))
        elif isinstance(value, list | tuple):
            for u in list(n.users):
                if u.target is operator.getitem and isinstance(u.args[1], int):
                    item = value[u.args[1]]
                    if isinstance(item, torch.Tensor):
                        u.replace_all_uses_with(buffer(item, u))
                        graph.erase_node(u)
        if not n.users and value is not None:
            graph.erase_node(n)
    for n in list(graph.nodes):  # the weights only folded nodes read
        if n.op == "get_attr" and not n.users and not str(n.target).startswith("_tensorplan"):
            graph.erase_node(n)

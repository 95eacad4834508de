"""ONNX graph -> a schedule instance and an allocation instance (issue 17).

The graph is read with the `onnx` package (extra `tensorplan[onnx]`), symbolic dimensions are
bound (`dims={"batch": 1}`), and ONNX shape inference gives every tensor a shape and a dtype;
a tensor whose shape or dtype stays unknown is an `InstanceError` naming the tensor and its
producer. Only the graph structure is needed: weights may be stored as external data that is
absent (the shipped models under `instances/models/` are made that way).

What becomes what (`Dataflow` is the neutral form the PyTorch importer shares):

- every node is one op, its id the node's name (or `<op_type>_<index>` when the name is empty or
  taken); an op comes after the producers of its inputs;
- every tensor a node produces is one alloc of its size in bytes (elements x dtype width; 4-bit
  types round up), used by its producer and its consumers. A graph output must outlive the run,
  so its users also include every sink node (a node whose outputs no node reads): the last op of
  any order is a sink, so the output stays live to the end (a sink placed before the producer
  only makes the lifetime longer, never unsafe). Zero-size tensors are left out;
- graph inputs and weights (initializers) are the caller's memory and are left out unless
  `include_inputs=True`, when each is an alloc used by its consumers;
- the allocation instance holds the same tensors with lifetimes under the model's own node
  order: time t is the t-th node, a tensor lives from its first user's step to its last's.

Subgraphs (If/Loop/Scan bodies) are rejected with a message naming the node: their tensors'
lifetimes depend on run-time control flow that a static plan cannot see.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tensorplan.problems.allocation import AllocationInstance, Buffer
from tensorplan.problems.core import InstanceError
from tensorplan.problems.schedule import Alloc, Op, ScheduleInstance

INSTALL = "pip install 'tensorplan[onnx]'  (or: pip install onnx)"

# Width in bits of each ONNX TensorProto element type (by its enum name); STRING and UNDEFINED are
# absent on purpose: they have no fixed size.
DTYPE_BITS: dict[str, int] = {
    "FLOAT": 32,
    "UINT8": 8,
    "INT8": 8,
    "UINT16": 16,
    "INT16": 16,
    "INT32": 32,
    "INT64": 64,
    "BOOL": 8,
    "FLOAT16": 16,
    "DOUBLE": 64,
    "UINT32": 32,
    "UINT64": 64,
    "COMPLEX64": 64,
    "COMPLEX128": 128,
    "BFLOAT16": 16,
    "FLOAT8E4M3FN": 8,
    "FLOAT8E4M3FNUZ": 8,
    "FLOAT8E5M2": 8,
    "FLOAT8E5M2FNUZ": 8,
    "FLOAT8E8M0": 8,
    "UINT4": 4,
    "INT4": 4,
    "FLOAT4E2M1": 4,
    "FLOAT6E2M3": 6,
    "FLOAT6E3M2": 6,
    "UINT2": 2,
    "INT2": 2,
}


@dataclass(frozen=True)
class Node:
    """One operation of a dataflow graph: its id, kind, and the tensors it reads and writes."""

    id: str
    kind: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


@dataclass(frozen=True)
class Dataflow:
    """A dataflow graph in its own node order, every tensor sized in bytes.

    `sizes` holds every tensor that may be planned; `external` names the graph inputs and weights
    (the caller's memory), `outputs` the graph outputs. Built by the ONNX and PyTorch importers.
    """

    name: str
    nodes: tuple[Node, ...]
    sizes: Mapping[str, int]
    external: frozenset[str] = frozenset()
    outputs: frozenset[str] = frozenset()
    kinds: Mapping[str, str] = field(default_factory=dict)  # tensor -> dtype name, for reports

    def users(self, include_inputs: bool = False) -> dict[str, list[int]]:
        """Node indices using each planned tensor (producer first, then readers, distinct)."""
        readers: dict[str, list[int]] = {}
        produced: dict[str, int] = {}
        for i, n in enumerate(self.nodes):
            for t in n.inputs:
                if t and (not readers.get(t) or readers[t][-1] != i):
                    readers.setdefault(t, []).append(i)
            for t in n.outputs:
                if t:
                    produced[t] = i
        read = {t for n in self.nodes for t in n.inputs}
        sinks = [i for i, n in enumerate(self.nodes) if not any(t in read for t in n.outputs)]
        out: dict[str, list[int]] = {}
        for t, size in self.sizes.items():
            if size <= 0:
                continue
            if t in produced:
                us = [produced[t], *readers.get(t, [])]
                if t in self.outputs:
                    us += sinks
            elif include_inputs and t in self.external and t in readers:
                us = list(readers[t])
            else:
                continue
            out[t] = list(dict.fromkeys(us))
        return out

    def check_order(self) -> None:
        """The node list must be topological: every tensor produced before it is read."""
        seen: set[str] = set()
        made = {t for n in self.nodes for t in n.outputs if t}
        for n in self.nodes:
            for t in n.inputs:
                if t and t in made and t not in seen:
                    raise InstanceError(
                        f"node {n.id!r}",
                        f"reads tensor {t!r} before the node that produces it: the graph's node "
                        "list is not in topological order",
                    )
            seen.update(n.outputs)


def to_instances(
    flow: Dataflow,
    *,
    include_inputs: bool = False,
    objective: str = "peak",
    alignment: int = 1,
) -> tuple[ScheduleInstance, AllocationInstance]:
    """The schedule instance (one op per node, one alloc per tensor) and the allocation instance
    (the same tensors, lifetimes under the graph's own node order)."""
    flow.check_order()
    ids = [n.id for n in flow.nodes]
    producers: dict[str, int] = {}
    for i, n in enumerate(flow.nodes):
        for t in n.outputs:
            if t:
                producers[t] = i
    ops = []
    for n in flow.nodes:
        after = dict.fromkeys(ids[producers[t]] for t in n.inputs if t in producers)
        ops.append(Op(n.id, tuple(after)))
    users = flow.users(include_inputs)
    allocs = tuple(Alloc(t, flow.sizes[t], tuple(ids[i] for i in us)) for t, us in users.items())
    sched = ScheduleInstance(tuple(ops), allocs, objective, flow.name)  # type: ignore[arg-type]
    buffers = tuple(Buffer(t, flow.sizes[t], min(us), max(us)) for t, us in users.items())
    return sched, AllocationInstance(buffers, alignment, None, flow.name)


def lifetimes(
    sched: ScheduleInstance, order: Sequence[str], *, alignment: int = 1, name: str | None = None
) -> AllocationInstance:
    """The allocation instance of a schedule instance under `order` (op ids): step t is the t-th
    op, an alloc lives from its first user's step to its last's (unused allocs are dropped)."""
    pos = {x: t for t, x in enumerate(order)}
    buffers = tuple(
        Buffer(a.id, a.size, min(pos[x] for x in a.ops), max(pos[x] for x in a.ops))
        for a in sched.allocs
        if a.ops
    )
    return AllocationInstance(buffers, alignment, None, name or sched.name)


# --- ONNX ----------------------------------------------------------------------------------------


def _onnx() -> Any:
    try:
        import onnx
    except ImportError:
        raise InstanceError("onnx", f"the onnx package is not installed: {INSTALL}") from None
    return onnx


def load_model(path: str | Path) -> Any:
    """Read an ONNX file without its external data (only shapes are needed)."""
    onnx = _onnx()
    path = Path(path)
    try:
        return onnx.load(str(path), load_external_data=False)
    except FileNotFoundError:
        raise InstanceError("<file>", "cannot read: no such file", path) from None
    except Exception as err:  # protobuf decode errors have no common base class
        raise InstanceError("<file>", f"not a readable ONNX model ({err})", path) from None


def read_onnx(
    model: Any, dims: Mapping[str, int] | None = None, name: str | None = None
) -> Dataflow:
    """The dataflow graph of an ONNX `ModelProto` (or a path), shapes inferred, sizes in bytes."""
    onnx = _onnx()
    if isinstance(model, str | Path):
        path = Path(model)
        try:
            return read_onnx(load_model(path), dims, name or path.stem)
        except InstanceError as err:
            raise (err if err.file else err.in_file(path)) from None
    model = _copy(model)
    graph = model.graph
    _reject_subgraphs(graph.node)
    if model.functions:
        from onnx import inliner

        model = inliner.inline_local_functions(model)
        graph = model.graph
        _reject_subgraphs(graph.node)
    _bind_dims(graph, dict(dims or {}))
    model = _infer(model)
    for _ in range(FOLD_ROUNDS):  # shapes computed at run time (Shape -> Gather -> ...): fold
        if not _unknown_shapes(model) or not _fold_shape_arithmetic(model):
            break
        model = _infer(model)
    graph = model.graph
    types: dict[str, Any] = {}
    for vi in [*graph.input, *graph.value_info, *graph.output]:
        if vi.type.HasField("tensor_type"):
            types.setdefault(vi.name, vi.type.tensor_type)
    weights = {init.name: init for init in graph.initializer}
    nodes = _nodes(graph.node)
    producer = {t: n for n in nodes for t in n.outputs if t}
    sizes: dict[str, int] = {}
    kinds: dict[str, str] = {}
    for t, init in weights.items():
        kinds[t] = onnx.TensorProto.DataType.Name(init.data_type)
        sizes[t] = _bytes(list(init.dims), init.data_type, t, "a weight (initializer)")
    for vi in graph.input:
        if vi.name in weights:
            continue
        tt = types.get(vi.name)
        sizes[vi.name], kinds[vi.name] = _tensor_bytes(vi.name, tt, "a graph input")
    for n in nodes:
        for t in n.outputs:
            if t:
                what = f"output of node {n.id!r} ({n.kind})"
                sizes[t], kinds[t] = _tensor_bytes(t, types.get(t), what, n.kind)
    external = frozenset(weights) | {vi.name for vi in graph.input}
    outputs = frozenset(vi.name for vi in graph.output if vi.name in producer)
    return Dataflow(name or graph.name or "model", tuple(nodes), sizes, external, outputs, kinds)


def import_onnx(
    model: Any,
    *,
    dims: Mapping[str, int] | None = None,
    include_inputs: bool = False,
    objective: str = "peak",
    alignment: int = 1,
    name: str | None = None,
) -> tuple[ScheduleInstance, AllocationInstance]:
    """An ONNX model (path or `ModelProto`) as (schedule instance, allocation instance)."""
    flow = read_onnx(model, dims, name)
    return to_instances(
        flow, include_inputs=include_inputs, objective=objective, alignment=alignment
    )


def _infer(model: Any) -> Any:
    onnx = _onnx()
    try:
        return onnx.shape_inference.infer_shapes(model, check_type=False, data_prop=True)
    except Exception as err:  # inference errors (bad attributes, rank mismatch) name the node
        raise InstanceError("shape inference", f"ONNX shape inference failed: {err}") from None


def _static_shapes(model: Any) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    g = model.graph
    for vi in [*g.input, *g.value_info, *g.output]:
        tt = vi.type.tensor_type
        if vi.type.HasField("tensor_type") and tt.HasField("shape"):
            dims = [d.dim_value if d.HasField("dim_value") else -1 for d in tt.shape.dim]
            if all(d >= 0 for d in dims):
                out.setdefault(vi.name, dims)
    for t in g.initializer:
        out[t.name] = list(t.dims)
    return out


def _unknown_shapes(model: Any) -> bool:
    known = _static_shapes(model)
    return any(t and t not in known for n in model.graph.node for t in n.output)


FOLD_ROUNDS = 4
FOLD_MAX = 4096  # only small integer/shape tensors are ever evaluated


def _fold_shape_arithmetic(model: Any) -> bool:
    """Evaluate, with numpy, the small computations on shapes and constants that the exporters
    emit for dynamic shapes (Shape -> Gather -> Div -> Slice ...) once every dimension is bound,
    and replace those nodes by initializers (like onnx-simplifier); then shape inference can see
    through them. Such nodes compute shapes, not data: they are not ops of the plan. Returns
    whether anything was folded."""
    import numpy as np
    from onnx import helper, numpy_helper

    g = model.graph
    shapes = _static_shapes(model)
    values: dict[str, np.ndarray] = {}
    for t in g.initializer:
        if t.data_location != 1 and math.prod(t.dims) <= FOLD_MAX:  # 1 = EXTERNAL
            values[t.name] = numpy_helper.to_array(t)
    folded: list[Any] = []
    for n in g.node:
        if n.domain not in ("", "ai.onnx"):
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
        ins = [values.get(t) if t else None for t in n.input]
        try:
            out = _evaluate(n.op_type, n.input, ins, attrs, shapes)
        except Exception:  # an op form this small evaluator does not cover: leave it
            out = None
        if out is None or any(o.size > FOLD_MAX for o in out):
            continue
        folded.append(n)
        for name, v in zip(n.output, out, strict=False):
            values[name] = v
    if not folded:
        return False
    outputs = {o.name for o in g.output}
    drop = [n for n in folded if not any(t in outputs for t in n.output)]
    if not drop:
        return False
    for n in drop:
        for name in n.output:
            g.initializer.append(numpy_helper.from_array(np.asarray(values[name]), name))
    keep = [n for n in g.node if all(n is not d for d in drop)]
    del g.node[:]
    g.node.extend(keep)
    return True


def _evaluate(
    op: str, names: Sequence[str], ins: list[Any], attrs: dict[str, Any], shapes: dict
) -> list[Any] | None:
    """Outputs of one node from constant inputs, for the shape-arithmetic ops; else None."""
    import numpy as np
    from onnx import numpy_helper

    if op == "Shape" and names[0] in shapes:
        dims = shapes[names[0]]
        start, end = attrs.get("start", 0), attrs.get("end", len(dims))
        return [np.array(dims[start:end], dtype=np.int64)]
    if op == "Size" and names[0] in shapes:
        return [np.array(math.prod(shapes[names[0]]), dtype=np.int64)]
    if op == "Constant":
        if "value" in attrs:
            return [numpy_helper.to_array(attrs["value"])]
        for key, dtype in (("value_int", np.int64), ("value_ints", np.int64)):
            if key in attrs:
                return [np.array(attrs[key], dtype=dtype)]
        for key in ("value_float", "value_floats"):
            if key in attrs:
                return [np.array(attrs[key], dtype=np.float32)]
        return None
    if not ins or any(x is None for x, t in zip(ins, names, strict=True) if t):
        return None
    a = ins
    binary = {
        "Add": np.add,
        "Sub": np.subtract,
        "Mul": np.multiply,
        "Equal": np.equal,
        "Less": np.less,
        "Greater": np.greater,
        "Max": np.maximum,
        "Min": np.minimum,
    }
    if op in binary:
        return [binary[op](a[0], a[1])]
    if op == "Div":
        if np.issubdtype(a[0].dtype, np.integer):
            return [np.trunc(a[0] / a[1]).astype(a[0].dtype)]
        return [a[0] / a[1]]
    if op == "Identity":
        return [a[0]]
    if op == "Gather":
        return [np.take(a[0], a[1], axis=attrs.get("axis", 0))]
    if op == "Concat":
        return [np.concatenate([np.atleast_1d(x) for x in a], axis=attrs.get("axis", 0))]
    if op in ("Unsqueeze", "Squeeze"):
        axes = attrs.get("axes", a[1].tolist() if len(a) > 1 and a[1] is not None else None)
        if op == "Unsqueeze":
            if axes is None:  # Unsqueeze needs its axes: not a form folded here
                return None
            out = a[0]
            for ax in sorted(int(x) % (a[0].ndim + len(axes)) for x in axes):
                out = np.expand_dims(out, ax)
            return [out]
        return [np.squeeze(a[0], axis=None if axes is None else tuple(axes))]
    if op == "Slice":
        data, starts, ends = a[0], a[1], a[2]
        axes = a[3] if len(a) > 3 and a[3] is not None else range(len(starts))
        steps = a[4] if len(a) > 4 and a[4] is not None else [1] * len(starts)
        index = [slice(None)] * data.ndim
        for s0, e0, ax, st in zip(starts, ends, axes, steps, strict=False):
            index[int(ax)] = slice(int(s0), int(e0), int(st))
        return [data[tuple(index)]]
    if op == "Cast":
        from onnx import helper

        return [a[0].astype(helper.tensor_dtype_to_np_dtype(attrs["to"]))]
    if op == "Range":
        return [np.arange(a[0], a[1], a[2]).astype(a[0].dtype)]
    if op == "Reshape":
        return [a[0].reshape([d if d else a[0].shape[k] for k, d in enumerate(a[1])])]
    if op == "ConstantOfShape":
        fill = attrs.get("value")
        v = numpy_helper.to_array(fill) if fill is not None else np.zeros(1, np.float32)
        return [np.full(a[0].astype(np.int64), v.reshape(-1)[0], dtype=v.dtype)]
    if op == "Where":
        return [np.where(a[0], a[1], a[2])]
    if op == "ReduceProd" and len(a) == 1:
        return [np.prod(a[0], keepdims=bool(attrs.get("keepdims", 1)))]
    return None


def parse_dims(items: Iterable[str]) -> dict[str, int]:
    """`["batch=1", "seq=128"]` -> {"batch": 1, "seq": 128}; a malformed item is an error."""
    out: dict[str, int] = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key.strip() or not value.strip().isdigit() or int(value) <= 0:
            raise InstanceError("--dim", f"expected NAME=POSITIVE_INTEGER, got {item!r}")
        out[key.strip()] = int(value)
    return out


def _copy(model: Any) -> Any:
    onnx = _onnx()
    out = onnx.ModelProto()
    out.CopyFrom(model)
    return out


def _nodes(raw: Sequence[Any]) -> list[Node]:
    """Nodes with unique ids: the node's name when present and free, else `<op_type>_<index>`."""
    taken: set[str] = set()
    out = []
    for i, n in enumerate(raw):
        nid = n.name if n.name and n.name not in taken else f"{n.op_type}_{i}"
        while nid in taken:
            nid += "'"
        taken.add(nid)
        kind = n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}"
        out.append(Node(nid, kind, tuple(n.input), tuple(n.output)))
    return out


def _reject_subgraphs(nodes: Sequence[Any]) -> None:
    onnx = _onnx()
    kinds = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
    for i, n in enumerate(nodes):
        for a in n.attribute:
            if a.type in kinds:
                raise InstanceError(
                    f"node {n.name or f'#{i}'!r} ({n.op_type})",
                    f"has a subgraph (attribute {a.name!r}): control flow (If/Loop/Scan) is not "
                    "supported; export the model with the loop unrolled or the branch fixed",
                )


def _bind_dims(graph: Any, dims: dict[str, int]) -> None:
    """Replace each symbolic dimension named in `dims` by its value, everywhere it is declared."""
    names: set[str] = set()
    declared: set[str] = set()  # the graph inputs' symbolic dims: the ones worth offering
    for k, vi in enumerate([*graph.input, *graph.output, *graph.value_info]):
        if not vi.type.HasField("tensor_type"):
            continue
        for d in vi.type.tensor_type.shape.dim:
            if d.HasField("dim_param"):
                names.add(d.dim_param)
                if k < len(graph.input):
                    declared.add(d.dim_param)
                if d.dim_param in dims:
                    d.dim_value = dims[d.dim_param]  # clears dim_param (a oneof)
    unknown = sorted(set(dims) - names)
    if unknown:
        have = ", ".join(sorted(declared)) or "none"
        raise InstanceError(
            f"--dim {unknown[0]}",
            f"the model has no dimension named so (the inputs' symbolic dims: {have})",
        )


def _tensor_bytes(name: str, tt: Any, what: str, op_kind: str | None = None) -> tuple[int, str]:
    onnx = _onnx()
    hint = ""
    if op_kind is not None:
        domain, _, op = op_kind.rpartition(".")
        if not onnx.defs.has(op, domain):
            hint = f"; op {op_kind!r} is not an ONNX operator this onnx version knows (unsupported)"
    if tt is None or tt.elem_type == 0:
        raise InstanceError(
            f"tensor {name!r}", f"{what}: dtype unknown after shape inference{hint}"
        )
    if not tt.HasField("shape"):
        raise InstanceError(
            f"tensor {name!r}", f"{what}: shape unknown after shape inference{hint}"
        )
    shape: list[int] = []
    for k, d in enumerate(tt.shape.dim):
        if d.HasField("dim_value"):
            shape.append(d.dim_value)
        elif d.HasField("dim_param") and not d.dim_param.startswith("unk__"):
            raise InstanceError(
                f"tensor {name!r}",
                f"{what}: dimension {k} is symbolic ({d.dim_param!r}); "
                f"bind it with --dim {d.dim_param}=VALUE",
            )
        else:
            raise InstanceError(
                f"tensor {name!r}",
                f"{what}: dimension {k} unknown after shape inference (it depends on values "
                f"known only at run time){hint}",
            )
    return _bytes(shape, tt.elem_type, name, what), onnx.TensorProto.DataType.Name(tt.elem_type)


def _bytes(shape: Sequence[int], elem_type: int, name: str, what: str) -> int:
    onnx = _onnx()
    try:
        dtype = onnx.TensorProto.DataType.Name(elem_type)
    except ValueError:
        dtype = f"#{elem_type}"
    bits = DTYPE_BITS.get(dtype)
    if bits is None:
        raise InstanceError(
            f"tensor {name!r}", f"{what}: dtype {dtype} has no fixed size (unsupported)"
        )
    return math.ceil(math.prod(shape) * bits / 8)


def write_onnx_instances(
    model: str | Path,
    outdir: str | Path,
    dims: Iterable[str] | Mapping[str, int] = (),
    include_inputs: bool = False,
    objective: str = "peak",
) -> tuple[Path, Path]:
    """`tensorplan import onnx`: write `<stem>.schedule.json` and `<stem>.allocation.json`."""
    from tensorplan.problems import allocation, schedule
    from tensorplan.problems.core import write_json_atomic

    bound = dict(dims) if isinstance(dims, Mapping) else parse_dims(dims)
    stem = Path(model).stem
    sched, alloc = import_onnx(
        model, dims=bound, include_inputs=include_inputs, objective=objective, name=stem
    )
    out = Path(outdir)
    paths = (out / f"{stem}.schedule.json", out / f"{stem}.allocation.json")
    write_json_atomic(paths[0], schedule.instance_to_json(sched))
    write_json_atomic(paths[1], allocation.instance_to_json(alloc))
    return paths

"""ONNX graph -> a schedule instance and an allocation instance (issue 17).

The graph is read with the `onnx` package (extra `tensorplan[onnx]`), symbolic dimensions are
bound (`dims={"batch": 1}`), and ONNX shape inference gives every tensor a shape and a dtype;
a tensor whose shape or dtype stays unknown is an `InstanceError` naming the tensor and its
producer. Only the graph structure is needed: weights may be stored as external data that is
absent (the shipped models under `instances/models/` are made that way).

What becomes what (`Dataflow` is the neutral form the PyTorch importer shares):

- every node is one op, its id the node's name (or `<op_type>_<index>` when the name is empty or
  taken); an op comes after the producers of its inputs;
- tensors that share storage in every runtime are one alloc: the outputs of Reshape, Flatten,
  Squeeze, Unsqueeze, Identity and inference-mode Dropout are their input's storage (the nodes
  stay ops, using it). Every other tensor a node produces is one alloc of its size in bytes
  (elements x dtype width; 4-bit types round up), used by every node that produces, reads or
  writes it through any of its names; zero-size tensors are left out;
- the graph outputs are held to the end: an op `END_OP` ("<end>") comes after every sink and uses
  them, so an output lives from its producer to the end of any order (an op with no reader of
  its own no longer stretches it);
- tensors computable from constants alone (initializers, `Constant` nodes, `Shape`/`Size` once
  the dimensions are bound, and what follows from them) are weights computed ahead of the run:
  with `constants="exclude"` (the default) their nodes are not ops and they are not planned;
  `constants="plan"` plans them like any other tensor;
- graph inputs and weights (initializers) are the caller's memory and are left out unless
  `include_inputs=True`, when each is an alloc used by its consumers;
- `workspace=` (a table like `WORKSPACE`, off by default) adds a scratch alloc per op of the
  listed kinds, used by that op alone;
- the allocation instance holds the same allocs with lifetimes under the model's own node
  order: time t is the t-th op, an alloc lives from its first user's step to its last's.

In-place writes (PyTorch graphs only; ONNX has none) are ordered: a writer comes after every
earlier reader of the storage it writes, and every later reader after it. An empty file, a graph
without nodes, a cycle, a negative dimension and sizes no instance can hold (past 2**62, or
refused by the instance checks) are `InstanceError`s at import.

Subgraphs (If/Loop/Scan bodies) are rejected with a message naming the node: their tensors'
lifetimes depend on run-time control flow that a static plan cannot see.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from tensorplan.problems.allocation import AllocationInstance, Buffer
from tensorplan.problems.core import MAX_INT, InstanceError
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


END_OP = "<end>"
"""Id of the op that comes after every other one when some tensor must outlive the run: it uses
the graph outputs (and, in a training step, the loss and the gradients held for the optimizer),
so they stay live from their producer to the end of any order. No node ever gets this id."""

Constants = Literal["exclude", "plan"]
"""What becomes of the tensors computable from constants alone (`Dataflow.constants`):
`"exclude"` (default) treats them as weights, computed ahead of the run (folded): the nodes that
only compute them are not ops and they are not planned (they are allocs with `include_inputs`,
like weights); `"plan"` keeps them as ops and planned tensors, like any other."""

WORKSPACE: Mapping[str, float] = {
    "Conv": 1.0,
    "ConvTranspose": 1.0,
    "conv2d": 1.0,
    "convolution": 1.0,
    "conv_transpose2d": 1.0,
    "Gelu": 1.0,
    "gelu": 1.0,
}
"""Scratch memory per op kind (ONNX op type, or ATen op name without its overload); pass it (or
your own table) as `workspace=` to add one alloc per such op, live only at that op. Off by
default. An entry `kind` is bytes per byte of the op's outputs; `kind/inputs` bytes per byte of
its inputs that are not weights (activations, graph inputs), `kind/weights` per byte of its
weights (constant inputs); an op's workspace is the sum of its kind's entries. The values here
are an assumption, not a measurement: one output's worth for a convolution and for GELU. For
PyTorch on the CPU, `torch_import.TORCH_CPU_WORKSPACE` is measured (torch.profiler, torch 2.13):
there GELU takes no scratch, a convolution copies its input and its weight
(`benchmarks/models.py`, part `zoo`). No table here is calibrated for onnxruntime."""


Workspace = Mapping[str, float] | Literal["runtime"] | None
"""What `to_instances(workspace=...)` takes: a table like `WORKSPACE`, "runtime", or None."""


@dataclass(frozen=True)
class Node:
    """One operation of a dataflow graph: its id, kind, the tensors it reads and writes, and the
    inputs it overwrites in place (`writes`: its outputs then share those inputs' storage)."""

    id: str
    kind: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    writes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Dataflow:
    """A dataflow graph in its own node order, every tensor sized in bytes.

    `sizes` holds every tensor that may be planned; `external` names the graph inputs and weights
    (the caller's memory), `outputs` the tensors held to the end of the run; `storage` maps a
    tensor that shares another's storage (a view, a reshape, an in-place result) to the tensor
    that owns it; `constants` are the tensors computable from constants alone. Built by the ONNX
    and PyTorch importers.
    """

    name: str
    nodes: tuple[Node, ...]
    sizes: Mapping[str, int]
    external: frozenset[str] = frozenset()
    outputs: frozenset[str] = frozenset()
    kinds: Mapping[str, str] = field(default_factory=dict)  # tensor -> dtype name, for reports
    storage: Mapping[str, str] = field(default_factory=dict)
    constants: frozenset[str] = frozenset()
    scratch: Mapping[str, int] | None = None
    """Per node id, the scratch bytes its runtime is known to take (the PyTorch route fills it
    from the traced shapes: `torch_import.cpu_scratch`; None: not known, the ONNX route);
    `to_instances(workspace="runtime")`."""

    def root(self, tensor: str) -> str:
        """The tensor that owns `tensor`'s storage (itself unless it is an alias)."""
        return self.storage.get(tensor, tensor)

    def with_reads(self, extra: Mapping[int, Sequence[str]]) -> Dataflow:
        """This graph with node `i` also reading each tensor of `extra[i]` (a nominal read: the
        runtime holds a reference that long), repeats and existing reads dropped."""
        nodes = list(self.nodes)
        for i, more in extra.items():
            n = nodes[i]
            add = tuple(t for t in dict.fromkeys(more) if t not in n.inputs)
            if add:
                nodes[i] = Node(n.id, n.kind, n.inputs + add, n.outputs, n.writes)
        return replace(self, nodes=tuple(nodes))

    def without_constants(self) -> Dataflow:
        """Constant-derived tensors as weights: the nodes that only compute them are dropped and
        the tensors join `external`."""
        const = self.constants
        nodes = tuple(
            n
            for n in self.nodes
            if n.writes or not (outs := [t for t in n.outputs if t]) or not set(outs) <= const
        )
        return replace(
            self,
            nodes=nodes,
            external=self.external | const,
            outputs=self.outputs - const,
            constants=frozenset(),
        )

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


def constant_closure(
    nodes: Sequence[Node],
    seeds: Iterable[str],
    storage: Mapping[str, str],
    *,
    volatile: Callable[[Node], bool],
    shape_only: Callable[[Node], bool],
) -> frozenset[str]:
    """The tensors computable from `seeds` alone: outputs of deterministic nodes whose inputs are
    all such tensors (a node without inputs, like `Constant` or `arange`, included), or that read
    only their input's shape. A tensor whose storage some node writes in place is never one."""
    written = {storage.get(t, t) for n in nodes for t in n.writes}
    const = {t for t in seeds if storage.get(t, t) not in written}
    for n in nodes:
        outs = [t for t in n.outputs if t]
        if not outs or n.writes or volatile(n) or any(storage.get(t, t) in written for t in outs):
            continue
        if shape_only(n) or all(t in const for t in n.inputs if t):
            const.update(outs)
    return frozenset(const)


def to_instances(
    flow: Dataflow,
    *,
    include_inputs: bool = False,
    objective: str = "peak",
    alignment: int = 1,
    constants: Constants = "exclude",
    workspace: Workspace = None,
) -> tuple[ScheduleInstance, AllocationInstance]:
    """The schedule instance (one op per node, one alloc per storage) and the allocation instance
    (the same allocs, lifetimes under the graph's own node order).

    A storage is used by every node that reads or writes it through any of its tensors; an op
    comes after the producers of its inputs, and an op that writes a storage in place also comes
    after every earlier reader of it (write-after-read), before every later one. `constants`:
    see `Constants`; `workspace`: a table like `WORKSPACE`, "runtime" (the scratch the route
    measured per op: `Dataflow.scratch`) or None (no workspaces)."""
    flow.check_order()
    scratch = _workspace_of(workspace, flow)  # before constants go: the table's "/weights"
    if constants == "exclude":
        flow = flow.without_constants()
    elif constants != "plan":
        raise ValueError(f"constants must be 'exclude' or 'plan', got {constants!r}")
    nodes, root = flow.nodes, flow.root
    ids = [n.id for n in nodes]
    made = {t: i for i, n in enumerate(nodes) for t in n.outputs if t}
    after: list[dict[int, None]] = [{} for _ in nodes]
    access: dict[str, list[int]] = {}  # storage -> the nodes using it, in order
    last_write: dict[str, int] = {}  # storage -> the node that created or last wrote it
    readers: dict[str, list[int]] = {}  # storage -> its readers since then
    for i, n in enumerate(nodes):
        for t in n.inputs:
            if t in made:
                after[i][made[t]] = None
        writes = {root(t) for t in n.writes if t} | {t for t in n.outputs if t and root(t) == t}
        for r in dict.fromkeys(root(t) for t in (*n.inputs, *n.outputs) if t):
            access.setdefault(r, []).append(i)
            if r in last_write and (r in writes or nodes[last_write[r]].writes):
                after[i][last_write[r]] = None  # after the last in-place write (the data edges
                # already order every reader after the storage's creator)
            if r in writes:
                after[i].update(dict.fromkeys(readers.pop(r, [])))
                last_write[r] = i
            else:
                readers.setdefault(r, []).append(i)
        after[i].pop(i, None)
    held = {root(t) for t in flow.outputs}
    allocs: list[Alloc] = []
    for r in flow.sizes:
        if r not in access or root(r) != r or flow.sizes[r] <= 0:
            continue
        if r in made:
            users = [ids[i] for i in access[r]] + ([END_OP] if r in held else [])
        elif include_inputs and r in flow.external:
            users = [ids[i] for i in access[r]]
        else:
            continue
        allocs.append(Alloc(r, flow.sizes[r], tuple(users)))
    taken = {a.id for a in allocs}
    for n in nodes:
        size = scratch(n)
        if size > 0:
            wid = f"{n.id}.workspace"
            while wid in taken:
                wid += "'"
            taken.add(wid)
            allocs.append(Alloc(wid, size, (n.id,)))
    _check_sizes(allocs, flow.name)
    ops = [Op(ids[i], tuple(ids[j] for j in after[i])) for i in range(len(nodes))]
    if any(END_OP in a.ops for a in allocs):
        inner = {j for a in after for j in a}
        ops.append(Op(END_OP, tuple(ids[i] for i in range(len(nodes)) if i not in inner)))
    try:  # the checks the loaders make, at import: never write what they would refuse
        sched = ScheduleInstance(tuple(ops), tuple(allocs), objective, flow.name)  # type: ignore[arg-type]
        alloc = lifetimes(sched, [o.id for o in ops], alignment=alignment, name=flow.name)
    except InstanceError as err:
        raise InstanceError(
            f"model {flow.name!r}", f"gives an instance that is refused: {err}"
        ) from None
    return sched, alloc


def _workspace_of(workspace: Workspace, flow: Dataflow) -> Callable[[Node], int]:
    """A node's scratch bytes under `workspace`: a table (see `WORKSPACE`), "runtime" (the
    flow's own `scratch`, refused when the route gave none) or None (no workspaces)."""
    if workspace == "runtime":
        known = flow.scratch
        if known is None:
            raise ValueError("workspace='runtime' needs the PyTorch route (import_torch)")
        return lambda n: int(known.get(n.id, 0))
    table: Mapping[str, float] = workspace or {}
    weights = flow.constants  # for the table's "/weights" entries
    return lambda n: _workspace_bytes(table, n, flow.sizes, weights)


def _workspace_factor(table: Mapping[str, float], kind: str, part: str = "") -> float:
    """The table's entry for an op kind (and `part`: "", "/inputs" or "/weights"), by its full
    name or without the ATen overload."""
    return table.get(kind + part, table.get(kind.split(".")[0] + part, 0.0))


def _workspace_bytes(
    table: Mapping[str, float], node: Node, sizes: Mapping[str, int], weights: frozenset[str]
) -> int:
    """A node's scratch bytes under a workspace table (see `WORKSPACE`): its entry times the
    bytes of its outputs, plus its "/inputs" entry times the bytes of its inputs that are not
    weights, plus its "/weights" entry times the bytes of those that are (each tensor once)."""
    if not table:
        return 0
    outs = sum(sizes.get(t, 0) for t in dict.fromkeys(node.outputs) if t)
    ins = [t for t in dict.fromkeys(node.inputs) if t]
    acts = sum(sizes.get(t, 0) for t in ins if t not in weights)
    consts = sum(sizes.get(t, 0) for t in ins if t in weights)
    parts = ((outs, ""), (acts, "/inputs"), (consts, "/weights"))
    return math.ceil(sum(_workspace_factor(table, node.kind, p) * b for b, p in parts))


def _check_sizes(allocs: Sequence[Alloc], name: str) -> None:
    """Refuse what no instance file can hold: nothing to plan, or sizes past 2**62."""
    if not allocs:
        raise InstanceError(
            "model", f"{name}: no intermediate tensor of positive size: nothing to plan"
        )
    big = max(allocs, key=lambda a: a.size)
    if big.size > MAX_INT:
        raise InstanceError(
            f"tensor {big.id!r}",
            f"{big.size} bytes: past 2**62, the largest size an instance holds",
        )
    total = sum(a.size for a in allocs)
    if total > MAX_INT:
        raise InstanceError(
            f"model {name!r}",
            f"its tensors total {total} bytes, past 2**62 (largest: {big.id!r}, "
            f"{big.size} bytes): the solvers' sums would overflow",
        )


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
        empty = path.is_file() and path.stat().st_size == 0
        model = None if empty else onnx.load(str(path), load_external_data=False)
    except FileNotFoundError:
        raise InstanceError("<file>", "cannot read: no such file", path) from None
    except Exception as err:  # protobuf decode errors have no common base class
        raise InstanceError("<file>", f"not a readable ONNX model ({err})", path) from None
    if model is None:
        raise InstanceError("<file>", "empty file (0 bytes): not an ONNX model", path)
    if not model.HasField("graph"):
        raise InstanceError("<file>", "not an ONNX model: it holds no graph", path)
    return model


RANDOM_OPS = frozenset(
    (
        "RandomNormal",
        "RandomUniform",
        "RandomNormalLike",
        "RandomUniformLike",
        "Bernoulli",
        "Multinomial",
    )
)
"""ONNX ops whose result is never a constant, whatever their inputs."""

ALIAS_OPS = frozenset(("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"))
"""ONNX ops whose output shares its first input's storage in every runtime (onnxruntime declares
them aliasing; PyTorch's equivalents are views); so does Dropout's output in inference mode."""


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
    if not graph.node:
        raise InstanceError("graph", "has no nodes: nothing to plan")
    nodes = _nodes(graph.node)
    _check_acyclic(nodes)
    Dataflow("", tuple(nodes), {}).check_order()
    _bind_dims(graph, dict(dims or {}))
    inferred = _infer(model)
    for _ in range(FOLD_ROUNDS):  # shapes computed at run time (Shape -> Gather -> ...): fold
        if not _unknown_shapes(inferred) or not _fold_shape_arithmetic(inferred):
            break
        inferred = _infer(inferred)
    types: dict[str, Any] = {}
    g = inferred.graph
    for vi in [*g.input, *g.value_info, *g.output]:
        if vi.type.HasField("tensor_type"):
            types.setdefault(vi.name, vi.type.tensor_type)
    weights = {init.name: init for init in graph.initializer}
    producer = {t: n for n in nodes for t in n.outputs if t}
    folded = {t.name: t for t in g.initializer if t.name not in weights and t.name in producer}
    sizes: dict[str, int] = {}
    kinds: dict[str, str] = {}
    for t, init in [*weights.items(), *folded.items()]:
        kinds[t] = onnx.TensorProto.DataType.Name(init.data_type)
        what = "a weight (initializer)" if t in weights else f"output of node {producer[t].id!r}"
        sizes[t] = _bytes(list(init.dims), init.data_type, t, what)
    for vi in graph.input:
        if vi.name in weights:
            continue
        tt = types.get(vi.name)
        sizes[vi.name], kinds[vi.name] = _tensor_bytes(vi.name, tt, "a graph input")
    for n in nodes:
        for t in n.outputs:
            if t and t not in folded:
                what = f"output of node {n.id!r} ({n.kind})"
                sizes[t], kinds[t] = _tensor_bytes(t, types.get(t), what, n.kind)
    storage = _onnx_storage(nodes, _known_values(graph))
    inputs = {vi.name for vi in graph.input}
    constants = constant_closure(
        nodes,
        set(weights) - inputs,  # an initializer that is also an input may be overridden
        storage,
        volatile=lambda n: (
            n.kind in RANDOM_OPS or (n.kind == "Dropout" and n.outputs[0] not in storage)
        ),
        shape_only=lambda n: n.kind in ("Shape", "Size"),
    )
    external = frozenset(weights) | inputs
    outputs = frozenset(vi.name for vi in graph.output if vi.name in producer)
    return Dataflow(
        name or graph.name or "model",
        tuple(nodes),
        sizes,
        external,
        outputs,
        kinds,
        storage,
        constants,
    )


def import_onnx(
    model: Any,
    *,
    dims: Mapping[str, int] | None = None,
    include_inputs: bool = False,
    objective: str = "peak",
    alignment: int = 1,
    constants: Constants = "exclude",
    workspace: Workspace = None,
    name: str | None = None,
) -> tuple[ScheduleInstance, AllocationInstance]:
    """An ONNX model (path or `ModelProto`) as (schedule instance, allocation instance); see
    `to_instances` for `constants` and `workspace`."""
    flow = read_onnx(model, dims, name)
    return to_instances(
        flow,
        include_inputs=include_inputs,
        objective=objective,
        alignment=alignment,
        constants=constants,
        workspace=workspace,
    )


def _known_values(graph: Any) -> dict[str, Any]:
    """The values of the small initializers and `Constant` nodes (numpy arrays)."""
    from onnx import helper, numpy_helper

    out: dict[str, Any] = {}
    for t in graph.initializer:
        if t.data_location != 1 and math.prod(t.dims) <= FOLD_MAX:  # 1 = EXTERNAL
            out[t.name] = numpy_helper.to_array(t)
    for n in graph.node:
        if n.op_type == "Constant" and n.domain in ("", "ai.onnx"):
            attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
            try:
                value = _evaluate("Constant", [], [], attrs, {})
            except Exception:  # a sparse or malformed constant: its value stays unknown
                value = None
            if value:
                out[n.output[0]] = value[0]
    return out


def _onnx_storage(nodes: Sequence[Node], values: Mapping[str, Any]) -> dict[str, str]:
    """Output -> the tensor whose storage it shares, for the aliasing ops (`ALIAS_OPS`, and
    Dropout when its `training_mode` input is absent or a constant false)."""
    storage: dict[str, str] = {}
    for n in nodes:
        alias = n.kind in ALIAS_OPS
        if n.kind == "Dropout":
            mode = n.inputs[2] if len(n.inputs) > 2 else ""
            alias = not mode or (mode in values and not bool(values[mode].any()))
        if alias and n.inputs and n.inputs[0] and n.outputs and n.outputs[0]:
            storage[n.outputs[0]] = storage.get(n.inputs[0], n.inputs[0])
    return storage


def _check_acyclic(nodes: Sequence[Node]) -> None:
    """Refuse a graph with a cycle (it has no order to plan), naming the nodes along one."""
    from graphlib import CycleError, TopologicalSorter

    made = {t: i for i, n in enumerate(nodes) for t in n.outputs if t}
    preds = {i: [made[t] for t in n.inputs if t in made] for i, n in enumerate(nodes)}
    try:
        TopologicalSorter(preds).prepare()
    except CycleError as err:
        ring = " -> ".join(f"{nodes[i].id!r} ({nodes[i].kind})" for i in err.args[1])
        raise InstanceError(
            "graph", f"has a cycle: {ring}; a dataflow graph must be acyclic"
        ) from None


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
            out = _evaluate(n.op_type, n.input, ins, attrs, shapes, len(n.output))
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
    op: str,
    names: Sequence[str],
    ins: list[Any],
    attrs: dict[str, Any],
    shapes: dict,
    n_out: int = 1,
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
    binary: dict[str, Callable[..., Any]] = {
        "Add": np.add,
        "Sub": np.subtract,
        "Mul": np.multiply,
        "Pow": np.power,
        "Equal": np.equal,
        "Less": np.less,
        "LessOrEqual": np.less_equal,
        "Greater": np.greater,
        "GreaterOrEqual": np.greater_equal,
        "And": np.logical_and,
        "Or": np.logical_or,
        "Xor": np.logical_xor,
        "BitwiseAnd": np.bitwise_and,
        "BitwiseOr": np.bitwise_or,
    }
    unary: dict[str, Callable[..., Any]] = {
        "Neg": np.negative,
        "Abs": np.abs,
        "Sign": np.sign,
        "Floor": np.floor,
        "Ceil": np.ceil,
        "Round": np.round,
        "Sqrt": np.sqrt,
        "Reciprocal": np.reciprocal,
        "Not": np.logical_not,
        "NonZero": lambda x: np.array(np.nonzero(x), dtype=np.int64),
    }
    variadic: dict[str, Callable[..., Any]] = {"Max": np.maximum, "Min": np.minimum, "Sum": np.add}
    if op in binary:
        return [np.asarray(binary[op](a[0], a[1]))]
    if op in unary:
        return [np.asarray(unary[op](a[0]))]
    if op in variadic:
        out = a[0]
        for x in a[1:]:
            out = variadic[op](out, x)
        return [np.asarray(out)]
    if op == "Mod":  # fmod=0: the sign of the divisor (integers); fmod=1: of the dividend
        return [np.fmod(a[0], a[1]) if attrs.get("fmod", 0) else np.mod(a[0], a[1])]
    if op == "Div":
        if np.issubdtype(a[0].dtype, np.integer):
            return [np.trunc(a[0] / a[1]).astype(a[0].dtype)]
        return [a[0] / a[1]]
    if op == "Identity":
        return [a[0]]
    return _evaluate_shaped(op, a, attrs, n_out)


def _evaluate_shaped(op: str, a: list[Any], attrs: dict[str, Any], n_out: int) -> list[Any] | None:
    """`_evaluate` for the ops that index, reshape, reduce or build arrays."""
    import numpy as np
    from onnx import numpy_helper

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
    if op == "Expand":
        return [a[0] * np.ones(tuple(int(d) for d in a[1]), dtype=a[0].dtype)]
    if op == "Tile":
        return [np.tile(a[0], tuple(int(d) for d in a[1]))]
    if op == "Transpose":
        return [np.transpose(a[0], attrs.get("perm"))]
    if op == "Flatten":
        axis = attrs.get("axis", 1) % (a[0].ndim or 1)
        return [a[0].reshape(math.prod(a[0].shape[:axis]), -1)]
    reductions: dict[str, Callable[..., Any]] = {
        "ReduceSum": np.sum,
        "ReduceProd": np.prod,
        "ReduceMax": np.max,
        "ReduceMin": np.min,
        "ReduceMean": np.mean,
    }
    if op in reductions:
        axes = attrs.get("axes", a[1].tolist() if len(a) > 1 and a[1] is not None else None)
        if not axes and attrs.get("noop_with_empty_axes", 0):
            return [a[0]]
        keep = bool(attrs.get("keepdims", 1))
        found = reductions[op](a[0], axis=None if not axes else tuple(axes), keepdims=keep)
        return [np.asarray(found).astype(a[0].dtype)]
    if op == "CumSum" and not attrs.get("exclusive", 0) and not attrs.get("reverse", 0):
        return [np.cumsum(a[0], axis=int(a[1]))]
    if op == "Clip":
        low = a[1] if len(a) > 1 and a[1] is not None else None
        high = a[2] if len(a) > 2 and a[2] is not None else None
        return [np.clip(a[0], low, high)]
    if op == "Split":
        axis = attrs.get("axis", 0)
        sizes = attrs.get("split", a[1].tolist() if len(a) > 1 and a[1] is not None else None)
        if sizes is None:
            count = attrs.get("num_outputs", n_out)
            step = -(-a[0].shape[axis] // count)
            sizes = [min(step, a[0].shape[axis] - k * step) for k in range(count)]
        cuts = np.cumsum(sizes)[:-1]
        return list(np.split(a[0], cuts, axis=axis))
    return None


def parse_dims(items: Iterable[str]) -> dict[str, int]:
    """`["batch=1", "seq=128"]` -> {"batch": 1, "seq": 128}; a malformed item is an error."""
    out: dict[str, int] = {}
    for item in items:
        key, eq, value = (x.strip() for x in item.partition("="))
        digits = value.isascii() and value.isdigit()
        if not eq or not key or not digits or not 0 < int(value) <= MAX_INT:
            raise InstanceError(
                "--dim", f"expected NAME=POSITIVE_INTEGER (at most 2**62), got {item!r}"
            )
        if key in out:
            raise InstanceError(f"--dim {key}", f"given twice ({out[key]} and {int(value)})")
        out[key] = int(value)
    return out


def _copy(model: Any) -> Any:
    """A copy of the model without the data of its large initializers (only their shapes are
    read): the weights are never copied, whatever inference and folding do afterwards."""
    onnx = _onnx()
    out = onnx.ModelProto()
    _copy_fields(model, out, skip="graph")
    _copy_fields(model.graph, out.graph, skip="initializer")
    for t in model.graph.initializer:
        if t.data_location == onnx.TensorProto.EXTERNAL or math.prod(t.dims) <= FOLD_MAX:
            out.graph.initializer.append(t)
        else:  # shape and dtype only, marked as external data that is absent
            bare = out.graph.initializer.add(name=t.name, data_type=t.data_type, dims=t.dims)
            bare.data_location = onnx.TensorProto.EXTERNAL
            bare.external_data.add(key="location", value="<not loaded>")
    return out


def _copy_fields(src: Any, dst: Any, skip: str) -> None:
    """Copy every set field of one protobuf message into another, but `skip`."""
    for fd, value in src.ListFields():
        if fd.name == skip:
            continue
        if fd.is_repeated:
            getattr(dst, fd.name).extend(value)
        elif fd.message_type is not None:
            getattr(dst, fd.name).CopyFrom(value)
        else:
            setattr(dst, fd.name, value)


def _nodes(raw: Sequence[Any]) -> list[Node]:
    """Nodes with unique ids: the node's name when present and free, else `<op_type>_<index>`."""
    taken: set[str] = {END_OP}
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
                    d.dim_value = _dim_value(d.dim_param, dims[d.dim_param])  # clears dim_param
    unknown = sorted(set(dims) - names)
    if unknown:
        have = ", ".join(sorted(declared)) or "none"
        raise InstanceError(
            f"--dim {unknown[0]}",
            f"the model has no dimension named so (the inputs' symbolic dims: {have})",
        )


def _dim_value(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_INT:
        raise InstanceError(
            f"--dim {name}", f"must be a positive integer up to 2**62, got {value!r}"
        )
    return value


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
        if d.HasField("dim_value") and d.dim_value < 0:
            raise InstanceError(
                f"tensor {name!r}",
                f"{what}: dimension {k} is {d.dim_value}: a negative size is no shape (the "
                "model declares it so, or inference produced it)",
            )
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
    if any(d < 0 for d in shape):
        raise InstanceError(
            f"tensor {name!r}", f"{what}: negative dimension in shape {list(shape)}"
        )
    return math.ceil(math.prod(shape) * bits / 8)


def write_onnx_instances(
    model: str | Path,
    outdir: str | Path,
    dims: Iterable[str] | Mapping[str, int] = (),
    include_inputs: bool = False,
    objective: str = "peak",
    *,
    alignment: int = 1,
    constants: Constants = "exclude",
    workspace: Workspace = None,
) -> tuple[Path, Path]:
    """`tensorplan import onnx`: write `<stem>.schedule.json` and `<stem>.allocation.json`."""
    from tensorplan.problems import allocation, schedule
    from tensorplan.problems.core import write_json_atomic

    bound = dict(dims) if isinstance(dims, Mapping) else parse_dims(dims)
    stem = Path(model).stem
    sched, alloc = import_onnx(
        model,
        dims=bound,
        include_inputs=include_inputs,
        objective=objective,
        alignment=alignment,
        constants=constants,
        workspace=workspace,
        name=stem,
    )
    out = Path(outdir)
    paths = (out / f"{stem}.schedule.json", out / f"{stem}.allocation.json")
    write_json_atomic(paths[0], schedule.instance_to_json(sched))
    write_json_atomic(paths[1], allocation.instance_to_json(alloc))
    return paths

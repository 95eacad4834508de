"""PyTorch module -> a schedule instance and an allocation instance (extra `tensorplan[torch]`).

`import_torch(module, example_inputs)` traces the module with `torch.export` (the ATen-level
graph it returns, shapes from the example inputs) and maps it exactly as the ONNX importer does
(`onnx_import.Dataflow`, `onnx_import.to_instances`): one op per `call_function` node that
produces or writes tensors, one alloc per storage in bytes (numel x element size), used by every
op that produces, reads or writes it; placeholders (user inputs, parameters, buffers) are the
caller's memory, left out unless `include_inputs`. A node returning several tensors gives one
alloc per tensor (`<node>.<k>`), and the `operator.getitem` nodes that pick them apart are not
ops. Nodes that do no work and own no memory are not ops, their result is the storage they share:
ATen views (the schema says the result aliases an input: `view`, `transpose`, `expand`,
`split`, `detach`, ...), eval-mode dropout, and a `reshape`, `contiguous` or `to` that the trace
shows did not copy (one that copies, like a reshape of a transposed tensor, is an op with its own
alloc). In-place ops (`relu_`, `add_`, ...: the schema's `Tensor(a!)` arguments) write into
their input's storage, and the schedule orders them after every earlier reader of it. Graph
outputs are held to the end (`onnx_import.END_OP`). With `constants="exclude"` (the default),
parameters, buffers, lifted constants and what is computed from them alone (`arange`, `w * 2`,
`zeros_like(x)`: shape only) are weights computed ahead: not ops, not planned; a tensor written
in place is never one.

`training=True` plans one training step instead: the module in train mode, a stand-in loss (the
sum of the means of its floating-point outputs, a transformers `ModelOutput` or dict included,
so every head gets a gradient) and the joint forward + backward graph from `aot_export_module`,
so forward activations stay live until the backward ops that read them. The loss, the updated
buffers (BatchNorm statistics) and the gradients are held to the end, where the optimizer step
reads them; `free_gradients=True` frees each gradient after its last reader instead. Parameters
stay the caller's memory; tensor constants made in the forward are lifted constants.

`via="onnx"` instead exports with `torch.onnx.export` (TorchScript-based, opset 17) and runs the
ONNX importer on the result: the ONNX graph is coarser (one LayerNormalization node instead of
several ATen ops) and folds BatchNorm into convolutions.
"""

from __future__ import annotations

import io
import operator
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Literal, cast

from tensorplan.harness.onnx_import import (
    Constants,
    Dataflow,
    Node,
    Workspace,
    constant_closure,
    read_onnx,
    to_instances,
)
from tensorplan.problems.allocation import AllocationInstance
from tensorplan.problems.core import InstanceError
from tensorplan.problems.schedule import ScheduleInstance

INSTALL = "pip install 'tensorplan[torch]'  (or: pip install torch)"

TORCH_CPU_WORKSPACE: Mapping[str, float] = {
    "conv2d/inputs": 1.0,
    "conv2d/weights": 1.0,
    "convolution/inputs": 1.0,
    "convolution/weights": 1.0,
    "max_pool2d": 2.0,
}
"""A workspace table (see `onnx_import.WORKSPACE` for its form) for `torch.export` graphs run by
eager PyTorch on the CPU, float32, measured with torch.profiler's memory events (torch 2.13,
oneDNN; `benchmarks/models.py`, part `zoo`, on torchvision's resnet18/50, mobilenet_v3_large,
efficientnet_b0 and BERT-base at batch 1):

- `conv2d`: oneDNN's convolution copies its input into a blocked layout and reorders its weight
  (on every call: eager mode caches no packed weight), both live while it writes its output (in
  the blocked layout; the plain output is then a copy of it, after the two are freed): one
  input's and one weight's worth. Exceptions seen: a convolution whose input has 3 channels
  (the stem) copies no input, but its blocked output and the plain one coexist (its workspace is
  one output's worth, more than the table's); some convolutions (oneDNN's plain-layout kernels,
  e.g. 1x1 over 14 x 14 and 7 x 7 maps in efficientnet_b0, squeeze-excitation convs on 1 x 1)
  copy nothing (the table overstates them); a 1x1 convolution with stride 2 also holds an
  output-sized buffer (the table understates it by one output: resnet50's downsampling convs);
- `max_pool2d`: computes `max_pool2d_with_indices` and drops the int64 indices: twice a float32
  output's bytes;
- measured as none (or below 0.1 %): GELU, softmax, tanh, addmm/linear, matmul/bmm, add, mul,
  embedding; layer_norm and batch_norm keep their per-row (per-channel) statistics (1 KiB for
  BERT's 128 tokens, at most 16 KiB in resnet50), left out.

Off unless passed (`workspace=TORCH_CPU_WORKSPACE`); other builds, dtypes and threads may
differ: measure before relying on it."""


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        raise InstanceError("torch", f"PyTorch is not installed: {INSTALL}") from None
    return torch


def import_torch(
    module: Any,
    example_inputs: Sequence[Any],
    *,
    via: Literal["export", "onnx"] = "export",
    training: bool = False,
    free_gradients: bool = False,
    include_inputs: bool = False,
    objective: str = "peak",
    alignment: int = 1,
    constants: Constants = "exclude",
    workspace: Workspace = None,
    name: str | None = None,
    eager: bool = False,
) -> tuple[ScheduleInstance, AllocationInstance]:
    """(schedule instance, allocation instance) of `module(*example_inputs)` in eval mode, or of
    one training step (forward + backward) with `training=True`; see `onnx_import.to_instances`
    for `constants` and `workspace`. `eager=True` models the eager module's run rather than its
    graph's: a module call's arguments stay alive until the call returns
    (`hold_module_arguments`), and a tensor a `forward` keeps in a local past its last use
    lives as long as it did in one eager run of the module (`torch_eager.hold_measured`); with
    `workspace="runtime"`, the plan of the model's order is then what eager PyTorch on the CPU
    holds."""
    flow = torch_dataflow(
        module,
        example_inputs,
        via=via,
        training=training,
        free_gradients=free_gradients,
        name=name,
        eager=eager,
    )
    return to_instances(
        flow,
        include_inputs=include_inputs,
        objective=objective,
        alignment=alignment,
        constants=constants,
        workspace=workspace,
    )


def torch_dataflow(
    module: Any,
    example_inputs: Sequence[Any],
    *,
    via: Literal["export", "onnx"] = "export",
    training: bool = False,
    free_gradients: bool = False,
    name: str | None = None,
    eager: bool = False,
) -> Dataflow:
    """The module's dataflow graph, through `torch.export` or through ONNX export. `eager`
    (`torch.export`, inference) adds the references eager PyTorch's Python frames keep: see
    `hold_module_arguments`, and `torch_eager` for the locals (it runs the module once)."""
    torch = _torch()
    name = name or type(module).__name__
    inputs = tuple(example_inputs)
    if training:
        if via != "export":
            raise ValueError("training=True needs via='export'")
        return joint_dataflow(module, inputs, name, free_gradients=free_gradients)
    module = module.eval()
    if via == "onnx":
        return read_onnx(onnx_model(module, inputs), name=name)
    if via != "export":
        raise ValueError(f"via must be 'export' or 'onnx', got {via!r}")
    try:
        program = torch.export.export(module, inputs)
    except Exception as err:  # torch raises many kinds; say which step failed
        raise InstanceError("torch.export", f"cannot export {name}: {err}") from None
    from torch.export.graph_signature import InputKind

    kinds = (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR)
    specs = program.graph_signature.input_specs
    weights = {s.arg.name for s in specs if s.kind in kinds and hasattr(s.arg, "name")}
    flow = _from_fx(program.graph, name, seeds=weights)
    if not eager:
        return flow
    from tensorplan.harness.torch_eager import eager_run, hold_measured

    return hold_measured(hold_module_arguments(program.graph, flow), eager_run(module, inputs))


def hold_module_arguments(graph: Any, flow: Dataflow) -> Dataflow:
    """`flow` with the references eager PyTorch's Python frames keep: a tensor passed into a
    module call (read inside it, produced outside it) stays referenced by the caller's and the
    callee's frames until the call returns, so it is read again, nominally, by the call's last
    node. The module calls are the traced nodes' `nn_module_stack`. (Locals a `forward` keeps
    after their last use, like an unused `_` of a tuple, are not in the trace: `torch_eager`
    measures them.)"""
    stacks = {n.name: tuple(n.meta.get("nn_module_stack") or ()) for n in graph.nodes}
    producer = {t: node.id for node in flow.nodes for t in node.outputs}
    last: dict[str, int] = {}
    for i, node in enumerate(flow.nodes):
        for k in stacks.get(node.id, ()):
            last[k] = i
    held: dict[int, list[str]] = {}
    for node in flow.nodes:
        for k in stacks.get(node.id, ()):
            for t in node.inputs:
                made = producer.get(t)
                if made is None or k not in stacks.get(made, ()):
                    held.setdefault(last[k], []).append(t)
    return flow.with_reads(held)


def onnx_model(module: Any, inputs: tuple[Any, ...]) -> Any:
    """`module` exported to an ONNX ModelProto with the TorchScript-based exporter."""
    import warnings

    torch = _torch()
    try:
        import onnx
    except ImportError:
        raise InstanceError("onnx", "via='onnx' needs the onnx package: pip install onnx") from None
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, inputs, buf, dynamo=False, opset_version=17)
    return onnx.load_from_string(buf.getvalue())


def joint_dataflow(
    module: Any, inputs: tuple[Any, ...], name: str, *, free_gradients: bool = False
) -> Dataflow:
    """One training step: the joint forward + backward graph of a stand-in loss (the sum of the
    means of the module's floating-point outputs). The loss, the updated buffers and (unless
    `free_gradients`) the gradients are held to the end: the optimizer step reads them."""
    _torch()  # a clear error when PyTorch is missing
    from torch import fx, nn
    from torch._functorch.aot_autograd import aot_export_module
    from torch.utils._pytree import tree_leaves

    class Loss(nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *xs: Any) -> tuple[Any]:
            y = self.inner(*xs)
            if hasattr(y, "to_tuple"):  # a transformers ModelOutput
                y = y.to_tuple()
            parts = [t for t in tree_leaves(y) if hasattr(t, "is_floating_point")]
            parts = [t.mean() for t in parts if t.is_floating_point()]
            if not parts:
                raise TypeError("the module returns no floating-point tensor to take a loss of")
            return (sum(parts[1:], parts[0]),)

    try:
        gm, sig = aot_export_module(
            Loss(_untied(module)).train(), list(inputs), trace_joint=True, output_loss_index=0
        )
    except Exception as err:
        raise InstanceError("aot_export_module", f"cannot trace {name}: {err}") from None
    held: set[str] = {*map(str, sig.user_outputs), *map(str, sig.buffers_to_mutate)}
    grads = sig.backward_signature
    if grads is not None and not free_gradients:
        held |= {
            *map(str, grads.gradients_to_parameters),
            *map(str, grads.gradients_to_user_inputs),
        }
    # a joint trace (trace_joint=True) is always a GraphModule, never the plain callable
    return _from_fx(cast(fx.GraphModule, gm).graph, name, held=held, training=True)


def _untied(module: Any) -> Any:
    """`module` with each tied parameter (one Parameter under several names: T5's shared
    embedding, encoder/decoder embeddings and lm_head) registered once: a copy whose other
    names read the first one's current value when their module runs. aot_export_module needs
    every parameter once (it swaps each name for its own traced tensor, and an alias the
    forward never reads "receives no gradient"); the gradient is then one tensor, as in eager.
    `module` itself when nothing is tied."""
    import copy

    first: dict[int, str] = {}
    aliases: list[tuple[str, str]] = []
    for name, param in module.named_parameters(remove_duplicate=False):
        if id(param) in first:
            aliases.append((name, first[id(param)]))
        else:
            first[id(param)] = name
    if not aliases:
        return module
    module = copy.deepcopy(module)  # keeps the ties (deepcopy's memo)
    for alias, owner in aliases:
        holder_name, _, attr = alias.rpartition(".")
        owner_name, _, owner_attr = owner.rpartition(".")
        holder = module.get_submodule(holder_name)
        source = module.get_submodule(owner_name)
        del holder._parameters[attr]

        def read(mod: Any, args: Any, attr: str = attr, source: Any = source,
                 name: str = owner_attr) -> None:  # fmt: skip
            object.__setattr__(mod, attr, getattr(source, name))

        read(holder, ())
        holder.register_forward_pre_hook(read)
    return module


MAY_COPY = frozenset(
    (
        "reshape",
        "reshape_as",
        "flatten",
        "ravel",
        "contiguous",
        "to",
        "resolve_conj",
        "resolve_neg",
        "_autocast_to_reduced_precision",
        "_autocast_to_full_precision",
    )
)
"""ATen ops whose schema says the result aliases the input, but that copy when a view is not
possible (a reshape of a transposed tensor, a dtype change): views only when the trace's result
shares the input's storage."""

DROPOUTS = frozenset(("dropout", "feature_dropout", "alpha_dropout", "feature_alpha_dropout"))
"""ATen dropouts: with `train=False` they return their input itself."""

METADATA_ONLY = frozenset(("detach_", "requires_grad_"))
"""In-place ATen ops that change autograd metadata, never data: views, not writes."""


def _opname(target: Any) -> str:
    schema = getattr(target, "_schema", None)
    return schema.name.split("::")[-1] if schema is not None else ""


def _argument(n: Any, index: int, name: str) -> Any:
    return n.args[index] if index < len(n.args) else n.kwargs.get(name)


def _storage_id(val: Any) -> int | None:
    """An id of the (fake) storage behind a traced tensor, when the trace keeps one."""
    try:
        return int(val.untyped_storage()._cdata)
    except Exception:  # no storage (sparse, nested) or not a tensor
        return None


def _is_view(n: Any, vals: Sequence[Any], base: Any) -> bool:
    """A node that does no work and whose results share its first tensor input's storage: an
    ATen view (the schema says so), an eval-mode dropout, a `reshape`/`contiguous`/`to` that the
    trace shows did not copy, or any op whose traced results share that input's storage."""
    target = n.target
    name = _opname(target)
    if name in DROPOUTS:
        return _argument(n, 2, "train") is False
    if name in METADATA_ONLY:
        return True
    base_id = _storage_id(base)
    shares = base_id is not None and all(_storage_id(v) == base_id for v in vals)
    returns = getattr(getattr(target, "_schema", None), "returns", None)
    infos = [r.alias_info for r in returns or ()]
    if infos and all(a is not None and not a.is_write for a in infos):
        return shares or base_id is None or name not in MAY_COPY
    return shares and bool(vals)


def _writes(n: Any, tensors: Callable[[Any], list[str]]) -> tuple[list[str], dict[int, str]]:
    """The tensors an op overwrites in place (its schema's `Tensor(a!)` arguments), and which of
    its results are those tensors (result index -> tensor)."""
    schema = getattr(n.target, "_schema", None)
    if schema is None or _opname(n.target) in METADATA_ONLY:
        return [], {}
    written: list[str] = []
    sets: dict[str, str] = {}
    for i, arg in enumerate(schema.arguments):
        info = arg.alias_info
        if info is not None and info.is_write:
            ts = tensors(_argument(n, i, arg.name))
            written += ts
            for s in info.before_set:
                if ts:
                    sets[s] = ts[0]
    same: dict[int, str] = {}
    for k, r in enumerate(schema.returns):
        if r.alias_info is not None and r.alias_info.is_write:
            hit = [sets[s] for s in r.alias_info.before_set if s in sets]
            if hit:
                same[k] = hit[0]
    return list(dict.fromkeys(written)), same


def _from_fx(
    graph: Any,
    name: str,
    *,
    held: Collection[str] | None = None,
    seeds: Collection[str] = (),
    training: bool = False,
) -> Dataflow:
    """The dataflow of an ATen-level fx graph: `held` names the output nodes kept to the end
    (default: all), `seeds` the placeholders that are constants (weights, in inference). In a
    training step `*_like` results are no constants: the backward's seed `ones_like(loss)` is
    the real loss' gradient, data, not the stand-in loss' constant one."""
    torch = _torch()
    sizes: dict[str, int] = {}
    kinds: dict[str, str] = {}
    values: dict[str, Any] = {}  # tensor -> its traced value
    alias: dict[str, str] = {}  # fx name (getitem, view) -> the tensor it stands for
    storage: dict[str, str] = {}  # tensor -> the tensor owning its storage
    owners: dict[int, str] = {}  # traced storage id -> the tensor owning it
    external: set[str] = set()
    constant: set[str] = set()
    outputs: set[str] = set()
    nodes: list[Node] = []
    volatile: set[str] = set()
    shape_only: set[str] = set()

    def tensors(arg: Any) -> list[str]:
        out: list[str] = []
        torch.fx.node.map_arg(arg, lambda n: out.append(alias.get(n.name, n.name)))
        return [t for t in out if t in sizes]

    def record(key: str, val: Any, same: str | None = None) -> bool:
        if not isinstance(val, torch.Tensor):
            return False
        sizes[key] = val.numel() * val.element_size()
        kinds[key] = str(val.dtype).removeprefix("torch.")
        values[key] = val
        sid = _storage_id(val)
        owner = storage.get(same, same) if same else owners.get(sid) if sid is not None else None
        if owner is not None and owner != key:
            storage[key] = owner
        elif sid is not None:
            owners[sid] = key
        return True

    for n in graph.nodes:
        val = n.meta.get("val")
        if n.op == "placeholder":
            if record(n.name, val):
                external.add(n.name)
                if n.name in seeds:
                    constant.add(n.name)
        elif n.op == "get_attr":  # a lifted constant tensor
            obj = graph.owning_module
            for part in str(n.target).split("."):
                obj = getattr(obj, part, None)
            if not record(n.name, obj if isinstance(obj, torch.Tensor) else val):
                raise InstanceError(
                    f"node {n.name!r}", "get_attr of a submodule (control flow) is not supported"
                )
            external.add(n.name)
            constant.add(n.name)
        elif n.op == "call_function" and n.target is operator.getitem:
            src, k = n.args
            alias[n.name] = alias.get(f"{src.name}.{k}", f"{src.name}.{k}")
        elif n.op == "call_function":
            vals = list(val) if isinstance(val, list | tuple) else [val]
            many = isinstance(val, list | tuple)
            keys = [f"{n.name}.{k}" if many else n.name for k in range(len(vals))]
            ins = list(dict.fromkeys(tensors((n.args, n.kwargs))))
            writes, same = _writes(n, tensors)
            if ins and not writes and _is_view(n, vals, values.get(ins[0])):
                for k in keys:  # no work, no memory: it stands for the tensor it views
                    alias[k] = ins[0]
                continue
            outs = [k for j, k in enumerate(keys) if record(k, vals[j], same.get(j))]
            if not outs and not writes:
                continue
            kind = str(getattr(n.target, "__name__", n.target))
            nodes.append(Node(n.name, kind, tuple(ins), tuple(outs), tuple(writes)))
            tags = getattr(n.target, "tags", ())
            if torch.Tag.nondeterministic_seeded in tags:
                volatile.add(n.name)
            op = _opname(n.target)
            if not training and (op.endswith("_like") or op.startswith("new_")):
                shape_only.add(n.name)
        elif n.op == "output":
            picked = [
                x for x in _leaves(n.args) if held is None or getattr(x, "name", None) in held
            ]
            outputs.update(tensors(picked))
    consts = constant_closure(
        nodes,
        constant,
        storage,
        volatile=lambda x: x.id in volatile,
        shape_only=lambda x: x.id in shape_only,
    )
    planned = {n.id for n in nodes}
    scratch = {k: v for k, v in cpu_scratch(graph).items() if k in planned and v > 0}
    return Dataflow(
        name,
        tuple(nodes),
        sizes,
        frozenset(external),
        frozenset(outputs),
        kinds,
        storage,
        consts,
        scratch,
    )


def cpu_scratch(graph: Any) -> dict[str, int]:
    """Each op's scratch bytes in eager PyTorch on the CPU (torch 2.13, float32, oneDNN), from
    its shapes and arguments in the traced graph, as measured with torch.profiler's memory
    events (`benchmarks/models.py`, part `zoo`; see `TORCH_CPU_WORKSPACE` for the per-byte
    terms): a convolution copies its input and its weight (one input's and one weight's worth),
    except a stem (at most 3 input channels), which copies no input but holds its blocked
    output beside the plain one (max(weight, output)); a 1x1 convolution with a stride above 1
    also holds an output-sized buffer; `max_pool2d` drops int64 indices (twice its output).
    Not modelled: the convolutions oneDNN runs without copies (some 1x1 ones on small maps)."""
    torch = _torch()

    def nbytes(x: Any) -> int:
        v = x.meta.get("val") if isinstance(x, torch.fx.Node) else None
        return int(v.numel() * v.element_size()) if isinstance(v, torch.Tensor) else 0

    def shape(x: Any) -> tuple[int, ...]:
        v = x.meta.get("val") if isinstance(x, torch.fx.Node) else None
        return tuple(int(d) for d in v.shape) if isinstance(v, torch.Tensor) else ()

    out: dict[str, int] = {}
    for n in graph.nodes:
        op = _opname(n.target) if n.op == "call_function" else ""
        if op in ("conv2d", "convolution") and len(n.args) >= 2:
            x, w = n.args[0], n.args[1]
            stride = _argument(n, 3, "stride") or 1
            strides = [stride] * 2 if isinstance(stride, int) else list(stride)
            wshape, xshape = shape(w), shape(x)
            if len(wshape) != 4 or len(xshape) != 4:
                continue  # not a 2-d convolution: not measured
            one_by_one = wshape[2:] == (1, 1)
            if xshape[1] <= 3:
                out[n.name] = max(nbytes(w), nbytes(n))
            else:
                extra = nbytes(n) if one_by_one and max(strides) > 1 else 0
                out[n.name] = nbytes(x) + nbytes(w) + extra
        elif op == "max_pool2d":  # (with_indices keeps its indices: a tensor of the graph)
            out[n.name] = 2 * nbytes(n)
    return out


def _leaves(args: Any) -> list[Any]:
    """The fx nodes inside an output node's (nested) arguments."""
    out: list[Any] = []
    stack = [args]
    while stack:
        x = stack.pop()
        if isinstance(x, list | tuple):
            stack.extend(reversed(x))
        elif isinstance(x, dict):
            stack.extend(reversed(list(x.values())))
        elif x is not None:
            out.append(x)
    return out

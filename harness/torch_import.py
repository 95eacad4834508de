"""PyTorch module -> a schedule instance and an allocation instance (extra `tensorplan[torch]`).

`import_torch(module, example_inputs)` traces the module with `torch.export` (the ATen-level
graph it returns, shapes from the example inputs) and maps it exactly as the ONNX importer does
(`onnx_import.Dataflow`): one op per `call_function` node that produces tensors, one alloc per
tensor in bytes (numel x element size), used by its producer and readers; placeholders
(user inputs, parameters, buffers) are the caller's memory, left out unless `include_inputs`.
A node returning several tensors gives one alloc per tensor (`<node>.<k>`), and the
`operator.getitem` nodes that pick them apart are not ops. View ops (ATen ops whose schema says
the result aliases an input: `view`, `transpose`, `t`, `expand`, `split`, `detach`, ...) do no
work and own no memory: they are not ops, their result is the tensor they view, whose lifetime
then runs to the last use of any view of it.

`training=True` plans one training step instead: the module in train mode, a stand-in loss (the
mean of its first output) and the joint forward + backward graph from `aot_export_module`, so
forward activations stay live until the backward ops that read them. Only the loss is held to
the end; each parameter gradient is an alloc live from the op that makes it to its last reader
(the caller's optimizer takes it from there), and parameters stay the caller's memory.

`via="onnx"` instead exports with `torch.onnx.export` (TorchScript-based, opset 17) and runs the
ONNX importer on the result: the ONNX graph is coarser (one LayerNormalization node instead of
several ATen ops) and folds BatchNorm into convolutions.
"""

from __future__ import annotations

import io
import operator
from collections.abc import Sequence
from typing import Any, Literal, cast

from tensorplan.harness.onnx_import import Dataflow, Node, read_onnx, to_instances
from tensorplan.problems.allocation import AllocationInstance
from tensorplan.problems.core import InstanceError
from tensorplan.problems.schedule import ScheduleInstance

INSTALL = "pip install 'tensorplan[torch]'  (or: pip install torch)"


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
    include_inputs: bool = False,
    objective: str = "peak",
    alignment: int = 1,
    name: str | None = None,
) -> tuple[ScheduleInstance, AllocationInstance]:
    """(schedule instance, allocation instance) of `module(*example_inputs)` in eval mode, or of
    one training step (forward + backward) with `training=True`."""
    flow = torch_dataflow(module, example_inputs, via=via, training=training, name=name)
    return to_instances(
        flow, include_inputs=include_inputs, objective=objective, alignment=alignment
    )


def torch_dataflow(
    module: Any,
    example_inputs: Sequence[Any],
    *,
    via: Literal["export", "onnx"] = "export",
    training: bool = False,
    name: str | None = None,
) -> Dataflow:
    """The module's dataflow graph, through `torch.export` or through ONNX export."""
    torch = _torch()
    name = name or type(module).__name__
    inputs = tuple(example_inputs)
    if training:
        if via != "export":
            raise ValueError("training=True needs via='export'")
        return joint_dataflow(module, inputs, name)
    module = module.eval()
    if via == "onnx":
        return read_onnx(onnx_model(module, inputs), name=name)
    if via != "export":
        raise ValueError(f"via must be 'export' or 'onnx', got {via!r}")
    try:
        program = torch.export.export(module, inputs)
    except Exception as err:  # torch raises many kinds; say which step failed
        raise InstanceError("torch.export", f"cannot export {name}: {err}") from None
    return _from_fx(program.graph, name)


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


def joint_dataflow(module: Any, inputs: tuple[Any, ...], name: str) -> Dataflow:
    """One training step: the joint forward + backward graph of a stand-in loss."""
    _torch()  # a clear error when PyTorch is missing
    from torch import fx, nn
    from torch._functorch.aot_autograd import aot_export_module

    class Loss(nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *xs: Any) -> tuple[Any]:
            y = self.inner(*xs)
            y = y[0] if isinstance(y, tuple | list) else y
            return (y.float().mean(),)

    try:
        gm, _ = aot_export_module(
            Loss(module).train(), list(inputs), trace_joint=True, output_loss_index=0
        )
    except Exception as err:
        raise InstanceError("aot_export_module", f"cannot trace {name}: {err}") from None
    # a joint trace (trace_joint=True) is always a GraphModule, never the plain callable
    return _from_fx(cast(fx.GraphModule, gm).graph, name, loss_only=True)


def _is_view(target: Any) -> bool:
    """An ATen op whose results all alias an input without writing it (view, split, ...)."""
    schema = getattr(target, "_schema", None)
    returns = getattr(schema, "returns", None)
    if not returns:
        return False
    infos = [r.alias_info for r in returns]
    return all(a is not None and not a.is_write for a in infos)


def _from_fx(graph: Any, name: str, *, loss_only: bool = False) -> Dataflow:
    torch = _torch()
    sizes: dict[str, int] = {}
    kinds: dict[str, str] = {}
    alias: dict[str, str] = {}  # getitem node -> the tensor it picks
    external: set[str] = set()
    outputs: set[str] = set()
    nodes: list[Node] = []

    def tensors(arg: Any) -> list[str]:
        out: list[str] = []
        torch.fx.node.map_arg(arg, lambda n: out.append(alias.get(n.name, n.name)))
        return [t for t in out if t in sizes]

    def record(key: str, val: Any) -> bool:
        if isinstance(val, torch.Tensor):
            sizes[key] = val.numel() * val.element_size()
            kinds[key] = str(val.dtype).removeprefix("torch.")
            return True
        return False

    for n in graph.nodes:
        val = n.meta.get("val")
        if n.op == "placeholder":
            if record(n.name, val):
                external.add(n.name)
        elif n.op == "call_function" and n.target is operator.getitem:
            src, k = n.args
            alias[n.name] = alias.get(f"{src.name}.{k}", f"{src.name}.{k}")
        elif n.op == "call_function" and _is_view(n.target):
            bases = tensors((n.args, n.kwargs))
            if bases:  # the view is its first tensor argument, the one it aliases
                alias[n.name] = bases[0]
                for k in range(len(val) if isinstance(val, list | tuple) else 0):
                    alias[f"{n.name}.{k}"] = bases[0]
        elif n.op == "call_function":
            if isinstance(val, list | tuple):
                outs = [f"{n.name}.{k}" for k, v in enumerate(val) if record(f"{n.name}.{k}", v)]
            else:
                outs = [n.name] if record(n.name, val) else []
            if outs:
                kind = str(getattr(n.target, "__name__", n.target))
                ins = tuple(dict.fromkeys(tensors((n.args, n.kwargs))))
                nodes.append(Node(n.name, kind, ins, tuple(outs)))
        elif n.op == "output":
            outs = tensors(n.args)
            outputs.update(outs[:1] if loss_only else outs)
        elif n.op == "get_attr":
            raise InstanceError(
                f"node {n.name!r}", "get_attr (a submodule or control flow) is not supported"
            )
    return Dataflow(name, tuple(nodes), sizes, frozenset(external), frozenset(outputs), kinds)

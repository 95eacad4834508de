"""`tensorplan.plan_torch(module, example_inputs)`: a PyTorch module's memory plan and a
`torch.fx.GraphModule` that runs in the planned order (issue 31, item 2; extra `tensorplan[torch]`).

The module is traced as `import_torch` traces it (`torch.export` in eval mode; with
`training=True`, `aot_export_module`'s joint forward + backward graph of the same stand-in loss:
the sum of the means of its floating-point outputs), the trace's dataflow is planned
(`harness.plan.make_plan`), and the traced graph is reordered by `emit.order_graph_module`:

- inference: the module's outputs, like `module(*example_inputs)` (the `torch.export` unlifted
  module: same call signature, parameters and buffers as attributes);
- training: one training step, `(loss, gradients, buffers)`: the stand-in loss, a dict of
  parameter gradients and a dict of the updated buffers (BatchNorm statistics), by qualified
  name; the module's own parameters and buffers are read, never written.

With `constants="exclude"` (the default) the nodes that compute constants only (what the plan
treats as weights computed ahead) are evaluated once and become buffers of the GraphModule, so
the module runs exactly the plan's ops. The GraphModule frees each value after its last use
(fx's generated code), so PyTorch's eager peak under it is that of the planned order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tensorplan.harness.emit import order_graph_module
from tensorplan.harness.onnx_import import Constants, Dataflow, Workspace, to_instances
from tensorplan.harness.plan import Plan, make_plan
from tensorplan.harness.torch_import import _from_fx, _torch
from tensorplan.problems.core import InstanceError


@dataclass(frozen=True)
class Traced:
    """A traced module: `module` (a GraphModule called like the module), the `dataflow` of its
    graph (node ids = fx node names) and the flat example `inputs` (its graph's placeholders)."""

    module: Any
    dataflow: Dataflow
    inputs: tuple[Any, ...]


def trace(
    module: Any,
    example_inputs: Sequence[Any],
    *,
    training: bool = False,
    free_gradients: bool = False,
    name: str | None = None,
) -> Traced:
    """The GraphModule `plan_torch` reorders, and its dataflow (as `import_torch` builds it)."""
    torch = _torch()
    name = name or type(module).__name__
    inputs = tuple(example_inputs)
    if training:
        return _trace_training(module, inputs, name, free_gradients)
    try:
        program = torch.export.export(module.eval(), inputs)
    except Exception as err:  # torch raises many kinds; say which step failed
        raise InstanceError("torch.export", f"cannot export {name}: {err}") from None
    from torch.export.graph_signature import InputKind

    kinds = (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR)
    specs = program.graph_signature.input_specs
    weights = {s.arg.name for s in specs if s.kind in kinds and hasattr(s.arg, "name")}
    flow = _from_fx(program.graph, name, seeds=weights)
    flat = tuple(torch.utils._pytree.tree_leaves(inputs))
    return Traced(program.module(), flow, flat)


def _trace_training(module: Any, inputs: tuple[Any, ...], name: str, free: bool) -> Traced:
    """The joint graph of one training step (as `torch_import.joint_dataflow`), with parameters
    and buffers read from the module (`get_attr`) and outputs (loss, gradients, buffers)."""
    import torch
    from torch import fx, nn
    from torch._functorch.aot_autograd import aot_export_module
    from torch.utils._pytree import tree_leaves

    class Loss(nn.Module):  # the stand-in loss of torch_import.joint_dataflow
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *xs: Any) -> tuple[Any]:
            y = self.inner(*xs)
            if hasattr(y, "to_tuple"):
                y = y.to_tuple()
            parts = [t for t in tree_leaves(y) if isinstance(t, torch.Tensor)]
            parts = [t.mean() for t in parts if t.is_floating_point()]
            if not parts:
                raise TypeError("the module returns no floating-point tensor to take a loss of")
            return (sum(parts[1:], parts[0]),)

    root = Loss(module).train()
    try:
        joint, sig = aot_export_module(root, list(inputs), trace_joint=True, output_loss_index=0)
    except Exception as err:
        raise InstanceError("aot_export_module", f"cannot trace {name}: {err}") from None
    held: set[str] = {*map(str, sig.user_outputs), *map(str, sig.buffers_to_mutate)}
    grads = sig.backward_signature
    assert grads is not None  # trace_joint=True
    if not free:
        held |= {
            *map(str, grads.gradients_to_parameters),
            *map(str, grads.gradients_to_user_inputs),
        }
    jg = joint.graph  # type: ignore[union-attr]
    flow = _from_fx(jg, name, held=held, training=True)
    attrs = {**sig.inputs_to_parameters, **sig.inputs_to_buffers}
    graph = fx.Graph()
    env: dict[Any, Any] = {}
    for k, n in enumerate(jg.nodes):
        if n.op == "placeholder" and n.name in attrs:  # read, detached: no autograd record
            value = graph.get_attr(attrs[n.name])
            env[n] = graph.create_node(
                "call_function", torch.ops.aten.detach.default, (value,), name=f"weight_{k}"
            )
        elif n.op == "output":
            by = {x.name: env[x] for x in n.args[0] if isinstance(x, fx.Node)}
            loss = by[str(sig.user_outputs[0])]
            gdict = {str(p): by[g] for g, p in grads.gradients_to_parameters.items()}
            bdict = {str(b): by[t] for t, b in sig.buffers_to_mutate.items()}
            graph.output((loss, gdict, bdict))
        else:
            env[n] = graph.node_copy(n, lambda x: env[x])
    gm = fx.GraphModule(root, graph)
    renamed = {n.name: env[n].name for n in jg.nodes if n in env}
    flow = _renamed(flow, renamed)
    return Traced(gm, flow, tuple(tree_leaves(inputs)))


def _renamed(flow: Dataflow, names: Mapping[str, str]) -> Dataflow:
    """`flow` with its node ids renamed (the copied graph may rename a node that clashes)."""
    if all(k == v for k, v in names.items()):
        return flow
    from dataclasses import replace

    nodes = tuple(replace(n, id=names.get(n.id, n.id)) for n in flow.nodes)
    return replace(flow, nodes=nodes)


def plan_torch(
    module: Any,
    example_inputs: Sequence[Any],
    training: bool = False,
    *,
    free_gradients: bool = False,
    time_limit: float = 10.0,
    seed: int = 0,
    alignment: int = 1,
    constants: Constants = "exclude",
    workspace: Workspace = None,
    name: str | None = None,
) -> tuple[Any, Plan]:
    """(GraphModule, Plan): the memory plan of `module(*example_inputs)` (or of one training
    step) and a `torch.fx.GraphModule` that runs in its order and gives the module's outputs
    (training: `(loss, gradients, buffers)`). `time_limit` bounds each planning step; see
    `onnx_import.to_instances` for `constants` and `workspace` (`"runtime"`: eager PyTorch's
    CPU scratch per op, `torch_import.cpu_scratch`, which the GraphModule's run does take)."""
    traced = trace(
        module, example_inputs, training=training, free_gradients=free_gradients, name=name
    )
    sched, _ = to_instances(
        traced.dataflow, alignment=alignment, constants=constants, workspace=workspace
    )
    plan = make_plan(sched, time_limit=time_limit, seed=seed, alignment=alignment)
    gm = ordered(traced, plan.order, constants=constants)
    return gm, plan


def constant_nodes(flow: Dataflow, constants: Constants = "exclude") -> list[str]:
    """The node ids of `flow` that are no op under `constants` (they compute constants only)."""
    if constants != "exclude":
        return []
    kept = {n.id for n in flow.without_constants().nodes}
    return [n.id for n in flow.nodes if n.id not in kept]


def ordered(traced: Traced, order: Sequence[str], *, constants: Constants = "exclude") -> Any:
    """A copy of the traced GraphModule running in `order` (op ids), constants folded under
    `constants="exclude"`."""
    import copy
    import warnings

    with warnings.catch_warnings():  # copying the unlifted module's pytree specs warns
        warnings.simplefilter("ignore", FutureWarning)
        gm = copy.deepcopy(traced.module)
    fold = constant_nodes(traced.dataflow, constants)
    return order_graph_module(gm, order, fold=fold, inputs=traced.inputs)

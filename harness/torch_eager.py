"""What eager PyTorch's Python frames keep alive, measured by running the module once.

A trace shows when a tensor is last read, not when eager PyTorch frees it: a `forward` that
binds a tensor to a local (`attention_output, _ = self.attention(...)`, BERT's
`embedding_output`) keeps it until the local is rebound or the frame returns. No trace can show
that, so `eager_run` runs the module once on the example inputs (no_grad) under a
`TorchFunctionMode` and records, for each top-level torch call, the storages it allocated and
wrote, and (by weak references on the tensors it returned) the last call each storage was
alive through. `hold_measured` aligns those calls with a traced `Dataflow`'s nodes (by the bytes
each allocates and writes, in order: the traced graph is at the same torch-function level:
`linear`, `matmul`, `softmax`) and makes each aligned node's tensor read, nominally, by the
node of the last call its storage was alive through. Unaligned calls and nodes keep the trace's
lifetimes.
"""

from __future__ import annotations

import bisect
import weakref
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tensorplan.harness.onnx_import import Dataflow, Node


@dataclass(frozen=True)
class EagerCall:
    """One top-level torch call of an eager run that allocated or wrote memory: its position
    among all the run's torch calls, the function's name, the bytes of each storage it
    allocated (in output order), the bytes of each storage it wrote in place, and for each
    allocated storage the position of the last call it was alive through."""

    index: int
    name: str
    allocated: tuple[int, ...]
    written: tuple[int, ...]
    alive_through: tuple[int, ...]


@dataclass(frozen=True)
class EagerRun:
    """An eager run, call by call (`eager_run`): `calls` lists those that allocated or wrote,
    `count` is how many torch calls the run made in all."""

    calls: tuple[EagerCall, ...]
    count: int


class _Recorder:
    """The `TorchFunctionMode` body: counts calls, notes fresh storages and in-place writes,
    and follows each storage's tensors with weak references until the last one dies."""

    def __init__(self, torch: Any) -> None:
        self.torch = torch
        self.count = 0
        self.live: Counter[int] = Counter()  # storage address -> live tensor objects on it
        self.born: dict[int, tuple[int, int]] = {}  # storage address -> (call, slot)
        self.calls: list[tuple[int, str, list[int], list[int], list[int]]] = []
        self.dead: dict[tuple[int, int], int] = {}  # (call, slot) -> last call alive through

    def _follow(self, t: Any, ptr: int) -> None:
        self.live[ptr] += 1

        def gone() -> None:
            self.live[ptr] -= 1
            if self.live[ptr] <= 0:
                del self.live[ptr]
                slot = self.born.pop(ptr, None)
                if slot is not None:
                    self.dead[slot] = self.count - 1

        weakref.finalize(t, gone)

    def call(self, func: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
        torch = self.torch
        leaves = torch.utils._pytree.tree_leaves
        ins = [a for a in leaves((args, kwargs)) if isinstance(a, torch.Tensor)]
        versions = [(a, a._version) for a in ins]
        out = func(*args, **kwargs)
        index = self.count
        self.count += 1
        fresh: list[int] = []
        for t in leaves(out):
            if not isinstance(t, torch.Tensor) or any(t is a for a in ins):
                continue
            if t.device.type != "cpu" or isinstance(t, torch.nn.Parameter):
                continue
            ptr = t.untyped_storage().data_ptr()
            if ptr and ptr not in self.live:
                self.born[ptr] = (index, len(fresh))
                fresh.append(t.untyped_storage().nbytes())
            self._follow(t, ptr)
        written = [a.untyped_storage().nbytes() for a, v in versions if a._version != v]
        if fresh or written:
            self.calls.append((index, getattr(func, "__name__", str(func)), fresh, written, []))
        return out

    def run(self) -> EagerRun:
        calls = []
        for index, name, fresh, written, _ in self.calls:
            through = tuple(self.dead.get((index, k), self.count - 1) for k in range(len(fresh)))
            calls.append(EagerCall(index, name, tuple(fresh), tuple(written), through))
        return EagerRun(tuple(calls), self.count)


def eager_run(module: Any, inputs: Sequence[Any]) -> EagerRun:
    """Run `module(*inputs)` once, eagerly, under no_grad, recording what each top-level torch
    call allocated and wrote and how long each storage it allocated lived (see the module
    docstring). The result is dropped at the end, so the outputs live through the last call."""
    import gc

    import torch
    from torch.overrides import TorchFunctionMode

    recorder = _Recorder(torch)

    class Mode(TorchFunctionMode):
        def __torch_function__(
            self, func: Any, types: Any, args: Sequence[Any] = (), kwargs: Any = None
        ) -> Any:
            return recorder.call(func, args, kwargs or {})

    with torch.no_grad(), Mode():
        out = module(*inputs)
    del out
    gc.collect()
    return recorder.run()


def _node_key(flow: Dataflow, node: Node) -> tuple[tuple[int, ...], tuple[int, ...]]:
    owned = tuple(flow.sizes[t] for t in node.outputs if flow.root(t) == t)
    written = tuple(flow.sizes[flow.root(t)] for t in node.writes)
    return owned, written


def _align(
    a: Sequence[Any], b: Sequence[Any], window: int = 64, run: int = 4
) -> list[tuple[int, int]]:
    """Pairs (i, j) matching `a[i]` with `b[j]`, both increasing: equal keys are matched in
    step; at a difference, the nearest offsets (p, q), each at most `window`, at which the next
    `run` keys agree resume it (the calls and the nodes differ in a few places, where eager
    code and the trace build a mask differently: linear time, where a general diff of two long
    repetitive sequences is quadratic). Alignment stops where nothing within the window
    agrees."""
    pairs: list[tuple[int, int]] = []
    i = j = 0
    while i < len(a) and j < len(b):
        if a[i] == b[j]:
            pairs.append((i, j))
            i, j = i + 1, j + 1
            continue
        step = next(
            (
                (p, d - p)
                for d in range(1, 2 * window + 1)
                for p in range(max(0, d - window), min(d, window) + 1)
                if list(a[i + p : i + p + run]) == list(b[j + d - p : j + d - p + run])
                and i + p < len(a)
                and j + d - p < len(b)
            ),
            None,
        )
        if step is None:
            break
        i, j = i + step[0], j + step[1]
    return pairs


def hold_measured(flow: Dataflow, run: EagerRun) -> Dataflow:
    """`flow` with the lifetimes of `run`: each node aligned with an eager call (same bytes
    allocated and written, in order) has its tensors read, nominally, by the last aligned node
    at or before the last call their storage was alive through, when that is later than the
    trace's own last read. Only ever lengthens a lifetime; node order and data are unchanged."""
    nodes = list(flow.nodes)
    keys = [_node_key(flow, n) for n in nodes]
    calls = run.calls
    ckeys = [(c.allocated, c.written) for c in calls]
    node_of = dict(_align(ckeys, keys))  # eager call position in `calls` -> node index
    aligned = sorted((calls[c].index, i) for c, i in node_of.items())
    positions = [p for p, _ in aligned]
    last_read: dict[str, int] = {}
    for i, n in enumerate(nodes):
        for t in n.inputs:
            last_read[flow.root(t)] = i
    extra: dict[int, list[str]] = {}
    for c, i in node_of.items():
        owned = [t for t in nodes[i].outputs if flow.root(t) == t]
        for t, through in zip(owned, calls[c].alive_through, strict=True):
            k = bisect.bisect_right(positions, through) - 1
            j = aligned[k][1] if k >= 0 else -1
            if j > max(i, last_read.get(t, i)):
                extra.setdefault(j, []).append(t)
    return flow.with_reads(extra)

"""Layout choice by unwinding (poprithms): choose every sink tensor's layout, maximise valued pairs.

A graph of tensors. Every element of every tensor has a *mapping* (a label). Sources and fixed
points have known labels; barriers (and sum_like_reduce) give their outputs new labels of their own;
view ops (reshape, reverse, dim_shuffle, slice, sub_sample, concat, and sum_like through its one
unwindable input) carry each element's label 1-to-1. Sinks are free. A valued pair (a, b, value)
between two tensors of one shape scores value x the number of positions where a and b agree.

Because view ops are 1-to-1, every element of every tensor is an alias of exactly one *root*
element (an element of a sink, source, fixed point or barrier output). `Graph.origin(t)` holds, for
each element of t, the global index of its root element, computed with numpy index arithmetic, so
propagating a solution is one gather: `labels[t] = root_label[origin(t)]`.

Labels in JSON are integers or strings. A source or fixed point without `layout`, and every barrier
output, gets generated labels named "<tensor id>#<flat index>", unique to it; an explicit string
label of that form is rejected so the names never clash. Inside, labels are interned to int ids:
explicit labels first, then generated ones; ids >= `Graph.num_labels` are labels that only a
solution uses (a "fresh" mapping, equal to nothing fixed).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from tensorplan.problems.core import (
    InstanceError,
    Problem,
    array,
    check_problem_field,
    ident,
    integer,
    number,
    obj,
    positive_int,
    req,
    show,
)

Label = int | str
Shape = tuple[int, ...]

VIEW_OPS = ("reshape", "reverse", "dim_shuffle", "slice", "sub_sample", "concat", "sum_like")
BARRIER_OPS = ("barrier", "sum_like_reduce")
OPS = ("source", "sink", "fixed_point", *BARRIER_OPS, *VIEW_OPS)
SINGLE_INPUT = ("reshape", "reverse", "dim_shuffle", "slice", "sub_sample")
_GENERATED = re.compile(r"(.+)#(\d+)")


@dataclass(frozen=True)
class Tensor:
    """One tensor and the op producing it. Only the fields of its op are set."""

    id: str
    op: str
    shape: Shape | None = None  # source, sink, reshape, fixed_point, barrier, sum_like_reduce
    inputs: tuple[str, ...] = ()
    axes: tuple[int, ...] | None = None  # reverse
    permutation: tuple[int, ...] | None = None  # dim_shuffle
    start: tuple[int, ...] | None = None  # slice
    end: tuple[int, ...] | None = None  # slice
    strides: tuple[int, ...] | None = None  # sub_sample
    axis: int | None = None  # concat
    unwind_index: int | None = None  # sum_like
    layout: tuple[Label, ...] | None = None  # source, fixed_point (optional)

    @property
    def is_root(self) -> bool:
        """Sinks, sources, fixed points and barriers start new mappings; view ops alias inputs."""
        return self.op not in VIEW_OPS


@dataclass(frozen=True)
class Pair:
    a: str
    b: str
    value: float


@dataclass(frozen=True, eq=False)
class LayoutInstance:
    """A validated unwinding graph; building it checks ids, cycles, op shapes, pairs and layouts."""

    tensors: tuple[Tensor, ...]
    pairs: tuple[Pair, ...]
    name: str | None = None

    def __post_init__(self) -> None:
        _ = self.graph  # validate eagerly: shapes, cycles, labels

    @cached_property
    def graph(self) -> Graph:
        return Graph(self)

    @cached_property
    def index(self) -> dict[str, int]:
        return {t.id: i for i, t in enumerate(self.tensors)}

    def tensor(self, tid: str) -> Tensor:
        return self.tensors[self.index[tid]]

    @property
    def sinks(self) -> list[Tensor]:
        return [t for t in self.tensors if t.op == "sink"]


@dataclass(frozen=True, eq=False)
class LayoutSolution:
    """A label id for every element of every sink: `sinks[id]` is a flat row-major int64 array.

    Ids below the instance's `graph.num_labels` are the instance's labels; larger ids are mappings
    only this solution uses.
    """

    sinks: Mapping[str, np.ndarray]
    names: Mapping[int, Label] = field(default_factory=dict)  # JSON names of solution-only ids

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, LayoutSolution)
            and self.sinks.keys() == other.sinks.keys()
            and all(np.array_equal(v, other.sinks[k]) for k, v in self.sinks.items())
        )

    __hash__ = None  # type: ignore[assignment]


# --- view-op semantics (forward and unwinding) ---------------------------------------------------


def forward(t: Tensor, xs: Sequence[np.ndarray]) -> np.ndarray:
    """Apply view op `t` to its input arrays (labels or origins, any dtype)."""
    x = xs[0]
    if t.op == "reshape":
        return x.reshape(t.shape)
    if t.op == "reverse":
        return np.flip(x, axis=t.axes) if t.axes else x
    if t.op == "dim_shuffle":
        return np.transpose(x, t.permutation)
    if t.op == "slice":
        return x[tuple(slice(s, e) for s, e in zip(t.start, t.end, strict=True))]
    if t.op == "sub_sample":
        return x[tuple(slice(None, None, s) for s in t.strides)]
    if t.op == "concat":
        return np.concatenate(xs, axis=t.axis)
    if t.op == "sum_like":
        return xs[t.unwind_index]
    raise ValueError(f"{t.op} is not a view op")


def unwind(
    t: Tensor, y: np.ndarray, in_shapes: Sequence[Shape], fill: Any = -1
) -> list[np.ndarray]:
    """The inverse of `forward`: input arrays whose forward image is `y`.

    Elements of an input that `y` does not cover (outside a slice or sub-sample, non-unwindable
    inputs of sum_like) get `fill` -- the seed's SettFillInto.
    """

    def blank(shape: Shape) -> np.ndarray:
        return np.full(shape, fill, dtype=y.dtype)

    if t.op == "reshape":
        return [y.reshape(in_shapes[0])]
    if t.op == "reverse":
        return [np.flip(y, axis=t.axes) if t.axes else y]
    if t.op == "dim_shuffle":
        return [np.transpose(y, np.argsort(t.permutation))]
    if t.op in ("slice", "sub_sample"):
        x = blank(in_shapes[0])
        if t.op == "slice":
            x[tuple(slice(s, e) for s, e in zip(t.start, t.end, strict=True))] = y
        else:
            x[tuple(slice(None, None, s) for s in t.strides)] = y
        return [x]
    if t.op == "concat":
        cuts = np.cumsum([s[t.axis] for s in in_shapes])[:-1]
        return [np.ascontiguousarray(p) for p in np.split(y, cuts, axis=t.axis)]
    if t.op == "sum_like":
        return [y if i == t.unwind_index else blank(s) for i, s in enumerate(in_shapes)]
    raise ValueError(f"{t.op} is not a view op")


def numel(shape: Shape) -> int:
    return int(np.prod(shape, dtype=np.int64)) if shape else 1


# --- the compiled graph ---------------------------------------------------------------------------


class Graph:
    """Shapes, topological order, root offsets, label tables and origin arrays of an instance."""

    def __init__(self, inst: LayoutInstance) -> None:
        self.inst = inst
        ids = [t.id for t in inst.tensors]
        index: dict[str, int] = {}
        for i, tid in enumerate(ids):
            if tid in index:
                raise InstanceError(f"tensors[{i}].id", f"duplicate tensor id {tid!r}")
            index[tid] = i
        self.index = index
        self.order = self._topological_order()
        self.shapes: dict[str, Shape] = {}
        for i in self.order:
            t = inst.tensors[i]
            self.shapes[t.id] = _output_shape(t, i, [self.shapes[x] for x in t.inputs])
        self.size = {tid: numel(s) for tid, s in self.shapes.items()}
        # root elements: sinks first, then the other roots, in file order
        roots = [t for t in inst.tensors if t.op == "sink"] + [
            t for t in inst.tensors if t.is_root and t.op != "sink"
        ]
        self.root_offset: dict[str, int] = {}
        total = 0
        for t in roots:
            self.root_offset[t.id] = total
            total += self.size[t.id]
        self.num_roots = total
        self.sink_ids = [t.id for t in inst.tensors if t.op == "sink"]
        self.num_sink_elements = sum(self.size[s] for s in self.sink_ids)
        self._labels(roots)
        self._origins: dict[str, np.ndarray] = {}
        for k, p in enumerate(inst.pairs):
            for side in ("a", "b"):
                if getattr(p, side) not in index:
                    raise InstanceError(
                        f"pairs[{k}].{side}", f"unknown tensor id {getattr(p, side)!r}"
                    )
            if self.shapes[p.a] != self.shapes[p.b]:
                raise InstanceError(
                    f"pairs[{k}]",
                    f"tensors {p.a!r} and {p.b!r} have different "
                    f"shapes {list(self.shapes[p.a])} and {list(self.shapes[p.b])}",
                )
            if p.value < 0:
                raise InstanceError(f"pairs[{k}].value", f"must be >= 0, got {p.value}")

    def _topological_order(self) -> list[int]:
        tensors = self.inst.tensors
        for i, t in enumerate(tensors):
            for k, x in enumerate(t.inputs):
                if x not in self.index:
                    field_ = "input" if t.op in SINGLE_INPUT else f"inputs[{k}]"
                    raise InstanceError(
                        f"tensors[{i}].{field_}", f"tensor {t.id!r}: unknown tensor id {x!r}"
                    )
        state = [0] * len(tensors)  # 0 new, 1 on stack, 2 done
        order: list[int] = []
        for s in range(len(tensors)):
            if state[s]:
                continue
            stack = [(s, 0)]
            state[s] = 1
            while stack:
                i, k = stack.pop()
                ins = tensors[i].inputs
                if k < len(ins):
                    stack.append((i, k + 1))
                    j = self.index[ins[k]]
                    if state[j] == 1:
                        raise InstanceError(
                            f"tensors[{i}].inputs",
                            f"tensor {tensors[i].id!r}: cycle through {ins[k]!r}",
                        )
                    if state[j] == 0:
                        state[j] = 1
                        stack.append((j, 0))
                else:
                    state[i] = 2
                    order.append(i)
        return order

    def _labels(self, roots: list[Tensor]) -> None:
        """Intern explicit labels; give generated labels to roots without a layout."""
        explicit: dict[Label, int] = {}
        values: list[Label] = []
        arrays: dict[str, np.ndarray] = {}
        generated: list[Tensor] = []
        for t in roots:
            if t.op == "sink":
                continue
            if t.layout is None:
                generated.append(t)
                continue
            i = self.index[t.id]
            ids = np.empty(len(t.layout), dtype=np.int64)
            for k, lab in enumerate(t.layout):
                got = explicit.get(lab)
                if got is None:
                    if (
                        isinstance(lab, str)
                        and (m := _GENERATED.fullmatch(lab))
                        and m.group(1) in self.index
                    ):
                        raise InstanceError(
                            f"tensors[{i}].layout[{k}]",
                            f"tensor {t.id!r}: label {lab!r} is reserved for "
                            "generated labels (<tensor id>#<index>)",
                        )
                    got = explicit[lab] = len(values)
                    values.append(lab)
                ids[k] = got
            arrays[t.id] = ids
        self.explicit, self.values = explicit, values
        self.generated_base: dict[str, int] = {}
        base = len(values)
        for t in generated:
            self.generated_base[t.id] = base
            arrays[t.id] = np.arange(base, base + self.size[t.id], dtype=np.int64)
            base += self.size[t.id]
        self.num_labels = base
        fixed = np.empty(self.num_roots - self.num_sink_elements, dtype=np.int64)
        for t in roots:
            if t.op != "sink":
                off = self.root_offset[t.id] - self.num_sink_elements
                fixed[off : off + self.size[t.id]] = arrays[t.id]
        self.fixed_labels = fixed

    def origin(self, tid: str) -> np.ndarray:
        """Global root-element index of every element of `tid`, shaped like the tensor."""
        got = self._origins.get(tid)
        if got is not None:
            return got
        stack = [tid]
        while stack:
            cur = stack[-1]
            if cur in self._origins:
                stack.pop()
                continue
            t = self.inst.tensors[self.index[cur]]
            if t.is_root:
                off = self.root_offset[cur]
                arr = np.arange(off, off + self.size[cur], dtype=np.int64).reshape(self.shapes[cur])
            else:
                missing = [x for x in t.inputs if x not in self._origins]
                if missing:
                    stack.extend(missing)
                    continue
                arr = forward(t, [self._origins[x] for x in t.inputs])
            self._origins[cur] = arr
            stack.pop()
        return self._origins[tid]

    def flat_origin(self, tid: str) -> np.ndarray:
        return self.origin(tid).reshape(-1)

    # labels ---------------------------------------------------------------------------------------

    def label_id(self, value: Any, where: str, extra: dict[Label, int]) -> int:
        """Intern a label of a solution; labels the instance does not know go to `extra`."""
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise InstanceError(where, f"label must be an integer or string, got {show(value)}")
        got = self.explicit.get(value)
        if got is not None:
            return got
        if isinstance(value, str) and (m := _GENERATED.fullmatch(value)):
            base = self.generated_base.get(m.group(1))
            k = int(m.group(2))
            if base is not None:
                if k >= self.size[m.group(1)]:
                    raise InstanceError(where, f"generated label {value!r} is out of range")
                return base + k
        if value not in extra:
            extra[value] = self.num_labels + len(extra)
        return extra[value]

    def label_names(self, ids: np.ndarray, names: Mapping[int, Label] | None = None) -> list[Label]:
        """JSON names of label ids (inverse of `label_id`).

        Solution-only ids take their name from `names`, else "<first sink id>#<k>" (a string no
        explicit instance label can be), made unique against `names` by trailing '#'.
        """
        names = names or {}
        taken = set(names.values())
        out: list[Label] = []
        gen = sorted((b, tid) for tid, b in self.generated_base.items())
        bases = np.array([b for b, _ in gen], dtype=np.int64)
        fresh = self.sink_ids[0] if self.sink_ids else "fresh"
        for x in ids.tolist():
            if x < len(self.values):
                out.append(self.values[x])
            elif x < self.num_labels:
                j = int(np.searchsorted(bases, x, side="right")) - 1
                out.append(f"{gen[j][1]}#{x - gen[j][0]}")
            elif x in names:
                out.append(names[x])
            else:
                name = f"{fresh}#{x - self.num_labels}"
                while name in taken:
                    name += "#"
                out.append(name)
        return out

    def root_labels(self, sol: LayoutSolution) -> np.ndarray:
        """Label id of every root element: the solution's for sinks, fixed ones for the rest."""
        out = np.empty(self.num_roots, dtype=np.int64)
        for s in self.sink_ids:
            off = self.root_offset[s]
            out[off : off + self.size[s]] = sol.sinks[s]
        out[self.num_sink_elements :] = self.fixed_labels
        return out


def _output_shape(t: Tensor, i: int, ins: list[Shape]) -> Shape:
    """The shape of tensor t (the i-th) from its inputs' shapes; a misfit is an InstanceError."""
    w = f"tensors[{i}]"

    def bad(fld: str, why: str) -> InstanceError:
        return InstanceError(f"{w}.{fld}", f"tensor {t.id!r}: {why}")

    if t.op in ("source", "sink", "fixed_point", *BARRIER_OPS):
        assert t.shape is not None
        if t.layout is not None and len(t.layout) != numel(t.shape):
            raise bad(
                "layout",
                f"has {len(t.layout)} labels for {numel(t.shape)} elements "
                f"of shape {list(t.shape)}",
            )
        return t.shape
    x = ins[0]
    rank = len(x)
    if t.op == "reshape":
        assert t.shape is not None
        if numel(t.shape) != numel(x):
            raise bad(
                "shape",
                f"reshape from {list(x)} ({numel(x)} elements) to {list(t.shape)} "
                f"({numel(t.shape)} elements) changes the element count",
            )
        return t.shape
    if t.op == "reverse":
        assert t.axes is not None
        if any(not 0 <= a < rank for a in t.axes) or len(set(t.axes)) != len(t.axes):
            raise bad("axes", f"axes {list(t.axes)} must be distinct dims of rank {rank}")
        return x
    if t.op == "dim_shuffle":
        assert t.permutation is not None
        if sorted(t.permutation) != list(range(rank)):
            raise bad(
                "permutation",
                f"{list(t.permutation)} is not a permutation of "
                f"0..{rank - 1} (input shape {list(x)})",
            )
        return tuple(x[p] for p in t.permutation)
    if t.op == "slice":
        assert t.start is not None and t.end is not None
        for fld, v in (("start", t.start), ("end", t.end)):
            if len(v) != rank:
                raise bad(fld, f"has {len(v)} entries for input rank {rank}")
        for d, (s, e) in enumerate(zip(t.start, t.end, strict=True)):
            if not 0 <= s < e <= x[d]:
                raise bad(
                    "start" if not 0 <= s < x[d] else "end",
                    f"slice [{s}, {e}) on dim {d} is out of range for input shape {list(x)}",
                )
        return tuple(e - s for s, e in zip(t.start, t.end, strict=True))
    if t.op == "sub_sample":
        assert t.strides is not None
        if len(t.strides) != rank:
            raise bad("strides", f"has {len(t.strides)} entries for input rank {rank}")
        return tuple(-(-n // s) for n, s in zip(x, t.strides, strict=True))
    if t.op == "concat":
        assert t.axis is not None
        if not 0 <= t.axis < rank:
            raise bad("axis", f"axis {t.axis} is not a dim of rank {rank}")
        for k, y in enumerate(ins[1:], 1):
            if len(y) != rank or any(y[d] != x[d] for d in range(rank) if d != t.axis):
                raise bad(
                    f"inputs[{k}]",
                    f"shape {list(y)} does not fit shape {list(x)} for concat on axis {t.axis}",
                )
        return tuple(sum(y[t.axis] for y in ins) if d == t.axis else x[d] for d in range(rank))
    if t.op == "sum_like":
        assert t.unwind_index is not None
        if not 0 <= t.unwind_index < len(ins):
            raise bad("unwind_index", f"{t.unwind_index} is not an index into {len(ins)} inputs")
        out = ins[t.unwind_index]
        for k, y in enumerate(ins):
            try:
                ok = np.broadcast_shapes(y, out) == out
            except ValueError:
                ok = False
            if not ok:
                raise bad(
                    f"inputs[{k}]",
                    f"shape {list(y)} does not broadcast to the unwind input's shape {list(out)}",
                )
        return out
    raise bad("op", f"unknown op {t.op!r}")


# --- parsing and writing ------------------------------------------------------------------------


def _int_list(value: Any, where: str, *, minimum: int | None = None) -> tuple[int, ...]:
    return tuple(
        integer(v, f"{where}[{k}]", minimum=minimum) for k, v in enumerate(array(value, where))
    )


def _shape(value: Any, where: str) -> Shape:
    return tuple(positive_int(v, f"{where}[{k}]") for k, v in enumerate(array(value, where)))


def _label(value: Any, where: str) -> Label:
    if isinstance(value, bool) or not isinstance(value, int | str):
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise InstanceError(where, f"label must be an integer or string, got {show(value)}")
    return value


def _parse_tensor(item: Any, i: int) -> Tensor:
    w = f"tensors[{i}]"
    item = obj(item, w)
    tid = ident(req(item, "id", w), f"{w}.id")
    op = req(item, "op", w)
    if op not in OPS:
        raise InstanceError(
            f"{w}.op", f"tensor {tid!r}: unknown op {show(op)}; known: {', '.join(OPS)}"
        )
    kw: dict[str, Any] = {}
    if op in ("source", "sink", "reshape", "fixed_point", *BARRIER_OPS):
        kw["shape"] = _shape(req(item, "shape", w), f"{w}.shape")
    if op in SINGLE_INPUT:
        kw["inputs"] = (ident(req(item, "input", w), f"{w}.input"),)
    elif op in ("concat", "sum_like", "fixed_point", *BARRIER_OPS):
        raw = item.get("inputs", []) if op == "fixed_point" else req(item, "inputs", w)
        kw["inputs"] = tuple(
            ident(x, f"{w}.inputs[{k}]") for k, x in enumerate(array(raw, f"{w}.inputs"))
        )
        if op in ("concat", "sum_like") and not kw["inputs"]:
            raise InstanceError(f"{w}.inputs", f"tensor {tid!r}: {op} needs at least one input")
    if op == "reverse":
        kw["axes"] = _int_list(req(item, "axes", w), f"{w}.axes")
    elif op == "dim_shuffle":
        kw["permutation"] = _int_list(req(item, "permutation", w), f"{w}.permutation")
    elif op == "slice":
        kw["start"] = _int_list(req(item, "start", w), f"{w}.start")
        kw["end"] = _int_list(req(item, "end", w), f"{w}.end")
    elif op == "sub_sample":
        kw["strides"] = tuple(
            positive_int(v, f"{w}.strides[{k}]")
            for k, v in enumerate(array(req(item, "strides", w), f"{w}.strides"))
        )
    elif op == "concat":
        kw["axis"] = integer(req(item, "axis", w), f"{w}.axis")
    elif op == "sum_like":
        kw["unwind_index"] = integer(req(item, "unwind_index", w), f"{w}.unwind_index")
    if op in ("source", "fixed_point") and item.get("layout") is not None:
        raw = array(item["layout"], f"{w}.layout")
        kw["layout"] = tuple(_label(v, f"{w}.layout[{k}]") for k, v in enumerate(raw))
    elif "layout" in item and item["layout"] is not None:
        raise InstanceError(
            f"{w}.layout", f"tensor {tid!r}: only sources and fixed points have a layout, not {op}"
        )
    return Tensor(tid, op, **kw)


def parse_instance(data: Mapping[str, Any]) -> LayoutInstance:
    name = check_problem_field(data, "layout")
    tensors = tuple(
        _parse_tensor(x, i) for i, x in enumerate(array(req(data, "tensors", ""), "tensors"))
    )
    pairs = []
    for k, item in enumerate(array(req(data, "pairs", ""), "pairs")):
        w = f"pairs[{k}]"
        item = obj(item, w)
        pairs.append(
            Pair(
                ident(req(item, "a", w), f"{w}.a"),
                ident(req(item, "b", w), f"{w}.b"),
                number(req(item, "value", w), f"{w}.value"),
            )
        )
    return LayoutInstance(tensors, tuple(pairs), name)


def tensor_to_json(t: Tensor) -> dict[str, Any]:
    out: dict[str, Any] = {"id": t.id, "op": t.op}
    if t.op in SINGLE_INPUT:
        out["input"] = t.inputs[0]
    elif t.inputs or t.op in ("concat", "sum_like", *BARRIER_OPS):
        out["inputs"] = list(t.inputs)
    for key in ("shape", "axes", "permutation", "start", "end", "strides"):
        v = getattr(t, key)
        if v is not None:
            out[key] = list(v)
    for key in ("axis", "unwind_index"):
        if getattr(t, key) is not None:
            out[key] = getattr(t, key)
    if t.layout is not None:
        out["layout"] = list(t.layout)
    return out


def instance_to_json(inst: LayoutInstance) -> dict[str, Any]:
    out: dict[str, Any] = {"problem": "layout"}
    if inst.name:
        out["name"] = inst.name
    out["tensors"] = [tensor_to_json(t) for t in inst.tensors]
    out["pairs"] = [{"a": p.a, "b": p.b, "value": p.value} for p in inst.pairs]
    return out


def parse_solution(data: Mapping[str, Any], inst: LayoutInstance) -> LayoutSolution:
    g = inst.graph
    data = obj(data, "solution")
    raw = obj(req(data, "sinks", "solution"), "solution.sinks")
    extra: dict[Label, int] = {}
    sinks: dict[str, np.ndarray] = {}
    for key, value in raw.items():
        w = f"solution.sinks.{key}"
        if key not in g.index or inst.tensor(key).op != "sink":
            raise InstanceError(w, f"{key!r} is not a sink tensor")
        vals = array(value, w)
        if len(vals) != g.size[key]:
            raise InstanceError(w, f"has {len(vals)} labels for {g.size[key]} elements")
        if all(type(v) is int for v in vals) and all(type(v) is int for v in g.values):
            # fast path for integer layouts: intern through a lookup table
            arr = np.asarray(vals, dtype=np.int64)
            sinks[key] = _intern_ints(g, arr, extra)
        else:
            sinks[key] = np.fromiter(
                (g.label_id(v, f"{w}[{k}]", extra) for k, v in enumerate(vals)),
                dtype=np.int64,
                count=len(vals),
            )
    missing = [s for s in g.sink_ids if s not in sinks]
    if missing:
        raise InstanceError("solution.sinks", f"no layout for sink(s) {', '.join(missing[:5])}")
    return LayoutSolution({s: sinks[s] for s in g.sink_ids}, {i: v for v, i in extra.items()})


def _intern_ints(g: Graph, arr: np.ndarray, extra: dict[Label, int]) -> np.ndarray:
    uniq, inv = np.unique(arr, return_inverse=True)
    ids = np.array(
        [
            g.explicit[v] if v in g.explicit else extra.setdefault(v, g.num_labels + len(extra))
            for v in uniq.tolist()
        ],
        dtype=np.int64,
    )
    return ids[inv.reshape(-1)]


def solution_to_json(inst: LayoutInstance, sol: LayoutSolution) -> dict[str, Any]:
    g = inst.graph
    return {"sinks": {s: g.label_names(np.asarray(sol.sinks[s]), sol.names) for s in g.sink_ids}}


# --- objective, propagation, checker, bounds -----------------------------------------------------


def propagate(inst: LayoutInstance, sol: LayoutSolution) -> dict[str, np.ndarray]:
    """The label id of every element of every tensor (shaped), given the sink layouts."""
    g = inst.graph
    roots = g.root_labels(sol)
    return {t.id: roots[g.origin(t.id)] for t in inst.tensors}


def pair_matches(inst: LayoutInstance, sol: LayoutSolution) -> list[int]:
    """Number of agreeing positions of each pair, in the order of `inst.pairs`."""
    g = inst.graph
    roots = g.root_labels(sol)
    return [
        int(np.count_nonzero(roots[g.flat_origin(p.a)] == roots[g.flat_origin(p.b)]))
        for p in inst.pairs
    ]


def objective(inst: LayoutInstance, sol: LayoutSolution) -> float:
    """Sum over pairs of value x agreeing positions, by direct propagation through the graph."""
    return float(sum(p.value * m for p, m in zip(inst.pairs, pair_matches(inst, sol), strict=True)))


def check(inst: LayoutInstance, sol: LayoutSolution) -> list[str]:
    """Named violations: a missing or unknown sink, a wrong length, a negative label id."""
    g = inst.graph
    out = []
    for s in sol.sinks:
        if s not in g.index or inst.tensor(s).op != "sink":
            out.append(f"unknown sink: {s!r} is not a sink tensor")
    for s in g.sink_ids:
        lab = sol.sinks.get(s)
        if lab is None:
            out.append(f"missing sink: no layout for {s!r}")
            continue
        lab = np.asarray(lab)
        if lab.ndim != 1 or lab.shape[0] != g.size[s]:
            out.append(f"wrong length: sink {s!r} has {lab.size} labels for {g.size[s]} elements")
        elif lab.size and (not np.issubdtype(lab.dtype, np.integer) or lab.min() < 0):
            out.append(f"bad label: sink {s!r} has a label id that is not a non-negative integer")
    return out


@dataclass(frozen=True, eq=False)
class Terms:
    """The objective as a function of sink-element labels x (sink elements 0..n-1):

    constant + sum_k unary_w[k] [x[unary_e[k]] == unary_l[k]]
             + sum_k bin_w[k] [x[bin_e[k]] == x[bin_f[k]]]
    with (unary_e, unary_l) and (bin_e < bin_f) unique. Exact; only non-negative weights.
    """

    n: int
    constant: float
    unary_e: np.ndarray
    unary_l: np.ndarray
    unary_w: np.ndarray
    bin_e: np.ndarray
    bin_f: np.ndarray
    bin_w: np.ndarray
    per_pair: tuple[float, ...] = field(default=())  # max attainable per pair (for the bound)

    def value(self, x: np.ndarray) -> float:
        return float(
            self.constant
            + self.unary_w[x[self.unary_e] == self.unary_l].sum()
            + self.bin_w[x[self.bin_e] == x[self.bin_f]].sum()
        )


def terms(inst: LayoutInstance) -> Terms:
    """Reduce every pair position to a constant, a unary or a binary term over sink elements."""
    g = inst.graph
    n = g.num_sink_elements
    fixed = g.fixed_labels
    const = 0.0
    ue, ul, uw, be, bf, bw = [], [], [], [], [], []
    per_pair = []
    for p in inst.pairs:
        oa, ob = g.flat_origin(p.a), g.flat_origin(p.b)
        sa, sb = oa < n, ob < n
        ff = ~sa & ~sb
        agree_fixed = int(np.count_nonzero(fixed[oa[ff] - n] == fixed[ob[ff] - n]))
        ss = sa & sb
        same = ss & (oa == ob)
        const += p.value * (agree_fixed + int(np.count_nonzero(same)))
        per_pair.append(p.value * (agree_fixed + int(np.count_nonzero(~ff))))
        if p.value == 0:
            continue
        for s_side, o_side, o_other in ((sa & ~sb, oa, ob), (sb & ~sa, ob, oa)):
            ue.append(o_side[s_side])
            ul.append(fixed[o_other[s_side] - n])
            uw.append(np.full(int(s_side.sum()), p.value))
        dif = ss & (oa != ob)
        a, b = oa[dif], ob[dif]
        be.append(np.minimum(a, b))
        bf.append(np.maximum(a, b))
        bw.append(np.full(a.size, p.value))
    ue_, ul_, uw_ = _aggregate(ue, ul, uw)
    be_, bf_, bw_ = _aggregate(be, bf, bw)
    return Terms(n, const, ue_, ul_, uw_, be_, bf_, bw_, tuple(per_pair))


def _aggregate(xs: list[np.ndarray], ys: list[np.ndarray], ws: list[np.ndarray]):
    """Merge duplicate (x, y) keys, summing their weights; sorted by (x, y)."""
    if not xs:
        e = np.empty(0, dtype=np.int64)
        return e, e.copy(), np.empty(0)
    x, y, w = np.concatenate(xs), np.concatenate(ys), np.concatenate(ws)
    if x.size == 0:
        return x.astype(np.int64), y.astype(np.int64), w.astype(float)
    order = np.lexsort((y, x))
    x, y, w = x[order], y[order], w[order]
    start = np.ones(x.size, dtype=bool)
    start[1:] = (x[1:] != x[:-1]) | (y[1:] != y[:-1])
    idx = np.flatnonzero(start)
    return x[idx], y[idx], np.add.reduceat(w, idx)


def upper_bound(inst: LayoutInstance) -> float:
    """Every position touching a sink agrees at best; positions between fixed labels are known."""
    return float(sum(terms(inst).per_pair))


def metrics(inst: LayoutInstance, sol: LayoutSolution) -> dict[str, float]:
    g = inst.graph
    matches = pair_matches(inst, sol)
    total = sum(g.size[p.a] for p in inst.pairs)
    return {
        "agreeing_positions": sum(matches),
        "pair_positions": total,
        "pairs_fully_matched": sum(
            m == g.size[p.a] for p, m in zip(inst.pairs, matches, strict=True)
        ),
    }


def fresh_solution(inst: LayoutInstance, x: np.ndarray) -> LayoutSolution:
    """Split a label vector over all sink elements (global order) into per-sink arrays."""
    g = inst.graph
    return LayoutSolution(
        {
            s: np.ascontiguousarray(x[g.root_offset[s] : g.root_offset[s] + g.size[s]])
            for s in g.sink_ids
        }
    )


def solution_vector(inst: LayoutInstance, sol: LayoutSolution) -> np.ndarray:
    """All sink labels in global sink-element order (the inverse of `fresh_solution`)."""
    g = inst.graph
    if not g.sink_ids:
        return np.empty(0, dtype=np.int64)
    return np.concatenate([np.asarray(sol.sinks[s], dtype=np.int64) for s in g.sink_ids])


# --- classes of identical components (shared by `local` and the exact models) ---------------------


class OutOfTime(Exception):
    """Raised by a deadline check inside long vectorised work (caught by the solvers)."""


def linked_components(n: int, e: np.ndarray, f: np.ndarray) -> np.ndarray:
    """Connected-component id (the smallest member) of each of n nodes under edges (e, f)."""
    parent = np.arange(n, dtype=np.int64)
    if e.size == 0:
        return parent
    while True:
        pe, pf = parent[e], parent[f]
        if np.array_equal(pe, pf):
            return parent
        lo, hi = np.minimum(pe, pf), np.maximum(pe, pf)
        np.minimum.at(parent, hi, lo)
        while True:
            nxt = parent[parent]
            if np.array_equal(nxt, parent):
                break
            parent = nxt


@dataclass(frozen=True, eq=False)
class Klass:
    """A class of identical components: one canonical sub-problem and every component it covers.

    Canonical elements 0..size-1 (each component's elements in index order) and canonical labels
    0..num_labels-1 (the labels reaching the component, renamed by first appearance).
    `elements[i, j]` is the sink element playing canonical element j in the i-th component and
    `labels[i, c]` the label id playing canonical label c there. Terms: unary (j, label, weight)
    and links (j < k, weight), weights per component (not multiplied by the multiplicity).
    """

    size: int
    num_labels: int
    unary_j: np.ndarray
    unary_l: np.ndarray
    unary_w: np.ndarray
    link_j: np.ndarray
    link_k: np.ndarray
    link_w: np.ndarray
    elements: np.ndarray
    labels: np.ndarray

    @property
    def multiplicity(self) -> int:
        return int(self.elements.shape[0])

    def value(self, y: np.ndarray) -> float:
        """Value of one component under canonical labelling y (length size)."""
        return float(
            self.unary_w[y[self.unary_j] == self.unary_l].sum()
            + self.link_w[y[self.link_j] == y[self.link_k]].sum()
        )

    def bound(self) -> float:
        """Cheap upper bound of one component: every element its best unary, every link agrees."""
        best = np.zeros(self.size)
        np.maximum.at(best, self.unary_j, self.unary_w)
        return float(best.sum() + self.link_w.sum())

    def member_values(self, x: np.ndarray) -> np.ndarray:
        """Value of every member component under sink labels x."""
        xs = x[self.elements]
        out = np.zeros(self.multiplicity)
        if self.unary_j.size:
            out += ((xs[:, self.unary_j] == self.labels[:, self.unary_l]) * self.unary_w).sum(1)
        if self.link_j.size:
            out += ((xs[:, self.link_j] == xs[:, self.link_k]) * self.link_w).sum(1)
        return out

    def canonical(self, x: np.ndarray, member: int) -> np.ndarray:
        """Canonical labelling of component `member` under sink labels x; labels that are not
        candidates become canonical label 0 (never lowers the value: weights are >= 0)."""
        got = x[self.elements[member]]
        out = np.zeros(self.size, dtype=np.int64)
        if self.num_labels:
            hit = got[:, None] == self.labels[member][None, :]
            has = hit.any(axis=1)
            out[has] = hit.argmax(axis=1)[has]
        return out


@dataclass(frozen=True, eq=False)
class Reduction:
    """The objective split into a constant, closed-form isolated elements and classes."""

    terms: Terms
    isolated_value: float  # best total of the isolated elements
    isolated_x: np.ndarray  # best label of every isolated element (-1 elsewhere / no unary)
    classes: tuple[Klass, ...]

    @property
    def components(self) -> int:
        return sum(k.multiplicity for k in self.classes)


def _starts(counts: np.ndarray) -> np.ndarray:
    out = np.zeros(counts.size + 1, dtype=np.int64)
    np.cumsum(counts, out=out[1:])
    return out


def _row_groups(rows: np.ndarray) -> np.ndarray:
    """Group id of every row of an int64 matrix (equal rows, equal ids), fast and exact.

    Rows are hashed with a fixed random linear map (wrapping uint64 arithmetic); the hash groups
    are checked row by row and a collision falls back to a lexicographic sort.
    """
    m, w = rows.shape
    if w == 0 or m <= 1:
        return np.zeros(m, dtype=np.int64)
    mult = np.random.default_rng(12345).integers(1, 2**63, size=w, dtype=np.uint64) | np.uint64(1)
    h = (rows.view(np.uint64) * mult).sum(axis=1, dtype=np.uint64)
    h ^= h >> np.uint64(29)
    _, first, inv = np.unique(h, return_index=True, return_inverse=True)
    inv = inv.reshape(-1)
    if np.array_equal(rows, rows[first[inv]]):
        return inv
    o = np.lexsort(rows.T[::-1])
    r = rows[o]
    new = np.ones(m, dtype=bool)
    new[1:] = (r[1:] != r[:-1]).any(axis=1)
    out = np.empty(m, dtype=np.int64)
    out[o] = np.cumsum(new) - 1
    return out


def reduce_terms(tm: Terms, check=lambda: None) -> Reduction:
    """Group the linked sink elements into classes of identical components, vectorised.

    Components with the same canonical signature (size, unary terms in (element, -weight, label)
    order with labels renamed by first appearance, links, weights) form one class. `check()` is
    called between the heavy steps and may raise `OutOfTime`.
    """
    n = tm.n
    linked = np.zeros(n, dtype=bool)
    linked[tm.bin_e] = True
    linked[tm.bin_f] = True
    iso_x = np.full(n, -1, dtype=np.int64)
    iso_value = 0.0
    if tm.unary_e.size:
        us = np.searchsorted(tm.unary_e, np.arange(n + 1))
        has = us[1:] > us[:-1]
        best = np.zeros(n)
        best[has] = np.maximum.reduceat(tm.unary_w, us[:-1][has])
        is_max = tm.unary_w >= best[tm.unary_e] - 1e-12
        idx = np.flatnonzero(is_max)[::-1]  # the first maximal term of each element wins
        iso_x[tm.unary_e[idx]] = tm.unary_l[idx]
        iso_x[linked] = -1
        iso_value = float(best[~linked].sum())
    if tm.bin_e.size == 0:
        return Reduction(tm, iso_value, iso_x, ())
    check()
    comp = linked_components(n, tm.bin_e, tm.bin_f)
    check()
    nodes = np.flatnonzero(linked)
    order = nodes[np.argsort(comp[nodes], kind="stable")]  # by component, then element
    new = np.ones(order.size, dtype=bool)
    new[1:] = comp[order[1:]] != comp[order[:-1]]
    cstart = np.flatnonzero(new)
    ncomp = cstart.size
    cid_o = np.cumsum(new) - 1
    cid = np.full(n, -1, dtype=np.int64)
    cid[order] = cid_o
    pos = np.zeros(n, dtype=np.int64)
    pos[order] = np.arange(order.size) - cstart[cid_o]
    csize = np.diff(np.append(cstart, order.size))
    # unary terms of linked elements, per component in (element, -weight, label) order
    sel = linked[tm.unary_e]
    ue, ul, uw = tm.unary_e[sel], tm.unary_l[sel], tm.unary_w[sel]
    uc, uj = cid[ue], pos[ue]
    o = np.lexsort((ul, -uw, uj, uc))
    uc, uj, ul, uw = uc[o], uj[o], ul[o], uw[o]
    # canonical label: rank of the label's first appearance within its component
    big = int(ul.max()) + 1 if ul.size else 1
    uniq, first, inv = np.unique(uc * big + ul, return_index=True, return_inverse=True)
    pc = uniq // big
    o2 = np.lexsort((first, pc))
    nlab = np.bincount(pc, minlength=ncomp)
    lstart = _starts(nlab)
    rank = np.empty(uniq.size, dtype=np.int64)
    rank[o2] = np.arange(uniq.size) - lstart[pc[o2]]
    ucanon = rank[inv.reshape(-1)]
    comp_labels = (uniq % big)[o2]  # per component, in canonical order
    ustart = _starts(np.bincount(uc, minlength=ncomp))
    unum = np.diff(ustart)
    check()
    # links, per component in (j, k) order
    lc, lj, lk, lw = cid[tm.bin_e], pos[tm.bin_e], pos[tm.bin_f], tm.bin_w
    o3 = np.lexsort((lk, lj, lc))
    lj, lk, lw = lj[o3], lk[o3], lw[o3]
    lnstart = _starts(np.bincount(lc, minlength=ncomp))
    lnum = np.diff(lnstart)
    uwb, lwb = uw.view(np.int64), lw.view(np.int64)  # exact equality of the weights
    # group by shape (size, unary count, link count), then by content within a shape
    shape_rows = np.stack([csize, unum, lnum], axis=1).astype(np.int64)
    sinv = _row_groups(shape_rows)
    by_shape = np.argsort(sinv, kind="stable")
    sbound = _starts(np.bincount(sinv))
    found: list[tuple[int, Klass]] = []
    for s in range(sbound.size - 1):
        check()
        group = by_shape[sbound[s] : sbound[s + 1]]  # components, ascending
        size, nu, nl = (int(v) for v in shape_rows[group[0]])
        ui = ustart[group][:, None] + np.arange(nu)
        li = lnstart[group][:, None] + np.arange(nl)
        rows = np.concatenate([uj[ui], ucanon[ui], uwb[ui], lj[li], lk[li], lwb[li]], axis=1)
        ginv = _row_groups(rows)
        by_class = np.argsort(ginv, kind="stable")
        gb = _starts(np.bincount(ginv))
        for q in range(gb.size - 1):
            if q % 256 == 255:
                check()
            members = group[by_class[gb[q] : gb[q + 1]]]
            rep = int(members[0])
            nl_rep = int(nlab[rep])
            u0, u1 = ustart[rep], ustart[rep + 1]
            l0, l1 = lnstart[rep], lnstart[rep + 1]
            k = Klass(
                size,
                nl_rep,
                uj[u0:u1],
                ucanon[u0:u1],
                uw[u0:u1],
                lj[l0:l1],
                lk[l0:l1],
                lw[l0:l1],
                order[cstart[members][:, None] + np.arange(size)],
                comp_labels[lstart[members][:, None] + np.arange(nl_rep)],
            )
            found.append((rep, k))
    found.sort(key=lambda t: t[0])
    return Reduction(tm, iso_value, iso_x, tuple(k for _, k in found))


def reduce(inst: LayoutInstance, check=lambda: None) -> Reduction:
    return reduce_terms(terms(inst), check)


PROBLEM = Problem(
    name="layout",
    sense="max",
    instance_type=LayoutInstance,
    parse_instance=parse_instance,
    instance_to_json=instance_to_json,
    parse_solution=parse_solution,
    solution_to_json=solution_to_json,
    evaluate=objective,
    check=check,
    bound=upper_bound,
    size=lambda inst: inst.graph.num_sink_elements,
    metrics=metrics,
)

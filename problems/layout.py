"""Layout choice by unwinding (poprithms): choose every sink tensor's layout, maximise valued pairs.

A graph of tensors. Every element of every tensor has a *mapping* (a label). Sources and fixed
points have known labels; barriers (and sum_like_reduce) give their outputs new labels of their own;
view ops (reshape, reverse, dim_shuffle, slice, sub_sample, concat, and sum_like through its one
unwindable input) carry each element's label 1-to-1. Sinks are free. A valued pair (a, b, value)
between two tensors of one shape scores value x the number of positions where a and b agree.

Design notes (how and why): docs/design/layout_problem.md.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from tensorplan.problems.core import (
    MAX_INT,
    InstanceError,
    MismatchError,
    Problem,
    array,
    check_problem_field,
    ident,
    integer,
    known_fields,
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
MAX_ELEMENTS = 2**30
"""Most elements a tensor, and all root tensors together, may have: every element is an int64 in
numpy arrays, so larger graphs cannot be held in memory (and element counts are exact Python
integers, never a wrapped-around int64 product)."""
FIELDS: dict[str, tuple[str, ...]] = {
    "source": ("shape", "layout"),
    "sink": ("shape",),
    "fixed_point": ("shape", "inputs", "layout"),
    "barrier": ("shape", "inputs"),
    "sum_like_reduce": ("shape", "inputs"),
    "reshape": ("input", "shape"),
    "reverse": ("input", "axes"),
    "dim_shuffle": ("input", "permutation"),
    "slice": ("input", "start", "end"),
    "sub_sample": ("input", "strides"),
    "concat": ("inputs", "axis"),
    "sum_like": ("inputs", "unwind_index"),
}
"""The fields of a tensor besides `id` and `op`, per op (`layout: null` is accepted on any op)."""


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
        assert t.start is not None and t.end is not None
        return x[tuple(slice(s, e) for s, e in zip(t.start, t.end, strict=True))]
    if t.op == "sub_sample":
        assert t.strides is not None
        return x[tuple(slice(None, None, s) for s in t.strides)]
    if t.op == "concat":
        return np.concatenate(xs, axis=t.axis)
    if t.op == "sum_like":
        assert t.unwind_index is not None
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
        assert t.permutation is not None
        return [np.transpose(y, np.argsort(t.permutation))]
    if t.op in ("slice", "sub_sample"):
        x = blank(in_shapes[0])
        if t.op == "slice":
            assert t.start is not None and t.end is not None
            x[tuple(slice(s, e) for s, e in zip(t.start, t.end, strict=True))] = y
        else:
            assert t.strides is not None
            x[tuple(slice(None, None, s) for s in t.strides)] = y
        return [x]
    if t.op == "concat":
        assert t.axis is not None
        cuts = np.cumsum([s[t.axis] for s in in_shapes])[:-1]
        return [np.ascontiguousarray(p) for p in np.split(y, cuts, axis=t.axis)]
    if t.op == "sum_like":
        return [y if i == t.unwind_index else blank(s) for i, s in enumerate(in_shapes)]
    raise ValueError(f"{t.op} is not a view op")


def numel(shape: Shape) -> int:
    """Element count of a shape, exact (a Python integer product, never wrapping around)."""
    return math.prod(shape)


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
        if total > MAX_ELEMENTS:
            raise InstanceError(
                "tensors",
                f"the sinks, sources, fixed points and barriers hold {total} elements together, "
                f"more than the {MAX_ELEMENTS} (2**30) this toolkit handles",
            )
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
                        field_ = "input" if tensors[i].op in SINGLE_INPUT else f"inputs[{k}]"
                        raise InstanceError(
                            f"tensors[{i}].{field_}",
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
        value = _label(value, where)
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

    shape = _shape_of(t, ins, bad)
    if numel(shape) > MAX_ELEMENTS:
        raise bad(
            "shape",
            f"shape {list(shape)} has {numel(shape)} elements, more than the {MAX_ELEMENTS} "
            "(2**30) this toolkit handles",
        )
    return shape


def _shape_of(t: Tensor, ins: list[Shape], bad: Callable[[str, str], InstanceError]) -> Shape:
    """The output shape of op `t` for input shapes `ins`; `bad(field, why)` makes the error."""
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
    """A label: a string, or an integer (at most 2**62 in magnitude, see `core.integer`)."""
    if isinstance(value, str):
        return value
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or (isinstance(value, float) and not value.is_integer())
    ):
        raise InstanceError(where, f"label must be an integer or string, got {show(value)}")
    return integer(value, where)


def _parse_tensor(item: Any, i: int) -> Tensor:
    w = f"tensors[{i}]"
    item = obj(item, w)
    tid = ident(req(item, "id", w), f"{w}.id")
    op = req(item, "op", w)
    if op not in OPS:
        raise InstanceError(
            f"{w}.op", f"tensor {tid!r}: unknown op {show(op)}; known: {', '.join(OPS)}"
        )
    if "layout" in item and item["layout"] is not None and "layout" not in FIELDS[op]:
        raise InstanceError(
            f"{w}.layout", f"tensor {tid!r}: only sources and fixed points have a layout, not {op}"
        )
    known_fields(item, w, dict.fromkeys(("id", "op", *FIELDS[op], "layout")))
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
    known_fields(data, "", ("problem", "name", "tensors", "pairs"))
    tensors = tuple(
        _parse_tensor(x, i) for i, x in enumerate(array(req(data, "tensors", ""), "tensors"))
    )
    pairs = []
    for k, item in enumerate(array(req(data, "pairs", ""), "pairs")):
        w = f"pairs[{k}]"
        item = known_fields(obj(item, w), w, ("a", "b", "value"))
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
    data = known_fields(obj(data, "solution"), "solution", ("sinks",))
    raw = obj(req(data, "sinks", "solution"), "solution.sinks")
    extra: dict[Label, int] = {}
    sinks: dict[str, np.ndarray] = {}
    for key, value in raw.items():
        w = f"solution.sinks.{key}"
        if key not in g.index or inst.tensor(key).op != "sink":
            raise MismatchError(w, f"{key!r} is not a sink tensor")
        vals = array(value, w)
        if len(vals) != g.size[key]:
            raise MismatchError(w, f"has {len(vals)} labels for {g.size[key]} elements")
        if all(type(v) is int and -MAX_INT <= v <= MAX_INT for v in vals) and all(
            type(v) is int for v in g.values
        ):
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
        raise MismatchError("solution.sinks", f"no layout for sink(s) {', '.join(missing[:5])}")
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


# --- the barrier rule -----------------------------------------------------------------------------
#
# A barrier's output labels exist only once all its inputs are set (seed 003: backwards-opaque,
# forwards-non-local). So a sink element may carry a barrier's generated label only if there is an
# order in which to set everything: the barrier first (after every sink element and every barrier
# output its inputs are made of), the element after it. Statically, an element a barrier depends
# on (directly, or through the outputs of the barriers it depends on) can never carry that
# barrier's labels; a labelling can also close a cycle through two barriers, which the checker
# finds by trying to release the barriers in order (Kahn's algorithm).


@dataclass(frozen=True, eq=False)
class Barriers:
    """The barriers of a graph (topological order) and what each one's output waits for."""

    ids: tuple[str, ...]
    label_lo: np.ndarray  # first generated label id of each barrier
    label_hi: np.ndarray  # one past its last
    sinks: tuple[np.ndarray, ...]  # sink elements its inputs are made of (unique)
    feeds: tuple[np.ndarray, ...]  # barriers whose output elements its inputs are made of
    _depends: dict[int, np.ndarray] = field(default_factory=dict, repr=False)  # memo

    def owner(self, labels: np.ndarray) -> np.ndarray:
        """The barrier (index) whose generated label each label id is, else -1."""
        labels = np.asarray(labels, dtype=np.int64)
        out = np.full(labels.shape, -1, dtype=np.int64)
        if not self.ids:
            return out
        order = np.argsort(self.label_lo)
        lo, hi = self.label_lo[order], self.label_hi[order]
        k = np.searchsorted(lo, labels, side="right") - 1
        ok = k >= 0
        ok[ok] &= labels[ok] < hi[k[ok]]
        out[ok] = order[k[ok]]
        return out

    def depends_on(self, b: int) -> np.ndarray:
        """Every sink element barrier b depends on, through the barriers feeding it too
        (sorted, unique; computed once per barrier)."""
        got = self._depends.get(b)
        if got is None:
            got = self._depends[b] = self._depends_on(b)
        return got

    def _depends_on(self, b: int) -> np.ndarray:
        seen, stack, parts = {b}, [b], []
        while stack:
            q = stack.pop()
            parts.append(self.sinks[q])
            for r in self.feeds[q].tolist():
                if r not in seen:
                    seen.add(r)
                    stack.append(r)
        return np.unique(np.concatenate(parts))


def barriers(g: Graph) -> Barriers:
    """The graph's `Barriers` (computed once per graph)."""
    got = getattr(g, "_barriers", None)
    if got is not None:
        return got
    inst = g.inst
    n = g.num_sink_elements
    ids = tuple(inst.tensors[i].id for i in g.order if inst.tensors[i].op in BARRIER_OPS)
    lo = np.array([g.generated_base[b] for b in ids], dtype=np.int64)
    hi = lo + np.array([g.size[b] for b in ids], dtype=np.int64)
    roots = np.array([g.root_offset[b] for b in ids], dtype=np.int64)
    by_root = np.argsort(roots)
    sinks, feeds = [], []
    for b in ids:
        parts = [g.flat_origin(x) for x in inst.tensor(b).inputs]
        o = np.unique(np.concatenate(parts)) if parts else np.empty(0, dtype=np.int64)
        sinks.append(o[o < n])
        out = o[o >= n]
        k = np.searchsorted(roots[by_root], out, side="right") - 1
        hit = k >= 0
        hit[hit] &= out[hit] < roots[by_root][k[hit]] + hi[by_root][k[hit]] - lo[by_root][k[hit]]
        feeds.append(np.unique(by_root[k[hit]]))
    got = Barriers(ids, lo, hi, tuple(sinks), tuple(feeds))
    g._barriers = got  # type: ignore[attr-defined]
    return got


def barrier_banned(g: Graph, elements: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """True where sink element `elements[i]` can never carry label `labels[i]`: the label is a
    barrier's and the barrier depends on the element (the static half of the barrier rule)."""
    bs = barriers(g)
    out = np.zeros(np.shape(elements), dtype=bool)
    owner = bs.owner(labels)
    for b in np.unique(owner[owner >= 0]).tolist():
        at = np.flatnonzero(owner == b)
        out[at] = np.isin(np.asarray(elements)[at], bs.depends_on(b))
    return out


def blocked_barriers(g: Graph, x: np.ndarray) -> list[int]:
    """Barriers (indices into `barriers(g).ids`) that can never be set under sink labels x: each
    waits, directly or not, for a sink element that carries its own or a later barrier's label."""
    bs = barriers(g)
    m = len(bs.ids)
    if m == 0:
        return []
    owner = bs.owner(x)
    needs = [
        np.union1d(bs.feeds[j], owner[bs.sinks[j]][owner[bs.sinks[j]] >= 0]).tolist()
        for j in range(m)
    ]
    waiting = [len(v) for v in needs]
    users: list[list[int]] = [[] for _ in range(m)]
    for j, v in enumerate(needs):
        for i in v:
            users[i].append(j)
    ready = [j for j in range(m) if waiting[j] == 0]
    released = np.zeros(m, dtype=bool)
    while ready:
        j = ready.pop()
        released[j] = True
        for k in users[j]:
            waiting[k] -= 1
            if waiting[k] == 0:
                ready.append(k)
    return np.flatnonzero(~released).tolist()


def repair_barriers(
    g: Graph, x: np.ndarray, value: Callable[[np.ndarray], float] | None = None
) -> tuple[np.ndarray, int]:
    """Sink labels x made to obey the barrier rule: while a barrier is blocked, the sink elements
    it waits for that carry labels of blocked barriers get new labels of their own (one each).
    Among the barriers that can be freed so, the one whose relabelling keeps the most `value`
    (default: the first) goes first. Returns (labels, number of elements relabelled); x itself
    is not changed."""
    blocked = blocked_barriers(g, x)
    if not blocked:
        return x, 0
    bs = barriers(g)
    x = np.array(x, dtype=np.int64, copy=True)
    fresh = max(int(x.max(initial=-1)) + 1, g.num_labels)
    changed = 0
    while blocked:
        stuck = set(blocked)
        # a blocked barrier whose feeding barriers are all free waits only on labels
        free = [j for j in blocked if not (set(bs.feeds[j].tolist()) & stuck)]
        tries: list[tuple[float, int, np.ndarray, int]] = []  # (value, -order, labels, count)
        for j in free[: 8 if value is not None else 1]:
            e = bs.sinks[j]
            bad = e[np.isin(bs.owner(x[e]), blocked)]
            y = x.copy()
            y[bad] = np.arange(fresh, fresh + bad.size)
            tries.append((value(y) if value is not None else 0.0, -len(tries), y, int(bad.size)))
        _, _, x, count = max(tries, key=lambda t: (t[0], t[1]))
        fresh += count
        changed += count
        blocked = blocked_barriers(g, x)
    return x, changed


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
    """Named violations: a missing or unknown sink, a wrong length, a negative label id, and the
    barrier rule broken (a sink element carrying a barrier's label the barrier waits for)."""
    g = inst.graph
    out = _check_shapes(inst, sol)
    if not out:
        out = _check_barrier_rule(g, solution_vector(inst, sol))
    return out


def _check_barrier_rule(g: Graph, x: np.ndarray) -> list[str]:
    blocked = blocked_barriers(g, x)
    if not blocked:
        return []
    bs = barriers(g)
    sinks = np.array([g.root_offset[s] for s in g.sink_ids], dtype=np.int64)
    out = []
    for j in blocked:
        e = bs.sinks[j]
        owner = bs.owner(x[e])
        bad = e[np.isin(owner, blocked)]
        if not bad.size:
            continue
        e0 = int(bad[0])
        k = int(np.searchsorted(sinks, e0, side="right")) - 1
        sink = g.sink_ids[k]
        lab = g.label_names(x[[e0]])[0]
        out.append(
            f"barrier rule: barrier {bs.ids[j]!r} waits for {bad.size} sink element(s) carrying "
            "labels of a barrier that cannot be set before it (its own or one waiting for it), "
            f"e.g. sink {sink!r} element "
            f"{e0 - int(sinks[k])} labelled {lab!r} (a barrier's labels exist only once all "
            "its inputs are set)"
        )
    return out


def _check_shapes(inst: LayoutInstance, sol: LayoutSolution) -> list[str]:
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


def terms(inst: LayoutInstance, out_of_time: Callable[[], None] = lambda: None) -> Terms:
    """Reduce every pair position to a constant, a unary or a binary term over sink elements.

    A sink element facing a barrier's label that the barrier depends on can never agree with it
    (the barrier rule): that position is dropped, not a unary term. Computed once per instance
    (the solvers, the bound and the harness's verification share it); read-only arrays.
    `out_of_time()` is called between pairs and may raise (a solver's deadline)."""
    g = inst.graph
    got = getattr(g, "_terms", None)
    if got is None:
        got = g._terms = _build_terms(inst, out_of_time)  # type: ignore[attr-defined]
        for a in (got.unary_e, got.unary_l, got.unary_w, got.bin_e, got.bin_f, got.bin_w):
            a.flags.writeable = False
    return got


@dataclass(frozen=True, eq=False)
class _Positions:
    """One pair's positions by kind: origins, which side is a sink element, fixed agreements,
    and the one-sided positions (sink element, the fixed label it faces, allowed by the rule)."""

    oa: np.ndarray
    ob: np.ndarray
    both: np.ndarray  # both sides sink elements
    agree_fixed: int  # both sides fixed and equal
    touching: int  # at least one side a sink element
    one_sided: tuple[tuple[np.ndarray, np.ndarray, np.ndarray], ...]  # (element, label, ok)

    @property
    def attainable(self) -> int:
        """Positions that can agree at best: fixed agreements, and those touching a sink that
        the barrier rule allows."""
        banned = sum(int(ok.size - np.count_nonzero(ok)) for _, _, ok in self.one_sided)
        return self.agree_fixed + self.touching - banned


def _positions(g: Graph, p: Pair) -> _Positions:
    n = g.num_sink_elements
    fixed = g.fixed_labels
    oa, ob = g.flat_origin(p.a), g.flat_origin(p.b)
    sa, sb = oa < n, ob < n
    ff = ~sa & ~sb
    agree_fixed = int(np.count_nonzero(fixed[oa[ff] - n] == fixed[ob[ff] - n]))
    one_sided = []
    for s_side, o_side, o_other in ((sa & ~sb, oa, ob), (sb & ~sa, ob, oa)):
        e, lab = o_side[s_side], fixed[o_other[s_side] - n]
        one_sided.append((e, lab, ~barrier_banned(g, e, lab)))  # banned: can never agree
    touching = int(ff.size - np.count_nonzero(ff))
    return _Positions(oa, ob, sa & sb, agree_fixed, touching, tuple(one_sided))


def _build_terms(inst: LayoutInstance, out_of_time: Callable[[], None]) -> Terms:
    g = inst.graph
    n = g.num_sink_elements
    const = 0.0
    ue, ul, uw, be, bf, bw = [], [], [], [], [], []
    per_pair = []
    for p in inst.pairs:
        out_of_time()
        pos = _positions(g, p)
        oa, ob, ss = pos.oa, pos.ob, pos.both
        same = ss & (oa == ob)
        const += p.value * (pos.agree_fixed + int(np.count_nonzero(same)))
        per_pair.append(p.value * pos.attainable)
        if p.value == 0:
            continue
        for e, lab, ok in pos.one_sided:
            ue.append(e[ok])
            ul.append(lab[ok])
            uw.append(np.full(int(np.count_nonzero(ok)), p.value))
        dif = ss & (oa != ob)
        a, b = oa[dif], ob[dif]
        be.append(np.minimum(a, b))
        bf.append(np.maximum(a, b))
        bw.append(np.full(a.size, p.value))
    ue_, ul_, uw_ = _aggregate(ue, ul, uw, out_of_time)
    be_, bf_, bw_ = _aggregate(be, bf, bw, out_of_time)
    return Terms(n, const, ue_, ul_, uw_, be_, bf_, bw_, tuple(per_pair))


def _aggregate(
    xs: list[np.ndarray],
    ys: list[np.ndarray],
    ws: list[np.ndarray],
    out_of_time: Callable[[], None] = lambda: None,
):
    """Merge duplicate (x, y) keys, summing their weights; sorted by (x, y)."""
    out_of_time()
    if not xs:
        e = np.empty(0, dtype=np.int64)
        return e, e.copy(), np.empty(0)
    x, y, w = np.concatenate(xs), np.concatenate(ys), np.concatenate(ws)
    out_of_time()
    if x.size == 0:
        return x.astype(np.int64), y.astype(np.int64), w.astype(float)
    span = int(y.max()) + 1 if y.size else 1
    if int(x.max()) < (2**62) // max(span, 1) and int(min(x.min(), y.min())) >= 0:
        order = np.argsort(x * span + y, kind="stable")  # one int64 key: much faster than lexsort
    else:
        order = np.lexsort((y, x))
    out_of_time()
    x, y, w = x[order], y[order], w[order]
    out_of_time()
    start = np.ones(x.size, dtype=bool)
    start[1:] = (x[1:] != x[:-1]) | (y[1:] != y[:-1])
    idx = np.flatnonzero(start)
    return x[idx], y[idx], np.add.reduceat(w, idx)


def upper_bound(inst: LayoutInstance) -> float:
    """Every position touching a sink agrees at best (unless the barrier rule forbids it);
    positions between fixed labels are known. Reuses `terms` when built, else counts only."""
    g = inst.graph
    got = getattr(g, "_terms", None)
    if got is not None:
        return float(sum(got.per_pair))
    return float(sum(p.value * _positions(g, p).attainable for p in inst.pairs))


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

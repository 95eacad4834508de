"""Allocation packing (static memory planning): give every buffer a byte offset, minimise the peak.

A buffer occupies addresses [offset, offset + size) during time steps [start, end] (inclusive). Two
buffers whose lifetimes overlap must not overlap in address. Peak = max(offset + size).

Concurrent lifetimes (several streams or cores) are not intervals: such an instance lists its
`conflicts`, the pairs of buffers that may be live at once, instead of start and end steps
(`problems.allocation_conflicts`); solvers declare whether they take them (`supports`).
"""

from __future__ import annotations

import gc
import heapq
import math
import time
from bisect import bisect_left, insort
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from operator import attrgetter
from typing import Any

import numpy as np

from tensorplan.problems import allocation_conflicts as ac
from tensorplan.problems.core import (
    MAX_INT,
    MAX_TOTAL,
    InstanceError,
    Kept,
    MismatchError,
    Problem,
    Result,
    Status,
    array,
    check_problem_field,
    heuristic_result,
    ident,
    integer,
    known_fields,
    obj,
    positive_int,
    req,
    type_name,
    unique_ids,
)


@dataclass(frozen=True)
class Buffer:
    id: str
    size: int
    start: int
    end: int

    @property
    def duration(self) -> int:
        return self.end - self.start + 1


@dataclass(frozen=True)
class AllocationInstance:
    buffers: tuple[Buffer, ...]
    alignment: int = 1
    capacity: int | None = None
    name: str | None = None
    conflicts: ac.Pairs | None = None
    """None: buffers conflict when their [start, end] steps overlap. Else the pairs (i, j) of
    buffer indices, i < j, that may be live at once (concurrent lifetimes); start and end are
    then unused (0). Any order of a pair and repeats are accepted and normalised. Pairs made of
    vector clocks (`allocation_conflicts.from_clocks`) keep them, and the JSON then gives each
    buffer its clocks instead of listing the pairs."""

    def __post_init__(self) -> None:
        if self.conflicts is not None:
            try:
                pairs = ac.normalise(self.conflicts, len(self.buffers))
            except (ValueError, TypeError) as err:  # "conflicts[k]: why"
                where, _, why = str(err).partition(": ")
                raise InstanceError(where if why else "conflicts", why or str(err)) from None
            object.__setattr__(self, "conflicts", pairs)
            if pairs.clocks is not None and len(pairs.clocks.starts) != len(self.buffers):
                raise InstanceError(
                    "conflicts",
                    f"made of {len(pairs.clocks.starts)} buffers' clocks, for "
                    f"{len(self.buffers)} buffers",
                )
        if self.alignment <= 0:
            raise InstanceError("alignment", f"must be a positive integer, got {self.alignment}")
        if self.capacity is not None and self.capacity <= 0:
            raise InstanceError("capacity", f"must be a positive integer, got {self.capacity}")
        # one quick pass over all buffers; the loops that name the first bad one run only then
        if not all(not (b.size <= 0 or b.end < b.start) for b in self.buffers):
            for i, b in enumerate(self.buffers):
                if b.size <= 0:
                    raise InstanceError(
                        f"buffers[{i}].size", f"must be a positive integer, got {b.size}"
                    )
                if b.end < b.start:
                    raise InstanceError(
                        f"buffers[{i}].end", f"end {b.end} is before start {b.start}"
                    )
        ids = [b.id for b in self.buffers]
        if len(set(ids)) != len(ids):
            unique_ids(ids, "buffers")
        a = self.alignment
        total = sum(map(attrgetter("size"), self.buffers))
        if total + len(self.buffers) * (a - 1) > MAX_TOTAL:  # else rounding cannot pass it
            total = sum(-(-b.size // a) * a for b in self.buffers)
            if total > MAX_TOTAL:
                rounded = f" (each rounded up to the alignment {a})" if a > 1 else ""
                raise InstanceError(
                    "buffers",
                    f"the sizes add up to {total}{rounded}, more than 2**53 = {MAX_TOTAL}: "
                    "stacking every buffer bounds the peak, and solvers compute with that bound "
                    "(the MIP back-ends in doubles, exact to 2**53 only)",
                )

    def index(self) -> dict[str, int]:
        return {b.id: i for i, b in enumerate(self.buffers)}

    def uncapped(self) -> AllocationInstance:
        """The same instance without its capacity (what searches pack before they compare the
        peak with it); every other field, the conflicts included, stays."""
        return self if self.capacity is None else replace(self, capacity=None)

    @property
    def concurrent(self) -> bool:
        """True when lifetimes are given as a conflict graph, not as intervals."""
        return self.conflicts is not None


@dataclass(frozen=True)
class AllocationSolution:
    """Offsets in the order of `instance.buffers`."""

    offsets: tuple[int, ...]


TOP_FIELDS = ("problem", "name", "buffers", "alignment", "capacity", "conflicts")
BUFFER_FIELDS = ("id", "size", "start", "end")
CONCURRENT_BUFFER_FIELDS = ("id", "size")


def parse_instance(data: Mapping[str, Any]) -> AllocationInstance:
    """The instance a JSON document describes, or the `InstanceError` naming its first bad field.

    Whole columns are validated at once first (10^6 buffers in about a second); input that fast
    path does not accept is read field by field, which names the first problem exactly."""
    with _no_gc():
        fast = parse_instance_columns(data)
        return fast if fast is not None else parse_instance_fields(data)


def parse_instance_columns(data: Mapping[str, Any]) -> AllocationInstance | None:
    """The instance when every buffer is a JSON object of exactly id, size, start, end with a
    string or integer id, distinct ids, integer values within 2**62, positive sizes and start <=
    end, each checked on a whole column; else None. Top-level fields go through the same readers
    as `parse_instance_fields`, in the same order, so any error it raises is that one's."""
    name = check_problem_field(data, "allocation")
    known_fields(data, "", TOP_FIELDS)
    raw = array(req(data, "buffers", ""), "buffers")
    if "conflicts" in data:
        return None
    if not (set(map(type, raw)) <= {dict} and set(map(len, raw)) <= {len(BUFFER_FIELDS)}):
        return None
    try:  # four fields each, all four present: exactly the known fields
        ids, *cols = ([item[key] for item in raw] for key in BUFFER_FIELDS)
    except KeyError:
        return None
    id_types = set(map(type, ids))
    if not id_types <= {str, int}:
        return None
    if int in id_types:
        try:
            ids = list(map(str, ids))  # as `ident` keys them
        except ValueError:  # an integer too long to print: the field reader says where
            return None
    arrays = [_int64(col) for col in cols]
    size, start, end = arrays
    if size is None or start is None or end is None:
        return None
    if len(ids) and any(a.min() < -MAX_INT or a.max() > MAX_INT for a in (size, start, end)):
        return None
    if (size <= 0).any() or (end < start).any() or len(set(ids)) != len(ids):
        return None
    alignment = positive_int(data.get("alignment", 1), "alignment")
    cap = data.get("capacity")
    capacity = None if cap is None else positive_int(cap, "capacity")
    inst = AllocationInstance(tuple(map(Buffer, ids, *cols)), alignment, capacity, name)
    _remember(inst, (size, start, end))
    return inst


def parse_instance_fields(data: Mapping[str, Any]) -> AllocationInstance:
    """The reference reader: field by field, raising on the first bad one."""
    name = check_problem_field(data, "allocation")
    known_fields(data, "", TOP_FIELDS)
    raw = array(req(data, "buffers", ""), "buffers")
    concurrent = "conflicts" in data
    # vector clocks: the first buffer's start is a list (then every buffer's must be)
    clocked = not concurrent and bool(raw) and isinstance(raw[0], dict)
    clocked = clocked and isinstance(raw[0].get("start"), list)
    buffers = []
    starts: list[list[int]] = []
    ends: list[list[int]] = []
    for i, item in enumerate(raw):
        w = f"buffers[{i}]"
        item = obj(item, w)
        if concurrent and ("start" in item or "end" in item):
            key = "start" if "start" in item else "end"
            raise InstanceError(
                f"{w}.{key}", "lifetimes are given by `conflicts`: a buffer has no start or end"
            )
        item = known_fields(item, w, CONCURRENT_BUFFER_FIELDS if concurrent else BUFFER_FIELDS)
        buffer = Buffer(
            id=ident(req(item, "id", w), f"{w}.id"),
            size=positive_int(req(item, "size", w), f"{w}.size"),
            start=0 if concurrent or clocked else integer(req(item, "start", w), f"{w}.start"),
            end=0 if concurrent or clocked else integer(req(item, "end", w), f"{w}.end"),
        )
        if clocked:
            d = len(starts[0]) if starts else None
            starts.append(_clock(req(item, "start", w), f"{w}.start", d))
            ends.append(_clock(req(item, "end", w), f"{w}.end", len(starts[0])))
            back = [c for c, (a, b) in enumerate(zip(starts[-1], ends[-1], strict=True)) if b < a]
            if back:
                c = back[0]
                raise InstanceError(
                    f"{w}.end[{c}]",
                    f"the clock goes back: end {ends[-1][c]} is before start {starts[-1][c]}",
                )
        buffers.append(buffer)
    alignment = positive_int(data.get("alignment", 1), "alignment")
    cap = data.get("capacity")
    capacity = None if cap is None else positive_int(cap, "capacity")
    conflicts = _conflicts(data["conflicts"], buffers) if concurrent else None
    if clocked:  # (duplicate ids: the instance names the first)
        conflicts = ac.from_clocks(np.array(starts, dtype=np.int64), np.array(ends, dtype=np.int64))
    return AllocationInstance(tuple(buffers), alignment, capacity, name, conflicts)


def _clock(value: Any, where: str, length: int | None) -> list[int]:
    """A vector clock: a non-empty list of integers, of `length` when given (the first
    buffer's), each within 2**62."""
    if not isinstance(value, list):
        expected = "a vector clock (a list of integers), as the first buffer's start"
        raise InstanceError(where, f"must be {expected}, got {type_name(value)}")
    if not value:
        raise InstanceError(where, "a vector clock needs at least one component")
    if length is not None and len(value) != length:
        raise InstanceError(
            where, f"has {len(value)} components; the first buffer's clocks have {length}"
        )
    return [integer(x, f"{where}[{c}]") for c, x in enumerate(value)]


def _conflicts(raw: Any, buffers: Sequence[Buffer]) -> ac.Pairs:
    """The `conflicts` field: a list of [id, id] pairs of distinct, known buffers."""
    pairs = array(raw, "conflicts")
    unique_ids([b.id for b in buffers], "buffers")
    index = {b.id: i for i, b in enumerate(buffers)}
    out = np.empty((len(pairs), 2), dtype=np.int64)
    for k, pair in enumerate(pairs):
        w = f"conflicts[{k}]"
        if not isinstance(pair, list) or len(pair) != 2:
            raise InstanceError(w, f"must be a pair [id, id], got {pair!r}"[:200])
        ids = [ident(x, f"{w}[{m}]") for m, x in enumerate(pair)]
        for m, x in enumerate(ids):
            if x not in index:
                raise MismatchError(f"{w}[{m}]", f"no buffer has id {x!r}")
        if ids[0] == ids[1]:
            raise InstanceError(w, f"a buffer cannot conflict with itself ({ids[0]!r})")
        out[k] = index[ids[0]], index[ids[1]]
    return ac.normalise(out, len(buffers))


def instance_to_json(inst: AllocationInstance) -> dict[str, Any]:
    out: dict[str, Any] = {"problem": "allocation"}
    if inst.name:
        out["name"] = inst.name
    clocks = inst.conflicts.clocks if inst.conflicts is not None else None
    if clocks is not None:
        starts, ends = clocks.starts.tolist(), clocks.ends.tolist()
        out["buffers"] = [
            {"id": b.id, "size": b.size, "start": s, "end": e}
            for b, s, e in zip(inst.buffers, starts, ends, strict=True)
        ]
    elif inst.conflicts is not None:
        out["buffers"] = [{"id": b.id, "size": b.size} for b in inst.buffers]
    else:
        out["buffers"] = [
            {"id": b.id, "size": b.size, "start": b.start, "end": b.end} for b in inst.buffers
        ]
    out["alignment"] = inst.alignment
    out["capacity"] = inst.capacity
    if inst.conflicts is not None and clocks is None:
        ids = [b.id for b in inst.buffers]
        out["conflicts"] = [[ids[i], ids[j]] for i, j in inst.conflicts.array.tolist()]
    return out


def parse_solution(data: Mapping[str, Any], inst: AllocationInstance) -> AllocationSolution:
    """The offsets a solution document gives, in buffer order. One offset per buffer, every one
    an integer within 2**62, is taken in one pass; anything else is read key by key, which names
    the first unknown id, bad offset or missing buffer."""
    data = obj(data, "solution")
    known_fields(data, "solution", ("offsets",))
    raw = obj(req(data, "offsets", "solution"), "solution.offsets")
    ids = [b.id for b in inst.buffers]
    if type(raw) is dict and len(raw) == len(ids) and set(map(type, raw.values())) <= {int}:
        values = list(raw.values())
        if not values or (min(values) >= -MAX_INT and max(values) <= MAX_INT):
            if list(raw) == ids:  # written in buffer order, as `solution_to_json` does
                return AllocationSolution(tuple(values))
            try:  # as many keys as buffers, each a buffer's id: exactly one offset for each
                return AllocationSolution(tuple(map(raw.__getitem__, ids)))
            except KeyError:
                pass
    return parse_solution_fields(data, inst)


def parse_solution_fields(data: Mapping[str, Any], inst: AllocationInstance) -> AllocationSolution:
    """The reference reader of a solution: key by key, raising on the first bad one."""
    data = obj(data, "solution")
    known_fields(data, "solution", ("offsets",))
    raw = obj(req(data, "offsets", "solution"), "solution.offsets")
    index = inst.index()
    offsets: list[int | None] = [None] * len(inst.buffers)
    for key, value in raw.items():
        if key not in index:
            raise MismatchError(f"solution.offsets.{key}", "no buffer has this id")
        offsets[index[key]] = integer(value, f"solution.offsets.{key}")
    missing = [inst.buffers[i].id for i, o in enumerate(offsets) if o is None]
    if missing:
        raise MismatchError("solution.offsets", f"no offset for buffer(s) {', '.join(missing[:5])}")
    return AllocationSolution(tuple(o for o in offsets if o is not None))


def solution_to_json(inst: AllocationInstance, sol: AllocationSolution) -> dict[str, Any]:
    return {"offsets": dict(zip([b.id for b in inst.buffers], sol.offsets, strict=True))}


def peak(inst: AllocationInstance, sol: AllocationSolution) -> int:
    """The objective: the highest address any buffer reaches."""
    return max((o + b.size for o, b in zip(sol.offsets, inst.buffers, strict=True)), default=0)


COMPILED_CHECK_MIN = 2_000
"""From this many buffers on, `check` runs the compiled sweep (below it the Python sweep takes
a few milliseconds, about what loading the compiled one costs once)."""


def check(inst: AllocationInstance, sol: AllocationSolution) -> list[str]:
    """Independent feasibility check by a sweep over time; returns named violations.

    Among the buffers live at once, kept sorted by offset, a new buffer can only collide with its
    neighbours in address order, so each insertion checks two ranges. Large instances take the
    compiled sweep (`check_compiled`), the same violations in the same order; numbers beyond
    int64 arithmetic, and small instances, the pure-Python one (`check_reference`).
    Concurrent lifetimes: every conflicting pair is checked (`check_concurrent`).
    """
    if inst.conflicts is not None:
        return check_concurrent(inst, sol)
    if len(sol.offsets) == len(inst.buffers) and len(inst.buffers) >= COMPILED_CHECK_MIN:
        out = check_compiled(inst, sol)
        if out is not None:
            return out
    return check_reference(inst, sol)


def check_compiled(inst: AllocationInstance, sol: AllocationSolution) -> list[str] | None:
    """`check_reference`'s violations, with the sweep compiled (`allocation_kernels`): 10^6
    buffers in well under a second. None when a number is not a Python int or offset + size
    could leave int64; the messages are formatted from the instance's own values."""
    bs, offsets, a = inst.buffers, sol.offsets, inst.alignment
    if len(offsets) != len(bs):
        return [f"length: {len(offsets)} offsets for {len(bs)} buffers"]
    cols, off = columns(inst), _int64(offsets)
    if cols is None or off is None or type(a) is not int or not 0 < a < 2**63:
        return None
    size, start, end = cols
    if len(bs) and max(int(off.max()), -int(off.min())) + int(size.max()) >= 2**63:
        return None
    from tensorplan.problems import allocation_kernels  # numba: loaded only when needed

    out: list[str] = []
    flagged = (off < 0) | (off % a != 0) if a > 1 else off < 0
    for i in np.flatnonzero(flagged).tolist():
        o, b = offsets[i], bs[i]
        if o < 0:
            out.append(f"negative offset: buffer {b.id} at {o}")
        if o % a:
            out.append(f"bad alignment: buffer {b.id} at {o} is not a multiple of {a}")
    stop, earlier, later = allocation_kernels.overlaps(off, size, start, end)
    for j, i in zip(earlier.tolist(), later.tolist(), strict=True):
        other, b = bs[j], bs[i]
        lo_i, lo_j = offsets[i], offsets[j]
        out.append(
            f"overlap: buffers {other.id} and {b.id} share addresses "
            f"[{max(lo_i, lo_j)}, {min(lo_i + b.size, lo_j + other.size)}) "
            f"at time {max(b.start, other.start)}"
        )
    if inst.capacity is not None and bs:
        top = int(stop.max())
        if top > inst.capacity:
            out.append(f"capacity exceeded: peak {top} > capacity {inst.capacity}")
    return out


def check_concurrent(inst: AllocationInstance, sol: AllocationSolution) -> list[str]:
    """Violations of a concurrent instance: negative or misaligned offsets, any conflicting
    pair sharing an address, the capacity. The pairs are screened in numpy when the numbers
    fit int64 (10^7 pairs in a fraction of a second); what it finds, and anything larger, is
    checked in exact Python integers."""
    bs, offsets, a = inst.buffers, sol.offsets, inst.alignment
    if len(offsets) != len(bs):
        return [f"length: {len(offsets)} offsets for {len(bs)} buffers"]
    out: list[str] = []
    for o, b in zip(offsets, bs, strict=True):
        if o < 0:
            out.append(f"negative offset: buffer {b.id} at {o}")
        if o % a:
            out.append(f"bad alignment: buffer {b.id} at {o} is not a multiple of {a}")
    pairs: Iterable[tuple[int, int]] = inst.conflicts or ()
    o64, s64 = _int64(offsets), _int64([b.size for b in bs])
    if (
        inst.conflicts is not None
        and o64 is not None
        and s64 is not None
        and (o64 < 2**62).all()
        and (s64 < 2**62).all()
    ):  # o + s cannot overflow: screen in numpy
        pairs = ac.overlapping(s64, o64, inst.conflicts).tolist()
    for i, j in pairs:
        lo_i, lo_j = offsets[i], offsets[j]
        hi_i, hi_j = lo_i + bs[i].size, lo_j + bs[j].size
        if lo_i < hi_j and lo_j < hi_i:
            out.append(
                f"overlap: conflicting buffers {bs[i].id} and {bs[j].id} share addresses "
                f"[{max(lo_i, lo_j)}, {min(hi_i, hi_j)})"
            )
    if inst.capacity is not None and bs:
        top = peak(inst, sol)
        if top > inst.capacity:
            out.append(f"capacity exceeded: peak {top} > capacity {inst.capacity}")
    return out


def check_reference(inst: AllocationInstance, sol: AllocationSolution) -> list[str]:
    """The checker's sweep in plain Python over exact integers: the reference `check_compiled`
    is held to, and the path of small instances and of numbers beyond int64."""
    out: list[str] = []
    if len(sol.offsets) != len(inst.buffers):
        return [f"length: {len(sol.offsets)} offsets for {len(inst.buffers)} buffers"]
    for o, b in zip(sol.offsets, inst.buffers, strict=True):
        if o < 0:
            out.append(f"negative offset: buffer {b.id} at {o}")
        if o % inst.alignment:
            out.append(f"bad alignment: buffer {b.id} at {o} is not a multiple of {inst.alignment}")
    order = sorted(range(len(inst.buffers)), key=lambda i: inst.buffers[i].start)
    live: list[tuple[int, int, int]] = []  # (offset, end address, buffer index), sorted
    ending: list[tuple[int, tuple[int, int, int]]] = []  # (end time, live entry)
    for i in order:
        b = inst.buffers[i]
        while ending and ending[0][0] < b.start:
            live.pop(bisect_left(live, heapq.heappop(ending)[1]))
        entry = (sol.offsets[i], sol.offsets[i] + b.size, i)
        pos = bisect_left(live, entry)
        for j in (pos - 1, pos):
            if 0 <= j < len(live) and live[j][0] < entry[1] and entry[0] < live[j][1]:
                other = inst.buffers[live[j][2]]
                out.append(
                    f"overlap: buffers {other.id} and {b.id} share addresses "
                    f"[{max(entry[0], live[j][0])}, {min(entry[1], live[j][1])}) "
                    f"at time {max(b.start, other.start)}"
                )
        insort(live, entry)
        heapq.heappush(ending, (b.end, entry))
    if inst.capacity is not None and inst.buffers:
        top = peak(inst, sol)
        if top > inst.capacity:
            out.append(f"capacity exceeded: peak {top} > capacity {inst.capacity}")
    return out


Columns = tuple[np.ndarray, np.ndarray, np.ndarray]

_COLUMNS: Kept[Columns | None] = Kept()


def columns(inst: AllocationInstance) -> Columns | None:
    """(size, start, end) of every buffer as int64 arrays, kept while `inst` lives (the parser
    hands over the ones it validated); None when some value is not a Python int within int64."""
    hit = _COLUMNS.peek(inst)
    if hit is not None:
        return hit[0]
    bs = inst.buffers
    size, start, end = (_int64([getattr(b, f) for b in bs]) for f in ("size", "start", "end"))
    cols = None if size is None or start is None or end is None else (size, start, end)
    _remember(inst, cols)
    return cols


def _remember(inst: AllocationInstance, cols: Columns | None) -> None:
    for col in cols or ():
        col.flags.writeable = False  # shared by every caller: nobody may change them
    _COLUMNS.put(inst, cols)


def _int64(values: Sequence[Any]) -> np.ndarray | None:
    """`values` as an int64 array when every one is a Python int (not a bool) that fits."""
    if not set(map(type, values)) <= {int}:
        return None
    try:
        return np.fromiter(values, dtype=np.int64, count=len(values))
    except OverflowError:
        return None


@contextmanager
def _no_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector while 10^6 small acyclic objects are built: it would
    otherwise rescan all of them again and again (building 10^6 buffers five times slower)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def live_profile(inst: AllocationInstance) -> list[tuple[int, int]]:
    """(time, total size live) at every time the live set changes (a buffer starts or has just
    ended), in time order: the live total can only peak where a buffer starts.

    One numpy sort of the 2n events (10^6 buffers in a fraction of a second); sizes or times too
    large for int64 arithmetic take the same sweep in plain Python. Concurrent lifetimes have
    no time axis: there the profile is empty."""
    bs = inst.buffers
    if inst.conflicts is not None:
        return []
    if bs and sum(b.size for b in bs) < 2**62 and all(-(2**62) < x < 2**62 for x in _ends(bs)):
        n = len(bs)
        size = np.fromiter((b.size for b in bs), dtype=np.int64, count=n)
        times = np.concatenate(
            [
                np.fromiter((b.start for b in bs), dtype=np.int64, count=n),
                np.fromiter((b.end + 1 for b in bs), dtype=np.int64, count=n),
            ]
        )
        order = np.argsort(times, kind="stable")
        t = times[order]
        total = np.cumsum(np.concatenate([size, -size])[order])
        last = np.append(t[1:] != t[:-1], True)  # the total after all events at that time
        return list(zip(t[last].tolist(), total[last].tolist(), strict=True))
    events: list[tuple[int, int]] = []
    for b in inst.buffers:
        events.append((b.start, b.size))
        events.append((b.end + 1, -b.size))
    events.sort()
    out: list[tuple[int, int]] = []
    level = 0
    for k, (at, delta) in enumerate(events):
        level += delta
        if k + 1 == len(events) or events[k + 1][0] != at:
            out.append((at, level))
    return out


def _ends(bs: tuple[Buffer, ...]) -> tuple[int, int]:
    """The smallest start and the largest end + 1 (both bound every event time)."""
    return min(b.start for b in bs), max(b.end for b in bs) + 1


def grain(inst: AllocationInstance) -> int:
    """A step every optimal peak is a multiple of, so a bound rounds up to it and a search
    target down: offsets are multiples of the alignment `a` and sizes of their gcd `g`, so every
    peak is a multiple of gcd(a, g); when `a` divides `g`, pushing each buffer down onto one
    below (or 0) keeps every offset a sum of sizes, so some optimum is a multiple of `g`.
    MiniMalloc's traces are in 1 KiB steps: a target between two steps is the lower one."""
    g = math.gcd(*(b.size for b in inst.buffers))
    a = inst.alignment
    return max(1, g if g % a == 0 else math.gcd(a, g))


def lower_bound(inst: AllocationInstance) -> int:
    """Max over time of the sum of live sizes: no placement can beat it. With an alignment,
    also the live sizes rounded up to it, less one rounding (the topmost buffer's): live buffers
    stack at aligned offsets, so each one below the top takes its rounded size.
    Concurrent lifetimes: the same for a heavy clique of the conflict graph (`clique_bound`)."""
    if inst.conflicts is not None:
        return clique_bound(inst)[0]
    plain = max((total for _, total in live_profile(inst)), default=0)
    a = inst.alignment
    if a == 1 or all(b.size % a == 0 for b in inst.buffers):
        return plain
    rounded = AllocationInstance(
        tuple(replace(b, size=-(-b.size // a) * a) for b in inst.buffers), 1
    )
    return max(plain, max((t for _, t in live_profile(rounded)), default=0) - (a - 1))


def conflict_graph(inst: AllocationInstance) -> ac.Graph:
    """The conflict graph of a concurrent instance (compressed rows, built once per set of
    pairs: `ac.Pairs.graph`); a ValueError for intervals."""
    if inst.conflicts is None:
        raise ValueError("interval lifetimes: the conflict graph is implied by start and end")
    return inst.conflicts.graph(len(inst.buffers))


CHECK_S_PER_BUFFER, CHECK_S_PER_PAIR, COMPILED_CHECK_S_PER_PAIR = 2.5e-6, 6e-8, 1.5e-8
"""What the harness's verification takes, kept out of a solver's time limit (`check_reserve`):
per buffer, the compiled interval check, peak and lower bound (1.5 us per buffer at 10^6 on a
loaded machine); per conflicting pair, the concurrent checker's screen: in numpy 20-38 ns a
pair (3-9 million pairs in a solve, 0.06-0.34 s), compiled 4 ns (`allocation_kernels.
overlap_mask`, when it is compiled or cached: 0.043 s at 10 million pairs)."""

CLIQUE_RESERVE_S, CLIQUE_S_PER_PAIR = 0.4, 1e-8
"""What the harness's clique bound adds while the instance's heavy clique is not grown yet
(`heavy_clique`): its work budget (0.29-0.32 s measured at 5,000 buffers and 3-10 million
pairs) and the neighbourhood weights (per pair, compiled)."""


CLIQUE_BOUND_S = 0.2
"""The time the harness's clique bound takes at most (`clique_bound`'s default): beyond the
exact clique, the work of the instance's `heavy_clique` (the heuristics' clique was grown with
half as much again, 0.3 s; the harness, computing it when no solver did, then went over a 1 s
limit on 9-10 million pairs)."""


def check_reserve(inst: AllocationInstance) -> float:
    """Seconds a solver leaves of its limit for the harness to check its packing and bound it
    (less once the heavy clique the bound reads is grown: a solver may ask again then)."""
    pairs = len(inst.conflicts or ())
    per_pair = COMPILED_CHECK_S_PER_PAIR if pairs and ac.screen_compiled() else CHECK_S_PER_PAIR
    out = CHECK_S_PER_BUFFER * len(inst.buffers) + per_pair * pairs
    if _clique_pending(inst):
        out += CLIQUE_RESERVE_S + CLIQUE_S_PER_PAIR * pairs
    return out


def _clique_pending(inst: AllocationInstance) -> bool:
    """Whether the harness's bound will grow the instance's heavy clique (a concurrent instance
    beyond the exact clique, its clique not grown yet)."""
    beyond = bool(inst.conflicts) and len(inst.buffers) > ac.EXACT_CLIQUE_MAX
    return beyond and _HEAVY.peek(inst) is None


def solve_reserve(inst: AllocationInstance, began: float, time_limit: float) -> float:
    """`check_reserve` for a solver that began at `began` (a clock time) with `time_limit`: when
    the heavy clique the harness's bound reads is still to grow and its share of the reserve
    fits, the clique is grown now, in that share, and only the check's share is kept (else a
    1,000-buffer solve at 1 s kept 0.4 s of its second for a clique grown in 0.03 s)."""
    reserve = check_reserve(inst)
    if _clique_pending(inst) and time.perf_counter() + reserve < began + time_limit:
        heavy_clique(inst)
        reserve = check_reserve(inst)
    return reserve


def sizes(inst: AllocationInstance) -> np.ndarray:
    """Buffer sizes as an int64 array (an object array beyond int64)."""
    values = _int64([b.size for b in inst.buffers])
    return values if values is not None else np.array([b.size for b in inst.buffers], object)


def clique_bound(inst: AllocationInstance, time_limit: float = CLIQUE_BOUND_S) -> tuple[int, bool]:
    """(bound, exact) for a concurrent instance: the heaviest clique of the conflict graph (every
    member is live with every other, so they stack), with sizes rounded to the alignment as in
    `lower_bound`. `exact` says the clique is a proven maximum (searched within `time_limit`);
    either way the bound is sound."""
    hit = _CLIQUES.peek(inst)
    if hit is not None and (hit[0][1][1] or hit[0][0] >= time_limit):
        return hit[0][1]  # the same search, or a longer or finished one, was done already
    g = conflict_graph(inst)
    size = sizes(inst)
    if g.n > ac.EXACT_CLIQUE_MAX and time_limit <= CLIQUE_BOUND_S:
        # max_clique would only grow greedy cliques, with no more work than the shared one
        members, exact = heavy_clique(inst).tolist(), False
    else:
        members, exact = ac.max_clique(g, size, time_limit)
    bound = ac.rounded_clique_bound(size, members, inst.alignment)
    out = max(bound, max((b.size for b in inst.buffers), default=0)), exact
    _CLIQUES.put(inst, (time_limit, out))
    return out


_CLIQUES: Kept[tuple[float, tuple[int, bool]]] = Kept()
"""`clique_bound` per live instance, with the time its search had: the harness, the models and
the checker's bound ask it for the same instance; the search is run once per time limit."""


def heavy_clique(inst: AllocationInstance) -> np.ndarray:
    """The members of a heavy clique of a concurrent instance's conflict graph
    (`allocation_conflicts.compiled_clique`, with `CLIQUE_BOUND_S`'s work). Kept while `inst`
    lives: the heuristics order buffers by it and stop at its bound, and the harness's bound
    reads it (`clique_bound`), so a solve grows it once (on 5,000 buffers and 3-9 million
    pairs, it was grown twice, 0.2-0.3 s each)."""
    return _HEAVY.get(inst, _heavy_clique)


def _heavy_clique(inst: AllocationInstance) -> np.ndarray:
    weights = sizes(inst).astype(np.int64)  # the instance's total is within 2**53
    work = int(CLIQUE_BOUND_S * ac.CLIQUE_UNITS_PER_S)
    return ac.compiled_clique(conflict_graph(inst), weights, work)


_HEAVY: Kept[np.ndarray] = Kept()
"""`heavy_clique` per live instance (`check_reserve` reads whether it is grown)."""


def saturating_product(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a * b elementwise (non-negative int64), saturating at the int64 maximum as OmniMalloc's
    sort keys do rather than wrapping around."""
    with np.errstate(over="ignore"):
        out = a * b
    big = a.astype(np.float64) * b >= 2.0**62
    if big.any():
        out[big] = np.iinfo(np.int64).max
    return out


def lower_parts(
    best: np.ndarray | None,
    best_peaks: np.ndarray,
    offsets: np.ndarray,
    peaks: np.ndarray,
    part: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Merge two packings part by part (parts: independent groups of buffers, `part` the group
    of each buffer): (offsets, part peaks, which buffers came from `offsets`) keeping each part
    where `offsets` is lower than `best` (None: nothing kept yet, take all); None when no part
    is lower. The heuristics keep their best packing of every part this way."""
    better = peaks < best_peaks if best is not None else np.ones(len(peaks), dtype=bool)
    if not better.any():
        return None
    taken = better[part]
    merged = offsets.copy() if best is None else np.where(taken, offsets, best)
    return merged, np.where(better, peaks, best_peaks), taken


CONCURRENT = frozenset({"conflicts"})
"""The feature a concurrent instance asks of a solver (`Solver.supports`)."""


def stacked(inst: AllocationInstance) -> AllocationSolution:
    """Every buffer on its own aligned slot: always a packing."""
    offs, top = [], 0
    for b in inst.buffers:
        offs.append(top)
        top += -(-b.size // inst.alignment) * inst.alignment
    return AllocationSolution(tuple(offs))


def upper_bound(inst: AllocationInstance) -> int:
    """Stacking every buffer on its own aligned slot is always conflict-free."""
    a = inst.alignment
    return sum(-(-b.size // a) * a for b in inst.buffers)


def packing_result(
    inst: AllocationInstance,
    name: str,
    offsets: np.ndarray,
    top: int,
    runtime: float,
    **stats: object,
) -> Result:
    """A heuristic's result: feasible with the packing when it fits the capacity (if any);
    otherwise `unknown` without a solution (the checker rejects a packing above capacity),
    saying by how much. Every allocation heuristic ends here."""
    if inst.capacity is not None and top > inst.capacity:
        return Result(
            name,
            Status.UNKNOWN,
            None,
            None,
            runtime,
            message=f"heuristic peak {top} exceeds capacity {inst.capacity}",
            stats=stats,
        )
    message = "" if inst.capacity is None else f"peak {top} fits capacity {inst.capacity}"
    sol = AllocationSolution(tuple(offsets.tolist()))
    return heuristic_result(name, top, sol, runtime, message=message, **stats)


PROBLEM = Problem(
    name="allocation",
    sense="min",
    instance_type=AllocationInstance,
    parse_instance=parse_instance,
    instance_to_json=instance_to_json,
    parse_solution=parse_solution,
    solution_to_json=solution_to_json,
    evaluate=peak,
    check=check,
    bound=lower_bound,
    size=lambda inst: len(inst.buffers),
    features=lambda inst: CONCURRENT if inst.conflicts is not None else frozenset(),
)

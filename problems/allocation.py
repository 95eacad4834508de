"""Allocation packing (static memory planning): give every buffer a byte offset, minimise the peak.

A buffer occupies addresses [offset, offset + size) during time steps [start, end] (inclusive). Two
buffers whose lifetimes overlap must not overlap in address. Peak = max(offset + size).
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from tensorplan.problems.core import (
    InstanceError,
    MismatchError,
    Problem,
    array,
    check_problem_field,
    ident,
    integer,
    known_fields,
    obj,
    positive_int,
    req,
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

    def __post_init__(self) -> None:
        if self.alignment <= 0:
            raise InstanceError("alignment", f"must be a positive integer, got {self.alignment}")
        if self.capacity is not None and self.capacity <= 0:
            raise InstanceError("capacity", f"must be a positive integer, got {self.capacity}")
        for i, b in enumerate(self.buffers):
            if b.size <= 0:
                raise InstanceError(
                    f"buffers[{i}].size", f"must be a positive integer, got {b.size}"
                )
            if b.end < b.start:
                raise InstanceError(f"buffers[{i}].end", f"end {b.end} is before start {b.start}")
        unique_ids([b.id for b in self.buffers], "buffers")

    def index(self) -> dict[str, int]:
        return {b.id: i for i, b in enumerate(self.buffers)}


@dataclass(frozen=True)
class AllocationSolution:
    """Offsets in the order of `instance.buffers`."""

    offsets: tuple[int, ...]


def parse_instance(data: Mapping[str, Any]) -> AllocationInstance:
    name = check_problem_field(data, "allocation")
    known_fields(data, "", ("problem", "name", "buffers", "alignment", "capacity"))
    raw = array(req(data, "buffers", ""), "buffers")
    buffers = []
    for i, item in enumerate(raw):
        w = f"buffers[{i}]"
        item = known_fields(obj(item, w), w, ("id", "size", "start", "end"))
        buffers.append(
            Buffer(
                id=ident(req(item, "id", w), f"{w}.id"),
                size=positive_int(req(item, "size", w), f"{w}.size"),
                start=integer(req(item, "start", w), f"{w}.start"),
                end=integer(req(item, "end", w), f"{w}.end"),
            )
        )
    alignment = positive_int(data.get("alignment", 1), "alignment")
    cap = data.get("capacity")
    capacity = None if cap is None else positive_int(cap, "capacity")
    return AllocationInstance(tuple(buffers), alignment, capacity, name)


def instance_to_json(inst: AllocationInstance) -> dict[str, Any]:
    out: dict[str, Any] = {"problem": "allocation"}
    if inst.name:
        out["name"] = inst.name
    out["buffers"] = [
        {"id": b.id, "size": b.size, "start": b.start, "end": b.end} for b in inst.buffers
    ]
    out["alignment"] = inst.alignment
    out["capacity"] = inst.capacity
    return out


def parse_solution(data: Mapping[str, Any], inst: AllocationInstance) -> AllocationSolution:
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
    return {"offsets": {b.id: o for b, o in zip(inst.buffers, sol.offsets, strict=True)}}


def peak(inst: AllocationInstance, sol: AllocationSolution) -> int:
    """The objective: the highest address any buffer reaches."""
    return max((o + b.size for o, b in zip(sol.offsets, inst.buffers, strict=True)), default=0)


def check(inst: AllocationInstance, sol: AllocationSolution) -> list[str]:
    """Independent feasibility check by a sweep over time; returns named violations.

    Among the buffers live at once, kept sorted by offset, a new buffer can only collide with its
    neighbours in address order, so each insertion checks two ranges.
    """
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


def live_profile(inst: AllocationInstance) -> list[tuple[int, int]]:
    """(time, total size live) at every time the live set changes (a buffer starts or has just
    ended), in time order: the live total can only peak where a buffer starts.

    One numpy sort of the 2n events (10^6 buffers in a fraction of a second); sizes or times too
    large for int64 arithmetic take the same sweep in plain Python."""
    bs = inst.buffers
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
    out, total = [], 0
    for k, (t, delta) in enumerate(events):
        total += delta
        if k + 1 == len(events) or events[k + 1][0] != t:
            out.append((t, total))
    return out


def _ends(bs: tuple[Buffer, ...]) -> tuple[int, int]:
    """The smallest start and the largest end + 1 (both bound every event time)."""
    return min(b.start for b in bs), max(b.end for b in bs) + 1


def lower_bound(inst: AllocationInstance) -> int:
    """Max over time of the sum of live sizes: no placement can beat it."""
    return max((total for _, total in live_profile(inst)), default=0)


def upper_bound(inst: AllocationInstance) -> int:
    """Stacking every buffer on its own aligned slot is always conflict-free."""
    a = inst.alignment
    return sum(-(-b.size // a) * a for b in inst.buffers)


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
)

"""The tight-window relaxation of an allocation instance and the extension of its packings.

Real traces rise to a peak and fall, and so do the tight generated instances: the packing has to
be perfect only around the peak, while away from it there is room to spare. Clipping every
buffer's lifetime to a window of steps around the peak gives a much smaller instance (the
*core*) whose packings are easy for `bb`, and which is a relaxation: any packing of the instance,
restricted to the buffers live in the window, packs the core under the same peak. So a proof
that the core does not fit under T is a proof for the instance, and a packing of the core,
kept for those buffers over their whole lifetimes, is extended to the rest by CP-SAT (`extend`),
one side of the window at a time (nothing outside the window is live on both sides). When a side
cannot be extended, the window grows on that side (`tight_window`), until it is the whole.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tensorplan.problems.allocation import AllocationInstance, AllocationSolution, Buffer

WINDOW_SLACK = 0.15
"""A window takes in every neighbouring step whose live total is within this share of the
target: where the slack is smaller, the core's packing would rarely leave room for the rest.
On tight seeds 0-79, 0.1, 0.15 and 0.2 all prove 78 of 80 within 10 s; with 0.15 the slowest
proof takes 4.1 s (7.0 s with 0.1), and tight-500-s15 is proven with each of bb's seeds 0-4."""


@dataclass(frozen=True)
class Window:
    """Steps [first, last] of an instance, and its core: `members[k]` (an index into the
    instance) is the core's buffer k, its lifetime clipped to the window."""

    first: int
    last: int
    members: tuple[int, ...]
    core: AllocationInstance


def tight_window(
    profile: Sequence[tuple[int, int]], target: int, left: int, right: int
) -> tuple[int, int, int] | None:
    """Profile indices (i, busiest, j) of the window [i, j] around the busiest entry (`profile`
    as `live_profile`): at least `left` entries before it and `right` after, then every
    adjacent entry within WINDOW_SLACK of `target`. None when that is the whole profile."""
    last = len(profile) - 2  # the final entry is the empty set after every buffer has ended
    if last < 0:
        return None
    peak = max(range(last + 1), key=lambda k: (profile[k][1], -k))
    room = WINDOW_SLACK * target
    i, j = max(0, peak - left), min(last, peak + right)
    while i > 0 and target - profile[i - 1][1] < room:
        i -= 1
    while j < last and target - profile[j + 1][1] < room:
        j += 1
    if i == 0 and j == last:
        return None
    return i, peak, j


def window(inst: AllocationInstance, first: int, last: int) -> Window:
    """The core of steps [first, last]: each buffer live there, clipped to them."""
    members = tuple(i for i, b in enumerate(inst.buffers) if b.start <= last and b.end >= first)
    bs = inst.buffers
    core = tuple(
        Buffer(str(k), bs[i].size, max(first, bs[i].start), min(last, bs[i].end))
        for k, i in enumerate(members)
    )
    return Window(first, last, members, AllocationInstance(core, inst.alignment))


@dataclass(frozen=True)
class Extension:
    """The outcome of `extend`: the packing, or which sides could not be extended."""

    solution: AllocationSolution | None
    left_failed: bool = False
    right_failed: bool = False


def extend(
    inst: AllocationInstance,
    win: Window,
    offsets: Sequence[int],
    target: int,
    *,
    seed: int,
    time_s: float,
    work: float,
) -> Extension:
    """Place the buffers outside the window under `target` around the core's (at `offsets`, in
    core order, over their whole lifetimes), each side a CP-SAT model of its own (`work`: the
    deterministic time each may take, `time_s`: the wall clock for both)."""
    fixed = dict(zip(win.members, offsets, strict=True))
    bs = inst.buffers
    sides = (
        [i for i, b in enumerate(bs) if b.end < win.first],
        [i for i, b in enumerate(bs) if b.start > win.last],
    )
    offs = [0] * len(bs)
    for i, o in fixed.items():
        offs[i] = o
    failed = [False, False]
    stop = time.perf_counter() + time_s
    for side, free in enumerate(sides):
        placed = _side(inst, free, fixed, target, seed, stop - time.perf_counter(), work)
        if placed is None:
            failed[side] = True
            continue
        for i, o in zip(free, placed, strict=True):
            offs[i] = o
    if any(failed):
        return Extension(None, failed[0], failed[1])
    return Extension(AllocationSolution(tuple(offs)))


def _side(
    inst: AllocationInstance,
    free: list[int],
    fixed: dict[int, int],
    target: int,
    seed: int,
    time_s: float,
    work: float,
) -> list[int] | None:
    """Offsets under `target` for the `free` buffers, clear of each other and of the `fixed`
    ones, or None (proven impossible, or not found in time)."""
    if not free:
        return []
    if time_s <= 0:
        return None
    from ortools.sat.python import cp_model

    from tensorplan.models.backends import run_cpsat

    bs = inst.buffers
    if any(bs[i].size > target for i in free):
        return None
    lo, hi = min(bs[i].start for i in free), max(bs[i].end for i in free)
    m = cp_model.CpModel()
    times, spans, offs = [], [], []
    for i in free:
        off, span, during = box(m, bs[i], i, target, inst.alignment)
        offs.append(off)
        spans.append(span)
        times.append(during)
    for i, o in fixed.items():
        b = bs[i]
        if b.start <= hi and b.end >= lo:
            spans.append(m.new_fixed_size_interval_var(o, b.size, f"mem{i}"))
            times.append(m.new_fixed_size_interval_var(b.start, b.duration, f"time{i}"))
    m.add_no_overlap_2d(times, spans)
    solver, status = run_cpsat(
        m,
        time_limit=time_s,
        seed=seed,
        params={"max_deterministic_time": work, "stop_after_first_solution": True},
    )
    if not status.has_solution:
        return None
    return [int(solver.value(o)) for o in offs]


def box(m: Any, b: Buffer, i: int, top: int, alignment: int) -> tuple[Any, Any, Any]:
    """Buffer `b` (index `i`) in a CP-SAT model: its offset (a multiple of `alignment`, at most
    top - size), its address interval and its (fixed) time interval."""
    k = m.new_int_var(0, max(0, (top - b.size) // alignment), f"slot{i}")
    off = k if alignment == 1 else m.new_int_var(0, max(0, top - b.size), f"off{i}")
    if alignment != 1:
        m.add(off == alignment * k)
    span = m.new_fixed_size_interval_var(off, b.size, f"mem{i}")
    return off, span, m.new_fixed_size_interval_var(b.start, b.duration, f"time{i}")

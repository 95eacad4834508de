"""The tight-window relaxation of an allocation instance and the extension of its packings.

Real traces rise to a peak and fall, and so do the tight generated instances: the packing has to
be perfect only near the peak (or the few tight spots), while away from them there is room to
spare. Clipping every buffer's lifetime to windows of steps around the tight spots gives a much
smaller instance (the *core*) whose packings are easy for `bb`, and which is a relaxation: any
packing of the instance, restricted to the buffers live in a window, packs the core under the
same peak. So a proof that the core does not fit under T is a proof for the instance, and a
packing of the core, kept for those buffers over their whole lifetimes, is extended to the rest
by CP-SAT (`extend`), one gap between windows at a time (no buffer outside the windows is live
in two gaps). Where a gap cannot be filled, the windows beside it grow into it (`widened`),
until they are the whole.
"""

from __future__ import annotations

import time
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tensorplan.problems.allocation import AllocationInstance, AllocationSolution, Buffer

WINDOW_SLACK = 0.15
"""A window takes in every neighbouring step whose live total is within this share of the
target: where the slack is smaller, the core's packing would rarely leave room for the rest.
Measured with one window around the busiest step, on tight seeds 0-79: 0.1, 0.15 and 0.2 all
prove 78 of 80 within 10 s; with 0.15 the slowest proof takes 4.1 s (7.0 s with 0.1)."""
SPOT_SLACK = 0.03
"""Every step within this share of the target is a tight spot that some window holds (the
busiest step always is): a spot left outside would be CP-SAT's to pack around fixed buffers,
which it rarely can. tight-350-s28 is full at step 65 and at 141-159: one window around step
65 took 6 cores and from 2.6 s to over 10 s over bb's seeds 0-4; windows around both take
0.3-1.2 s for four of the five seeds (8.6 s for the fifth)."""


@dataclass(frozen=True)
class Window:
    """Runs of steps [first, last] of an instance (in time order, apart), and its core:
    `members[k]` (an index into the instance) is the core's buffer k, its lifetime clipped to
    the steps of the runs it meets (from the first to the last of them)."""

    runs: tuple[tuple[int, int], ...]
    members: tuple[int, ...]
    core: AllocationInstance


def tight_windows(
    profile: Sequence[tuple[int, int]], target: int, forced: frozenset[int] = frozenset()
) -> list[tuple[int, int]] | None:
    """Runs [i, j] of profile indices (`profile` as `live_profile`) that hold every tight spot,
    the busiest entry and the `forced` ones, each grown over its neighbours within WINDOW_SLACK
    of `target`. None when that is the whole profile."""
    last = len(profile) - 2  # the final entry is the empty set after every buffer has ended
    if last < 0:
        return None
    busiest = _busiest(profile, 0, last)
    spot, room = SPOT_SLACK * target, WINDOW_SLACK * target
    held = [target - profile[k][1] <= spot or k == busiest or k in forced for k in range(last + 1)]
    near = [target - profile[k][1] < room for k in range(last + 1)]
    for k in range(1, last + 1):  # grow every run to the right, then to the left
        held[k] = held[k] or (held[k - 1] and near[k])
    for k in range(last - 1, -1, -1):
        held[k] = held[k] or (held[k + 1] and near[k])
    if all(held):
        return None
    runs: list[tuple[int, int]] = []
    for k in range(last + 1):
        if held[k]:
            if runs and runs[-1][1] == k - 1:
                runs[-1] = (runs[-1][0], k)
            else:
                runs.append((k, k))
    return runs


def _busiest(profile: Sequence[tuple[int, int]], i: int, j: int) -> int:
    """The first of the entries i..j with the largest live total."""
    return max(range(i, j + 1), key=lambda k: (profile[k][1], -k))


def widened(
    profile: Sequence[tuple[int, int]],
    runs: Sequence[tuple[int, int]],
    gaps: Sequence[int],
    forced: frozenset[int],
) -> frozenset[int]:
    """`forced` with the entries that widen each run beside a failed gap (gap g lies before
    run g; gap len(runs) after the last) into that gap: the run's side, counted from its
    busiest entry, doubles."""
    more = set(forced)
    for g in gaps:
        if g > 0:  # the run before the gap grows to the right
            i, j = runs[g - 1]
            b = _busiest(profile, i, j)
            stop = runs[g][0] if g < len(runs) else len(profile) - 1
            more.update(range(j + 1, min(stop, b + 2 * (j - b + 1) + 1)))
        if g < len(runs):  # the run after it grows to the left
            i, j = runs[g]
            b = _busiest(profile, i, j)
            begin = runs[g - 1][1] + 1 if g > 0 else 0
            more.update(range(max(begin, b - 2 * (b - i + 1)), i))
    return frozenset(more)


def window(inst: AllocationInstance, runs: Sequence[tuple[int, int]]) -> Window:
    """The core of runs of steps: each buffer live in one, clipped to the runs it meets."""
    members: list[int] = []
    core: list[Buffer] = []
    for i, b in enumerate(inst.buffers):
        met = [(a, z) for a, z in runs if b.start <= z and b.end >= a]
        if met:
            members.append(i)
            first, last = max(b.start, met[0][0]), min(b.end, met[-1][1])
            core.append(Buffer(str(len(core)), b.size, first, last))
    return Window(tuple(runs), tuple(members), AllocationInstance(tuple(core), inst.alignment))


@dataclass(frozen=True)
class Extension:
    """The outcome of `extend`: the packing, or the gaps (before run g; after the last run:
    g = number of runs) whose buffers could not be placed."""

    solution: AllocationSolution | None
    failed: tuple[int, ...] = ()


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
    """Place the buffers outside the window's runs under `target` around the core's (at
    `offsets`, in core order, over their whole lifetimes), each gap between runs a CP-SAT model
    of its own (`work`: the deterministic time each may take, `time_s`: the wall clock for all).
    Every such buffer lies in one gap, and buffers of two gaps never meet."""
    fixed = dict(zip(win.members, offsets, strict=True))
    bs = inst.buffers
    firsts = [a for a, _ in win.runs]
    gaps: dict[int, list[int]] = {}
    for i, b in enumerate(bs):
        if i not in fixed:
            gaps.setdefault(bisect_right(firsts, b.start), []).append(i)
    offs = [0] * len(bs)
    for i, o in fixed.items():
        offs[i] = o
    failed = []
    stop = time.perf_counter() + time_s
    for g, free in sorted(gaps.items()):
        placed = _fill(inst, free, fixed, target, seed, stop - time.perf_counter(), work)
        if placed is None:
            failed.append(g)
            continue
        for i, o in zip(free, placed, strict=True):
            offs[i] = o
    if failed:
        return Extension(None, tuple(failed))
    return Extension(AllocationSolution(tuple(offs)))


def _fill(
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

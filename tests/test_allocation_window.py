"""The tight-window relaxation of `bb`: the window, the core (a relaxation: its proofs hold for
the instance), the CP-SAT extension of a core packing, and what the window search adds to bb."""

from __future__ import annotations

import random
import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tensorplan.harness.run import solve
from tensorplan.models import allocation_bb
from tensorplan.models import allocation_bb_kernels as K
from tensorplan.models.allocation_window import extend, tight_windows, widened, window
from tensorplan.problems.allocation import (
    AllocationInstance,
    AllocationSolution,
    Buffer,
    check,
    live_profile,
    lower_bound,
    peak,
)
from tensorplan.problems.allocation_gen import aligned_family, tight_family
from tensorplan.problems.core import Options, Status


def test_the_windows_hold_every_tight_spot_and_the_neighbours_within_the_slack():
    # (time, live total from then on); the last entry is the empty set after the end
    profile = [(0, 10), (2, 50), (3, 95), (5, 100), (6, 92), (8, 100), (9, 40), (12, 0)]
    # target 100: spots (within 3 %) at 3 and 5; room 15, so 95 and 92 join them
    assert tight_windows(profile, 100) == [(2, 5)]
    assert tight_windows(profile, 100, frozenset({0})) == [(0, 0), (2, 5)]
    assert tight_windows(profile, 100, frozenset({0, 1, 6})) is None  # the whole: no relaxation
    # a larger target: no spot, and only the busiest entry itself is within 15 % of 1000
    assert tight_windows(profile, 1000) == [(3, 3)]
    # two spots apart: two windows
    assert tight_windows([(0, 100), (1, 50), (2, 98), (3, 0)], 100) == [(0, 0), (2, 2)]


def test_a_failed_gap_widens_the_windows_beside_it():
    profile = [(0, 10), (2, 50), (3, 95), (5, 100), (6, 92), (8, 100), (9, 40), (12, 0)]
    # one window over entries 2-5, its busiest entry 3: the side facing a failed gap doubles
    assert widened(profile, [(2, 5)], [1], frozenset()) == {6}  # clipped at the last entry
    assert widened(profile, [(2, 5)], [0], frozenset({7})) == {0, 1, 7}
    two = [(0, 100), (1, 50), (2, 98), (3, 0)]
    assert widened(two, [(0, 0), (2, 2)], [1], frozenset()) == {1}  # both grow into the gap


def test_the_core_clips_the_lifetimes_to_the_windows_they_meet():
    inst = AllocationInstance(
        (
            Buffer("a", 3, 0, 9),
            Buffer("b", 2, 0, 1),
            Buffer("c", 4, 4, 5),
            Buffer("d", 1, 5, 8),
            Buffer("e", 5, 7, 7),
        ),
        alignment=2,
    )
    win = window(inst, [(3, 4), (7, 8)])
    assert win.members == (0, 2, 3, 4)
    # a meets both windows: clipped to [3, 8], the gap between them included
    clipped = [(b.size, b.start, b.end) for b in win.core.buffers]
    assert clipped == [(3, 3, 8), (4, 4, 4), (1, 7, 8), (5, 7, 7)]
    assert win.core.alignment == 2


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10**6))
def test_a_core_is_a_relaxation(seed):
    """Any packing of the instance, kept for the buffers live in one or two windows, packs the
    core under the same peak, and the core's max load is at most the instance's: so a proof
    that the core does not fit under T is a proof for the instance."""
    rng = random.Random(seed)
    raw = [(rng.randint(1, 9), rng.randrange(12), rng.randrange(5)) for _ in range(14)]
    inst = AllocationInstance(
        tuple(Buffer(str(i), s, t, t + d) for i, (s, t, d) in enumerate(raw)),
        alignment=rng.choice([1, 2]),
    )
    first = rng.randrange(14)
    runs = [(first, first + rng.randrange(4))]
    if rng.random() < 0.5:
        runs.append((runs[0][1] + 2 + rng.randrange(3), runs[0][1] + 5 + rng.randrange(3)))
    win = window(inst, runs)
    assert lower_bound(win.core) <= lower_bound(inst)
    for name in ("ffd", "bb"):
        sol = solve(inst, name).solution
        kept = AllocationSolution(tuple(sol.offsets[i] for i in win.members))
        assert check(win.core, kept) == []
        assert peak(win.core, kept) <= peak(inst, sol)


def test_extension_completes_the_generators_packing_around_its_core():
    """The core's buffers where the generator put them: CP-SAT places the rest under the
    optimum, on both sides of the window, and the whole is a packing."""
    inst, offsets = tight_family(200, 3)
    target = lower_bound(inst)
    profile = live_profile(inst)
    runs = tight_windows(profile, target)
    win = window(inst, [(profile[i][0], profile[j + 1][0] - 1) for i, j in runs])
    assert 0 < len(win.members) < len(inst.buffers) // 2
    core = [offsets[k] for k in win.members]
    ext = extend(inst, win, core, target, seed=0, time_s=30, work=10.0)
    assert ext.solution is not None and ext.failed == ()
    assert check(inst, ext.solution) == [] and peak(inst, ext.solution) == target
    assert all(ext.solution.offsets[k] == offsets[k] for k in win.members)
    before = [k for k, b in enumerate(inst.buffers) if b.end < win.runs[0][0]]
    after = [k for k, b in enumerate(inst.buffers) if b.start > win.runs[-1][1]]
    assert before and after


def test_extension_reports_the_gap_that_cannot_be_filled():
    # a: 2 bytes over steps 0-3, the window is steps 2-3 (a alone); b: 2 bytes over steps 0-1.
    # Under 4, a at 1 leaves [0, 1) and [3, 4) beside it: b fits on neither; a at 0 leaves room
    inst = AllocationInstance((Buffer("a", 2, 0, 3), Buffer("b", 2, 0, 1)))
    win = window(inst, [(2, 3)])
    bad = extend(inst, win, [1], 4, seed=0, time_s=30, work=10.0)
    assert bad.solution is None and bad.failed == (0,)
    good = extend(inst, win, [0], 4, seed=0, time_s=30, work=10.0)
    assert good.solution is not None and good.solution.offsets == (0, 2)
    # the same between two windows (steps 0 and 3, a meets both): the gap is number 1
    between = AllocationInstance((Buffer("a", 2, 0, 3), Buffer("c", 2, 1, 2)))
    win = window(between, [(0, 0), (3, 3)])
    assert extend(between, win, [1], 4, seed=0, time_s=30, work=10.0).failed == (1,)
    assert extend(between, win, [0], 4, seed=0, time_s=30, work=10.0).solution is not None


def test_a_core_proves_the_optimum_of_the_instance():
    """aligned-10-14-s59 with a loose tail: the window around the peak holds 6 of its 15
    buffers, and its core alone proves that nothing fits under the optimum (113, one above the
    max-load bound, as bb and CP-SAT find). At the optimum the first cores' packings do not
    extend; the window widens until one does, still short of the whole."""
    base = aligned_family(59, 10, 14)
    end = max(b.end for b in base.buffers) + 1
    tail = tuple(Buffer(f"t{k}", base.alignment, end + k, end + k + 1) for k in range(4))
    inst = AllocationInstance(base.buffers + tail, base.alignment)
    exact = [solve(inst, name, Options(time_limit=60)) for name in ("bb", "cpsat")]
    assert all(r.status is Status.OPTIMAL for r in exact)
    opt = exact[0].objective
    assert exact[1].objective == opt
    assert opt == lower_bound(inst) + 1 == 113

    def windowed() -> allocation_bb.Windowed:
        main = allocation_bb.Search(
            inst, allocation_bb.decompose(inst), 0, time.perf_counter() + 60
        )
        return allocation_bb.Windowed(inst, main, live_profile(inst))

    below = windowed()
    assert below.run(opt - 1, 10**6, 0) == (K.EXHAUSTED, None)
    assert below.win is not None and len(below.win.members) == 6 and below.proven == opt
    at = windowed()
    for _ in range(10):  # each failed extension widens the window
        r, sol = at.run(opt, 10**6, 0)
        if r != K.BUDGET:
            break
    assert r == K.FOUND and check(inst, sol) == [] and peak(inst, sol) <= opt
    assert at.windows > 1 and len(at.win.members) < len(inst.buffers)


def test_bb_packs_a_tight_instance_through_widening_windows():
    """tight-400-s29 under one node budget (deterministic): with the window search bb proves
    the optimum after 3 windows (each failed extension widens the window on its side); without
    it, the same budget ends 8 % above."""
    inst, _ = tight_family(400, 29)
    budget = 250_000
    r = allocation_bb.solve(inst, Options(time_limit=60), max_nodes=budget, blocks=False)
    assert r.status is Status.OPTIMAL and r.objective == lower_bound(inst)
    assert check(inst, r.solution) == [] and r.stats["windows"] >= 2
    assert r.stats["nodes"] + r.stats["reuse_nodes"] + r.stats["window_nodes"] <= budget
    saved = allocation_bb.WINDOW_MAX_BUFFERS
    try:
        allocation_bb.WINDOW_MAX_BUFFERS = 0
        without = allocation_bb.solve(inst, Options(time_limit=60), max_nodes=budget, blocks=False)
    finally:
        allocation_bb.WINDOW_MAX_BUFFERS = saved
    assert without.status is Status.FEASIBLE and without.objective > r.objective
    assert without.stats["window_nodes"] == 0


def test_capacity_mode_uses_the_window():
    """Capacity = the optimum, the same budget: a packing, with the window searched."""
    inst, _ = tight_family(400, 29)
    cap = lower_bound(inst)
    fits = allocation_bb.solve(
        AllocationInstance(inst.buffers, capacity=cap),
        Options(time_limit=60),
        max_nodes=250_000,
        blocks=False,
    )
    assert fits.status is Status.FEASIBLE and fits.objective == cap
    assert check(inst, fits.solution) == [] and fits.stats["window_nodes"] > 0

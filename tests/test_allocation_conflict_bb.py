"""`bb` and `bb-lds` on concurrent lifetimes (a conflict graph): the search against a brute force
over every order, its proofs (exhausted below the optimum), capacity answers, the anytime form's
bound, hints, and a concurrent tiling packed at its known optimum."""

from __future__ import annotations

import itertools
import random
import time
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tensorplan.harness.run import solve
from tensorplan.models import allocation_conflict_bb as cbb
from tensorplan.models import allocation_conflict_bb_kernels as K
from tensorplan.models.allocation_bb import solve_bb, solve_lds
from tensorplan.problems import allocation_conflicts as ac
from tensorplan.problems.allocation import (
    AllocationInstance,
    AllocationSolution,
    Buffer,
    check,
    clique_bound,
    peak,
)
from tensorplan.problems.allocation_conflicts import from_clocks
from tensorplan.problems.allocation_gen import concurrent_family
from tensorplan.problems.core import Options, Status


@pytest.fixture(scope="module", autouse=True)
def compiled() -> None:
    cbb.warm()


def make(
    sizes: list[int], pairs: list[tuple[int, int]], alignment: int = 1, capacity: int | None = None
) -> AllocationInstance:
    return AllocationInstance(
        tuple(Buffer(str(i), s, 0, 0) for i, s in enumerate(sizes)),
        alignment=alignment,
        capacity=capacity,
        conflicts=ac.Pairs.of(pairs),
    )


def brute_force(inst: AllocationInstance) -> int:
    """The optimum by brute force (`allocation_conflicts.brute_peak`)."""
    return ac.brute_peak([b.size for b in inst.buffers], inst.conflicts or (), inst.alignment)


@st.composite
def graphs(draw: st.DrawFn) -> AllocationInstance:
    n = draw(st.integers(1, 7))
    sizes = draw(st.lists(st.sampled_from([1, 2, 2, 3, 4, 5, 7, 9]), min_size=n, max_size=n))
    density = draw(st.sampled_from([0.2, 0.5, 0.8]))
    rng = random.Random(draw(st.integers(0, 2**16)))
    pairs = [(i, j) for i, j in itertools.combinations(range(n), 2) if rng.random() < density]
    if n > 2 and draw(st.booleans()):  # a copy of buffer 0's neighbourhood: twins and stacks
        pairs = [p for p in pairs if n - 1 not in p]
        pairs += [(min(u, n - 1), max(u, n - 1)) for i, j in pairs if 0 in (i, j) for u in (i, j)]
        pairs = sorted({p for p in pairs if p[0] != p[1]} | {(0, n - 1)})
    return make(sizes, pairs, draw(st.integers(1, 3)))


SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))


@SETTINGS
@given(graphs())
def test_bb_equals_brute_force(inst: AllocationInstance) -> None:
    res = solve_bb(inst, Options(time_limit=5.0))
    assert res.status is Status.OPTIMAL
    assert res.objective == brute_force(inst)
    assert not check(inst, res.solution)
    assert res.bound is not None and res.bound <= res.objective


@SETTINGS
@given(graphs(), st.integers(0, 6))
def test_search_finds_the_optimum_and_proves_nothing_below(
    inst: AllocationInstance, variant: int
) -> None:
    """The kernel itself, every part from scratch (no start) and the failure memory on, shared
    by every search: below the optimum exhausted, at it a packing, in two branching orders."""
    opt = brute_force(inst)
    saved = cbb.MEMO_FROM
    cbb.MEMO_FROM = 1
    try:
        search = cbb.prepare(inst, 0, time.perf_counter() + 60.0, 1.0)
        for v in (variant, variant + 1):
            for target, want in ((opt - 1, K.EXHAUSTED), (opt, K.FOUND)):
                for part in search.parts:
                    part.best = None
                got = search.attempt(target, 10**6, v, improve=False)
                if want == K.EXHAUSTED and search.lower() > target:
                    continue  # the bounds alone rule it out (stacked buffers' tops among them)
                assert got == want
            packed = search.assembled()
            assert packed is not None and packed[0] <= opt
            assert not check(inst, packed[1])
    finally:
        cbb.MEMO_FROM = saved


def test_capacity_feasible_and_infeasible() -> None:
    sizes, pairs = [4, 3, 3, 2, 2, 5], [(0, 1), (1, 2), (2, 3), (3, 4), (4, 0), (5, 1), (5, 3)]
    opt = brute_force(make(sizes, pairs))
    fits = solve_bb(make(sizes, pairs, capacity=opt), Options(time_limit=5.0))
    assert fits.status in (Status.FEASIBLE, Status.OPTIMAL)
    assert fits.objective is not None and fits.objective <= opt
    assert not check(make(sizes, pairs, capacity=opt), fits.solution)
    short = solve_bb(make(sizes, pairs, capacity=opt - 1), Options(time_limit=5.0))
    assert short.status is Status.INFEASIBLE and short.solution is None
    # the clique bound alone: the triangle 0-1-2 does not fit under 9
    assert solve_bb(make([4, 3, 3], [(0, 1), (1, 2), (0, 2)], capacity=9), Options()).status is (
        Status.INFEASIBLE
    )


def test_five_cycle_needs_the_search() -> None:
    """An odd cycle of equal buffers: every clique is an edge (2), the optimum is 3."""
    inst = make([1] * 5, [(i, (i + 1) % 5) for i in range(5)])
    res = solve_bb(inst, Options(time_limit=5.0))
    assert (res.status, res.objective, res.bound) == (Status.OPTIMAL, 3, 3)


def test_bounds_round_up_to_the_grain() -> None:
    """The five-cycle in sizes of 4: every peak is a multiple of 4, so a part proven above 9
    is proven at 12, and the solve proves 12."""
    inst = make([4] * 5, [(i, (i + 1) % 5) for i in range(5)])
    search = cbb.prepare(inst, 0, time.perf_counter() + 60.0, 1.0)
    assert search.step == 4 and search.lower() == 8  # the heaviest clique: an edge
    for part in search.parts:
        part.proven_lo = 10 - part.base
    assert search.lower() == 12
    res = solve_bb(inst, Options(time_limit=5.0))
    assert (res.status, res.objective, res.bound) == (Status.OPTIMAL, 12, 12)


def test_concurrent_family_is_valid_and_bounded() -> None:
    inst = concurrent_family(120, 3)
    for fn in (solve_bb, solve_lds):
        res = fn(inst, Options(time_limit=2.0, seed=1))
        assert res.status in (Status.OPTIMAL, Status.FEASIBLE)
        assert not check(inst, res.solution)
        if fn is solve_lds and res.status is Status.FEASIBLE:
            assert res.bound is None
        if res.bound is not None:
            assert res.objective is not None and res.bound <= res.objective


def test_hint_is_a_start() -> None:
    inst = concurrent_family(60, 5)
    first = solve_bb(inst, Options(time_limit=1.0))
    again = solve_bb(inst, Options(time_limit=0.5, hint=first.solution))
    assert again.objective is not None and first.objective is not None
    assert again.objective <= first.objective
    assert not check(inst, again.solution)


def test_harness_runs_bb_on_a_conflict_graph() -> None:
    inst = make([3, 2, 2, 1, 2], [(0, 1), (1, 2), (2, 3), (3, 4), (0, 4)])
    for name in ("bb", "bb-lds"):
        res = solve(inst, name, Options(time_limit=2.0))
        assert res.status is Status.OPTIMAL, res.message
        assert res.objective == brute_force(inst)


def test_stacked_and_absorbed_buffers_are_placed() -> None:
    """Buffer 0 conflicts with all (stacked at the bottom); 4 has 1's neighbours and is smaller
    (goes at 1's offset); the assembled packing holds every buffer."""
    pairs = [(0, 1), (0, 2), (0, 3), (0, 4), (1, 2), (2, 3), (2, 4), (3, 1)]
    inst = make([2, 5, 3, 4, 1], sorted({(min(p), max(p)) for p in pairs}))
    res = solve_bb(inst, Options(time_limit=5.0))
    assert res.status is Status.OPTIMAL and res.objective == brute_force(inst)
    assert not check(inst, res.solution)
    assert res.stats["stacked"] >= 1


def test_concurrent_tiling_packed_at_its_capacity() -> None:
    """OmniMalloc's concurrent tiling (two workers, known optimum = capacity), listed in a
    shuffled order so that the input order carries no hint of the tiling."""
    sources = pytest.importorskip("omnimalloc.benchmark.sources")
    import numpy as np

    src = sources.ConcurrentTilingSource(num_allocations=50, seed=1)
    allocs = list(src.get_allocations())
    random.Random(7).shuffle(allocs)
    starts = np.array([a.start for a in allocs], dtype=np.int64)
    ends = np.array([a.end for a in allocs], dtype=np.int64)
    inst = AllocationInstance(
        tuple(Buffer(str(i), a.size, 0, 0) for i, a in enumerate(allocs)),
        conflicts=from_clocks(starts, ends),
    )
    res = solve_bb(inst, Options(time_limit=10.0))
    assert not check(inst, res.solution)
    assert (res.status, res.objective) == (Status.OPTIMAL, src.capacity)


def test_peak_of_assembled_matches_the_solution() -> None:
    inst = concurrent_family(40, 2)
    res = solve_bb(inst, Options(time_limit=1.0))
    assert isinstance(res.solution, AllocationSolution)
    assert res.objective == peak(inst, res.solution)


def test_without_compiled_kernels_the_portfolio_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    """No time to compile the search: the portfolio heuristic's packing, the clique bound."""
    monkeypatch.setattr(cbb, "kernels_ready", lambda deadline: False)
    inst = concurrent_family(60, 4)
    res = solve_bb(inst, Options(time_limit=1.0))
    assert res.status in (Status.OPTIMAL, Status.FEASIBLE)
    assert not check(inst, res.solution)
    assert res.bound is not None and res.objective is not None and res.bound <= res.objective
    short = solve_bb(replace(inst, capacity=1), Options(time_limit=1.0))
    assert short.status is Status.INFEASIBLE


def test_no_time_to_prepare_the_search_gives_the_heuristic_the_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """When preparing the search would not fit in the time left (`PREPARE_S_PER_PAIR`), the
    portfolio heuristic packs for the limit instead: a checked packing and a sound bound; a
    capacity below the clique is still refused."""
    inst = concurrent_family(120, 4)
    monkeypatch.setattr(cbb, "PREPARE_S", 1e6)
    res = solve(inst, "bb", Options(time_limit=1.0))
    assert "no time to prepare the search" in res.message
    assert res.solution is not None and not check(inst, res.solution)
    assert res.bound is not None and res.objective is not None
    assert res.bound <= res.objective
    lb = clique_bound(inst)[0]
    short = solve_bb(replace(inst, capacity=lb - 1), Options(time_limit=1.0))
    assert short.status is Status.INFEASIBLE


def test_kernel_calls_are_paced_by_the_last_ones_nodes() -> None:
    """A part's first kernel call runs at most `FIRST_CALL_NODES` nodes and records the pace of
    a node; a search whose deadline has come runs no node."""
    inst = concurrent_family(120, 4)
    search = cbb.prepare(inst, 0, time.perf_counter() + 60.0, 1.0)
    part = max(search.parts, key=lambda p: len(p.members))
    part.best = None
    before = search.nodes
    search.fit(part, part.lb, cbb.FIRST_CALL_NODES + 1_000, 0, improve=False)
    assert part.node_s is not None and part.node_s > 0 and search.nodes > before
    search.deadline = time.perf_counter()
    part.best, before = None, search.nodes
    assert search.fit(part, part.lb, 10**6, 1, improve=False) == K.BUDGET
    assert search.nodes == before

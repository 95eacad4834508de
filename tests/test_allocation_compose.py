"""Rectangle composition (`heuristics.allocation_compose`): every block packing it expands is a
packing, tilings cut by guillotine and pinwheel cuts collapse to one block (their optimum), and
the solvers that run the portfolio prove OmniMalloc's pinwheel and tiling optima with it."""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorplan.harness.run import solve
from tensorplan.heuristics.allocation import PortfolioSearch
from tensorplan.heuristics.allocation_compose import Block, compose
from tensorplan.problems.allocation import (
    AllocationInstance,
    AllocationSolution,
    Buffer,
    check,
    lower_bound,
    peak,
)
from tensorplan.problems.allocation_gen import random_family, tight_family
from tensorplan.problems.core import Options, Status

LATER = 3600.0


def packed(inst: AllocationInstance) -> AllocationSolution:
    """The composition's blocks packed first fit decreasing, expanded to the buffers."""
    comp = compose(inst, time.perf_counter() + LATER)
    assert comp is not None
    inner = PortfolioSearch(comp.blocks, 0)
    inner.run(time.perf_counter() + LATER, upto=1)
    return AllocationSolution(tuple(comp.expand(inner.best.offsets, len(inst.buffers)).tolist()))


def pinwheel(mirrored: bool) -> AllocationInstance:
    """Five buffers tiling [0, 9) x [0, 10) around a centre [3, 6) x 5; blades of four sizes.
    Mirrored in time, the blades trade places: another instance, the other chirality."""
    # left [0,3) x 8 (from the centre's bottom, 2, to the top); right [6,9) x 7 (from 0 to the
    # centre's top, 7); bottom [0,6) x 2; top [3,9) x 3
    pieces = [(3, 6, 5), (0, 3, 8), (6, 9, 7), (0, 6, 2), (3, 9, 3)]
    if mirrored:
        pieces = [(9 - e, 9 - s, h) for s, e, h in pieces]
    bufs = tuple(Buffer(str(k), h, s, e - 1) for k, (s, e, h) in enumerate(pieces))
    return AllocationInstance(bufs)


@pytest.mark.parametrize("mirrored", [False, True])
def test_a_pinwheel_of_either_chirality_is_one_block(mirrored: bool) -> None:
    inst = pinwheel(mirrored)
    comp = compose(inst, time.perf_counter() + LATER)
    assert comp is not None and len(comp.parts) == 1
    block = comp.parts[0]
    assert (block.start, block.end, block.size) == (0, 9, 10)
    sol = AllocationSolution(tuple(comp.expand(np.zeros(1, np.int64), 5).tolist()))
    assert check(inst, sol) == [] and peak(inst, sol) == 10 == lower_bound(inst)
    broken = AllocationInstance((*inst.buffers[:4], replace(inst.buffers[4], size=4)))
    assert compose(broken, time.perf_counter() + LATER) is None  # a blade too tall: no block


def test_nothing_to_compose_and_what_it_refuses() -> None:
    apart = AllocationInstance((Buffer("a", 2, 0, 3), Buffer("b", 3, 1, 5)))
    assert compose(apart, time.perf_counter() + LATER) is None
    off_alignment = AllocationInstance((Buffer("a", 3, 0, 1), Buffer("b", 3, 0, 1)), alignment=2)
    assert compose(off_alignment, time.perf_counter() + LATER) is None
    stack = AllocationInstance((Buffer("a", 4, 0, 1), Buffer("b", 2, 0, 1)), alignment=2)
    comp = compose(stack, time.perf_counter() + LATER)
    assert comp is not None and comp.parts == (Block(0, 2, 6, ((0, 0), (1, 4))),)
    assert compose(random_family(2000, 1), time.perf_counter() - 1) is None  # out of time


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(2, 60),
    seed=st.integers(0, 10_000),
    horizon=st.integers(3, 30),
    sizes=st.sampled_from([(1, 2), (1, 8), (1, 64)]),
)
def test_every_expanded_block_packing_is_a_packing(
    n: int, seed: int, horizon: int, sizes: tuple[int, int]
) -> None:
    """On random instances with many equal times and sizes (so every rule fires, often
    ambiguously) the blocks' members never collide: any packing of the blocks is one of the
    buffers."""
    inst = random_family(n, seed, horizon=horizon, max_size=sizes[1], max_life=horizon)
    comp = compose(inst, time.perf_counter() + LATER)
    if comp is None:
        return
    assert sorted(k for b in comp.parts for k, _ in b.members) == list(range(n))
    for b in comp.parts:  # every member inside its block
        for k, rel in b.members:
            buf = inst.buffers[k]
            assert b.start <= buf.start and buf.end < b.end and 0 <= rel <= b.size - buf.size
    assert check(inst, packed(inst)) == []


@settings(max_examples=30, deadline=None)
@given(n=st.integers(5, 400), seed=st.integers(0, 10_000), wheel=st.floats(0, 1))
def test_a_tiling_collapses_to_its_rectangle(n: int, seed: int, wheel: float) -> None:
    """Cut by guillotine and (asymmetric) pinwheel cuts with no holes, on a fine grid so no two
    cuts coincide by chance, the pieces compose back into the capacity x time rectangle: the
    expanded packing is optimal."""
    inst, _ = tight_family(n, seed, holes=0.0, horizon=10**9, capacity=2**40, pinwheel=wheel)
    comp = compose(inst, time.perf_counter() + LATER)
    assert comp is not None and len(comp.parts) == 1
    sol = packed(inst)
    assert check(inst, sol) == [] and peak(inst, sol) == lower_bound(inst)


def test_finished_compositions_are_kept_and_time_outs_are_not() -> None:
    """The portfolio and `bb` ask for the same instance's blocks: a finished answer is kept
    (the same object comes back, even with no time left), one cut short by the clock is not."""
    inst, _ = tight_family(200, 3, holes=0.0, horizon=10**9, capacity=2**40, pinwheel=0.5)
    assert compose(inst, time.perf_counter() - 1.0) is None  # out of time at once: not kept
    first = compose(inst, time.perf_counter() + LATER)
    assert first is not None
    assert compose(inst, time.perf_counter() - 1.0) is first


def omni(kind: str, n: int, seed: int) -> AllocationInstance:
    """OmniMalloc's generator (half-open lifetimes made inclusive)."""
    from omnimalloc.benchmark import sources as src

    source = (
        src.PinwheelSource(n, seed=seed) if kind == "pinwheel" else src.TilingSource(n, seed=seed)
    )
    bufs = []
    for k, a in enumerate(source.get_allocations()):
        assert isinstance(a.start, int) and isinstance(a.end, int)  # scalar time
        bufs.append(Buffer(str(k), int(a.size), a.start, a.end - 1))
    return AllocationInstance(
        tuple(bufs),
        name=f"om-{kind}-{n}-s{seed}",
    )


@pytest.mark.parametrize("solver", ["bb", "fast", "multistart"])
@pytest.mark.parametrize("kind", ["pinwheel", "tiling"])
def test_omnimalloc_perfect_packings_are_proven(solver: str, kind: str) -> None:
    """Issue 32's target instances (1,001 buffers; the optimum is the capacity, 1 MiB): proven
    by every solver that runs the portfolio, on every seed 1-5."""
    for seed in range(1, 6):
        inst = omni(kind, 1001, seed)
        r = solve(inst, solver, Options(time_limit=10))
        assert r.objective == 1 << 20 == lower_bound(inst), (inst.name, r.message)
        if solver == "bb":
            assert r.status is Status.OPTIMAL

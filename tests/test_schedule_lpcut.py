"""The cut bound's linear relaxation (`problems.schedule_lpcut`): every value it gives is at most
the lightest ideal cut of its sizes (enumeration), for the duals HiGHS returns and for any
multipliers at all; it is exact on chains; `cut_bound` falls back to it and stays below the
brute-force optima; `shift` reports it where the DP gives up."""

from __future__ import annotations

import itertools

import highspy
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorplan.harness.run import solve
from tensorplan.problems import schedule_cut
from tensorplan.problems import schedule_gen as gen
from tensorplan.problems.core import Options, Status
from tensorplan.problems.schedule import Alloc, Op, ScheduleInstance, lower_bound
from tensorplan.problems.schedule_cut import best_cuts, cut_bound, used_size
from tensorplan.problems.schedule_lpcut import _Program, lp_cuts
from tests.test_schedule_cut import FAMILIES, ideal_cuts, optimum, small, small_both

SMALL = given(n=st.integers(1, 9), seed=st.integers(0, 10_000), family=FAMILIES)


@settings(max_examples=80, deadline=None)
@SMALL
def test_the_relaxed_cuts_are_at_most_the_lightest_ideal_cuts(
    n: int, seed: int, family: str
) -> None:
    g = small(family, n, seed).graph
    cuts = lp_cuts(g, 10.0)
    assert cuts is not None
    exact = ideal_cuts(g)
    assert all(0 <= c <= e for c, e in zip(cuts.tolist(), exact, strict=True))
    assert cuts[0] == cuts[-1] == 0


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(2, 9),
    seed=st.integers(0, 10_000),
    family=FAMILIES,
    data=st.data(),
)
def test_any_multipliers_give_at_most_the_lightest_cut_of_every_size(
    n: int, seed: int, family: str, data: st.DataObject
) -> None:
    """The curve of HiGHS's duals for one size is exact at that size (the relaxation's value,
    at most its cut) and at most every other size's cut; the curve of arbitrary multipliers
    too: the bound is sound by construction, not by trusting the solver."""
    g = small(family, n, seed).graph
    exact = np.array(ideal_cuts(g), dtype=np.float64)
    k = data.draw(st.integers(1, g.n - 1))
    program = _Program.of(g, highspy)
    duals = program.solve(k, 10.0)
    assert duals is not None
    curve = program.curve(duals)
    assert (curve <= exact + 1e-6).all()
    assert curve[k] == pytest.approx(program.highs.getInfo().objective_function_value, abs=1e-6)
    rows = len(program.heads) + 1
    duals = np.array(data.draw(st.lists(st.floats(-50, 50), min_size=rows, max_size=rows)))
    assert (program.curve(duals) <= exact + 1e-6).all()


def chain(sizes: list[int]) -> ScheduleInstance:
    """Ops 0 -> 1 -> ...; alloc i is read by ops i and i + 1."""
    n = len(sizes) + 1
    ops = tuple(Op(f"o{i}", (f"o{i - 1}",) if i else ()) for i in range(n))
    allocs = tuple(Alloc(f"a{i}", s, (f"o{i}", f"o{i + 1}")) for i, s in enumerate(sizes))
    return ScheduleInstance(ops, allocs)


def test_on_a_chain_the_fixings_make_every_cut_exact() -> None:
    """A chain has one ideal of each size; the fixings leave no choice, so the relaxation must
    find each cut itself (a dual bound that lost its size row's term would give 0s)."""
    sizes = [3, 1, 4, 1, 5, 9, 2, 6]
    cuts = lp_cuts(chain(sizes).graph, 10.0)
    assert cuts is not None
    assert cuts.tolist() == [0, *sizes, 0]


@small_both
def test_the_relaxed_cut_bound_is_at_most_the_optimum(
    n: int, seed: int, family: str, objective: str
) -> None:
    """With the DP made to give up, `cut_bound` comes from the relaxation and stays sound."""
    inst = small(family, n, seed, objective)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(schedule_cut, "cut_order", lambda g, seconds: None)
        bound = cut_bound(inst.graph, objective, 10.0)
    assert bound is not None
    assert bound <= optimum(inst)


def test_where_the_dp_gives_up_shift_reports_the_relaxed_cuts() -> None:
    """adversary-100: the DP's states explode, the hull bound is 7,186 and the relaxed cuts
    lift the bound `shift` reports (11,231 found) above it; on layered-10x20 the peak bound
    rises above the hull's (28 against 23); the relaxed cuts are at most the exact ones where
    the DP completes (layered-8x10)."""
    inst = gen.adversary(100, 1)
    g = inst.graph
    assert best_cuts(g, 10.0) is None
    cuts = lp_cuts(g, 10.0)
    assert cuts is not None
    relaxed = used_size(g) + int(cuts[1:-1].sum())
    assert relaxed > lower_bound(inst)
    result = solve(inst, "shift", Options(time_limit=10.0))
    assert result.bound is not None and result.objective is not None
    assert relaxed <= result.bound <= result.objective
    assert cut_bound(g, "peak", 10.0) == int(cuts.max())
    peak = gen.layered(10, 20, 1, objective="peak")  # the DP gives up here too
    assert (cut_bound(peak.graph, "peak", 10.0) or 0) > lower_bound(peak)
    layered = gen.layered(8, 10, 1).graph
    exact, lower = best_cuts(layered, 10.0), lp_cuts(layered, 10.0)
    assert exact is not None and lower is not None
    assert (lower <= exact).all() and lower.sum() > 0


def test_with_little_time_a_few_programs_bound_every_size(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Programs made to take 5 ms each, 0.15 s for 79 sizes: later ones skip sizes, yet every
    size gets a bound from the solved ones' curves, at most its cut and at least the program's
    own value at the sizes solved (layered-8x10, where the DP completes)."""
    import time

    g = gen.layered(8, 10, 1).graph
    exact = best_cuts(g, 10.0)
    assert exact is not None
    solved: list[tuple[int, float]] = []
    real = _Program.solve

    def slow(self: _Program, k: int, seconds: float) -> np.ndarray | None:
        time.sleep(0.005)
        duals = real(self, k, seconds)
        if duals is not None:
            solved.append((k, self.highs.getInfo().objective_function_value))
        return duals

    monkeypatch.setattr(_Program, "solve", slow)
    cuts = lp_cuts(g, 0.15)
    assert cuts is not None
    ks = [k for k, _ in solved]
    assert ks[0] == 1 and len(ks) < g.n - 1 and any(b > a + 1 for a, b in itertools.pairwise(ks))
    assert (cuts <= exact).all()
    assert all(cuts[k] >= value - 1e-6 for k, value in solved)
    assert (cuts[1:-1] > 0).sum() > len(ks)  # sizes no program solved have bounds too


def test_dp_prunes_with_the_relaxed_cuts_where_the_exact_ones_give_up() -> None:
    """adversary-80-s2: the cut DP gives up, and `dp` proves the optimum either way; with the
    relaxed cuts in its bound on the rest it visits fewer downsets (20,415 against 38,588)."""
    inst = gen.adversary(80, 2)
    assert best_cuts(inst.graph, 10.0) is None
    with_cuts = solve(inst, "dp", Options(time_limit=30.0))
    with pytest.MonkeyPatch.context() as m:
        m.setattr(schedule_cut, "lp_cuts", lambda g, seconds: None)
        without = solve(inst, "dp", Options(time_limit=30.0))
    assert with_cuts.status is without.status is Status.OPTIMAL
    assert with_cuts.objective == without.objective
    assert with_cuts.stats["states"] < without.stats["states"]

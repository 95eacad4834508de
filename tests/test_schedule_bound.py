"""The Lagrangian sum-liveness bound (`problems.schedule_bound`): Horn's rule is exact on
out-forests, every bound is at most the brute-force optimum, and it beats the hull bound where
the hull is weak (trees), which `shift` then reports."""

from __future__ import annotations

import itertools
import random
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorplan.harness.run import solve
from tensorplan.problems import schedule_gen as gen
from tensorplan.problems.core import Options, Status
from tensorplan.problems.schedule import (
    ScheduleInstance,
    hulls,
    lower_bound,
    order_objective,
    reachability,
)
from tensorplan.problems.schedule_bound import (
    AIM,
    AIM_AT,
    AIM_FROM,
    ITERATIONS,
    PATIENCE,
    _horn,
    aim,
    lagrangian_bound,
    patience,
    positional_bound,
    warm,
)
from tensorplan.problems.schedule_cut import bound_of, kahn_order
from tensorplan.problems.schedule_lpcut import lp_cuts


@pytest.fixture(scope="module", autouse=True)
def compiled() -> None:
    warm()


def extensions(preds: list[list[int]]) -> list[tuple[int, ...]]:
    """Every topological order of a small DAG."""
    n = len(preds)
    out = []
    for perm in itertools.permutations(range(n)):
        pos = {v: k for k, v in enumerate(perm)}
        if all(pos[u] < pos[v] for v in range(n) for u in preds[v]):
            out.append(perm)
    return out


def brute_force(inst: ScheduleInstance) -> int:
    g = inst.graph
    return min(
        order_objective(g, perm, "sum_liveness") for perm in extensions([list(p) for p in g.preds])
    )


@settings(max_examples=80, deadline=None)
@given(n=st.integers(1, 7), seed=st.integers(0, 10_000))
def test_horn_finds_the_least_weighted_positions_over_a_forest(n: int, seed: int) -> None:
    """1|outtree, p=1|sum w_j C_j: the order Horn's rule builds is a linear extension of the
    forest, and no linear extension has a smaller sum of w_j pos(j) (weights of both signs)."""
    r = random.Random(seed)
    parent = np.array([r.randrange(-1, v) if v else -1 for v in range(n)], dtype=np.int64)
    w = np.array([r.uniform(-5, 5) for _ in range(n)])
    pos = np.zeros(n, dtype=np.int64)
    scratch = np.empty(n + 1), np.empty(n + 1, dtype=np.int64), np.empty(n + 1, dtype=np.int64)
    _horn(parent, w, pos, *scratch)
    assert sorted(pos) == list(range(1, n + 1))
    assert all(parent[v] < 0 or pos[parent[v]] < pos[v] for v in range(n))
    preds = [[int(parent[v])] if parent[v] >= 0 else [] for v in range(n)]
    best = min(sum(w[v] * (k + 1) for k, v in enumerate(perm)) for perm in extensions(preds))
    assert float(np.dot(w, pos)) == pytest.approx(best, abs=1e-9)


def _bound(inst: ScheduleInstance, iterations: int = 60) -> int:
    g = inst.graph
    reach = reachability(g)
    upper = order_objective(g, kahn_order(g.preds), "sum_liveness")
    hull = hulls(g, reach)
    return positional_bound(
        g.preds, g.alloc_ops, g.sizes, hull, reach[1], upper, iterations=iterations
    )


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 8), seed=st.integers(0, 10_000), family=st.sampled_from(["tree", "dag"]))
def test_lagrangian_bound_is_at_most_the_optimum(n: int, seed: int, family: str) -> None:
    """On random trees and random DAGs (several predecessors: relaxed edges with multipliers;
    allocs with and without a producer), the bound never passes the brute-force optimum."""
    if family == "tree":
        inst = gen.tree(n, seed)
    else:
        r = random.Random(seed)
        inst = (
            gen.adversary(max(n, 2), seed)
            if r.random() < 0.5
            else gen.grid(2, max(n // 2, 1), seed)
        )
    assert _bound(inst) <= brute_force(inst)
    assert lagrangian_bound(inst, brute_force(inst) + 10, 5.0) <= brute_force(inst)


def test_lagrangian_bound_beats_the_hull_on_trees() -> None:
    """Random 8-op trees: where a parent's children can be ordered several ways, the hull
    counts each output live over its users only; the bound adds how far apart the users must
    be (distinct positions, the subtrees in between), and stays at most the optimum."""
    better = 0
    for seed in range(12):
        inst = gen.tree(8, seed)
        hull, bound, best = lower_bound(inst), _bound(inst), brute_force(inst)
        assert bound <= best
        better += bound > hull
    assert better >= 4


def test_shift_reports_the_bound_and_it_is_sound() -> None:
    """`shift` spends its share of the limit on the bound: on a 300-op tree it reports one
    above the hull bound and at most its own objective; on peak trees, the hull's (the cut
    bound, `test_schedule_cut`, is lower there)."""
    inst = gen.tree(300, 1)
    r = solve(inst, "shift", Options(time_limit=3.0))
    assert r.bound is not None and r.objective is not None
    assert lower_bound(inst) < r.bound <= r.objective
    peak = gen.tree(300, 1, objective="peak")
    assert solve(peak, "shift", Options(time_limit=1.0)).bound == lower_bound(peak)


def test_no_bound_when_too_few_steps_fit() -> None:
    """Too little time for `MIN_ITERATIONS` steps: 0 (the caller keeps the hull bound)."""
    g = gen.tree(300, 1).graph
    reach = reachability(g)
    hull = hulls(g, reach)
    assert positional_bound(g.preds, g.alloc_ops, g.sizes, hull, reach[1], 10**9, seconds=1e-6) == 0


def test_exact_models_report_at_least_the_bound_shift_proves() -> None:
    """The exact models start from `shift` (`models.schedule.warm_start`) and report the better
    of its bound and their own: on a 300-op grid that neither proves in 4 s, at least the cut
    bound, 2.4 % below the optimum where CP-SAT's own bound is near the hull's; `dp` proves a
    tree outright, and stopped by its state cap on a bifurcating graph it reports at least the
    Lagrangian bound (its layers prove less)."""
    from tensorplan.models.schedule import run_dp
    from tensorplan.problems.schedule_cut import cut_bound

    inst = gen.grid(6, 50, 1)
    cut = cut_bound(inst.graph, inst.objective, 10.0)
    assert cut is not None and cut > lower_bound(inst)
    heard: list = []
    r = solve(inst, "cpsat", Options(time_limit=4.0, progress=heard.append))
    assert r.objective is not None and r.bound is not None
    assert cut <= r.bound <= r.objective
    # the start's progress is the model's: the bound is shown before the model ends
    assert {p.solver for p in heard} == {"cpsat"}
    assert any(not p.final and p.bound is not None and p.bound >= cut for p in heard)
    tree = gen.tree(100, 1)  # an out-tree: proven before any downset (`schedule_tree`)
    assert run_dp(tree, Options(time_limit=5.0), max_states=2_000).status is Status.OPTIMAL
    merged = gen.bifurcating(5, 1)
    stopped = run_dp(merged, Options(time_limit=5.0), max_states=2_000)
    assert "state cap" in stopped.message and stopped.objective is not None
    assert stopped.bound is not None
    assert stopped.bound >= lagrangian_bound(merged, int(stopped.objective), 5.0)
    assert stopped.bound > lower_bound(merged)


def test_a_start_that_meets_its_bound_is_optimal_without_a_model() -> None:
    """On a 2 x 50 grid `shift`'s order meets the cut bound: the exact models return it as
    optimal at once (no model built: CP-SAT's stats carry no variable count)."""
    inst = gen.grid(2, 50, 1)
    for name in ("cpsat", "dp"):
        r = solve(inst, name, Options(time_limit=5.0), warm=True)  # the cut kernel loaded
        assert r.status.value == "optimal" and r.objective == r.bound, name
        assert r.message == "the start meets its bound" and "variables" not in r.stats, name


def test_polyak_aim_rises_with_the_steps_from_the_objective_to_aim() -> None:
    """Few steps aim at the best known objective itself (long steps overshoot then); a full
    run aims at `AIM` times it, and the aim never falls as the steps grow."""
    assert aim(0) == aim(AIM_FROM) == 1.0
    assert aim(AIM_AT) == aim(ITERATIONS) == AIM > 1.0
    aims = [aim(k) for k in range(0, 2 * AIM_AT)]
    assert aims == sorted(aims)


def test_longer_runs_halve_their_steps_later_and_reach_higher() -> None:
    """Up to `AIM_AT` steps the step length halves after `PATIENCE` idle steps; beyond, after
    one in 30 of the steps. So 3,000 steps end higher than 300 (where 10 idle steps stopped
    them near the 300-step value), here on a layered DAG and a tree, as on the 1,000-op ones."""
    assert patience(0) == patience(AIM_AT) == PATIENCE
    assert patience(ITERATIONS) == ITERATIONS // 30 > PATIENCE
    for inst, upper in ((gen.layered(8, 30, 1), 5_000), (gen.tree(300, 1), 3_000)):
        g = inst.graph
        reach = reachability(g)
        hull = hulls(g, reach)
        short, full = (
            positional_bound(g.preds, g.alloc_ops, g.sizes, hull, reach[1], upper, iterations=k)
            for k in (AIM_AT, ITERATIONS)
        )
        assert full > short


def test_search_bound_skips_what_its_time_cannot_hold(monkeypatch: pytest.MonkeyPatch) -> None:
    """Below `SETUP_S_PER_OP` an op of time, `search_bound` gives the hull bound without calling
    the cut DP, the Lagrangian bound or the cuts' relaxation (each took milliseconds for
    nothing); with the time, it calls the DP, the signature bounds along the DP's order and the
    Lagrangian where the DP completes (adversary-40), and the DP, the Lagrangian and the
    relaxation where it gives up (adversary-100), the relaxation after the Lagrangian's share,
    unless the time left is below `RELAX_S` per op squared."""
    from tensorplan.problems import schedule_bound as sb

    inst = gen.adversary(1000, 1)
    hull = lower_bound(inst)
    called: list[str] = []

    def spy(name: str, real: Any) -> Any:
        def call(*args: Any) -> Any:
            called.append(name)
            return real(*args)

        return call

    monkeypatch.setattr(sb, "cut_order", spy("cut", sb.cut_order))
    monkeypatch.setattr(sb, "signature_bounds", spy("sig", sb.signature_bounds))
    monkeypatch.setattr(sb, "lagrangian_bound", spy("lag", sb.lagrangian_bound))
    monkeypatch.setattr(sb, "lp_cuts", spy("lp", sb.lp_cuts))
    assert sb.search_bound(inst, 10**12, 0.001) == hull and called == []
    small = gen.adversary(40, 1)
    bound = sb.search_bound(small, 10**12, 1.0)
    assert bound is not None and bound >= lower_bound(small)
    assert called == ["cut", "sig", "lag"]
    called.clear()
    wide = gen.adversary(100, 1)
    bound = sb.search_bound(wide, 10**12, 2.0)
    assert called == ["cut", "lag", "lp"]
    relaxed = lp_cuts(wide.graph, 2.0)
    assert relaxed is not None
    assert bound == max(lower_bound(wide), bound_of(wide.graph, relaxed, "sum_liveness"))
    called.clear()
    monkeypatch.setattr(sb, "RELAX_S", 1.0)  # 10,000 s for 100 ops: the relaxation is skipped
    assert sb.search_bound(wide, 10**12, 2.0) == lower_bound(wide)
    assert called == ["cut", "lag"]


def test_search_bound_gives_none_when_not_even_the_hull_bound_fits() -> None:
    """The hull bound's first computation takes ~1.5 ms at 1,000 ops: with less time than
    `HULL_S_PER_OP` an op, `search_bound` gives no bound, unless the instance holds it already
    (then it costs nothing)."""
    from tensorplan.problems import schedule_bound as sb

    inst = gen.adversary(1000, 2)
    assert sb.search_bound(inst, 10**12, 0.5 * sb.HULL_S_PER_OP * 1000) is None
    hull = lower_bound(inst)
    assert sb.search_bound(inst, 10**12, 0.0) == hull

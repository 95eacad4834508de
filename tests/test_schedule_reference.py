"""The seed-faithful reference of poprithms' shift (heuristics/schedule_reference.py), and the
default `shift` held to it."""

from __future__ import annotations

import pytest

from tensorplan.harness.run import solve
from tensorplan.heuristics.schedule import best_start
from tensorplan.heuristics.schedule_reference import (
    SeedDescent,
    cxx_shuffle,
    seed_shift,
    seed_start,
)
from tensorplan.heuristics.schedule_shift import iterate_order, shift_order
from tensorplan.problems import schedule_gen as gen
from tensorplan.problems.core import Options
from tensorplan.problems.schedule import ScheduleInstance, check, order_objective, to_solution

FAMILIES = {
    "tree": lambda s: gen.tree(60, s),
    "grid": lambda s: gen.grid(6, 10, s, max_size=19),
    "adversary": lambda s: gen.adversary(40, s),
    "recompute": lambda s: gen.recompute(8, s),
    "bifurcating": lambda s: gen.bifurcating(4, s),
}


def _objective(inst: ScheduleInstance, order: list[int]) -> int:
    return order_objective(inst.graph, order, "sum_liveness")


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("seed", [1, 2])
def test_the_reference_descends_to_a_valid_local_minimum_and_shift_is_never_worse(
    family: str, seed: int
) -> None:
    inst = FAMILIES[family](seed)
    start = seed_start(inst.graph)
    assert sorted(start) == list(range(inst.graph.n))
    assert not check(inst, to_solution(inst, start))  # greedy Kahn: a topological order
    state, converged = seed_shift(inst.graph)
    order = state.arrays.order.tolist()
    assert converged and not check(inst, to_solution(inst, order))
    reference = _objective(inst, order)
    assert reference <= _objective(inst, start)
    again, _ = seed_shift(inst.graph)
    assert again.arrays.order.tolist() == order  # deterministic for its seed
    ours = solve(inst, "shift", Options(time_limit=5))
    assert ours.objective is not None and ours.objective <= reference


def test_the_visiting_order_is_the_one_libstdcxx_shuffles() -> None:
    # printed by `std::shuffle(v.begin(), v.end(), std::mt19937(seed))` over iota(n) (uint64),
    # g++ 12: an even and an odd n (two swap positions per draw), and n past 2**16 (one per draw)
    assert cxx_shuffle(10, 1).tolist() == [9, 0, 2, 5, 7, 4, 6, 3, 1, 8]
    assert cxx_shuffle(11, 1).tolist() == [10, 0, 6, 3, 8, 4, 2, 7, 5, 1, 9]
    assert cxx_shuffle(7, 5).tolist() == [3, 6, 0, 1, 2, 5, 4]
    big = cxx_shuffle(70000, 1)
    assert big[:8].tolist() == [7199, 23693, 65840, 9893, 62829, 19725, 36303, 54563]
    assert sorted(big.tolist()) == list(range(70000))
    assert sum(i * int(x) for i, x in enumerate(big)) % 1000003 == 697858


@pytest.mark.parametrize(
    ("inst", "poprithms"),
    [
        # poprithms' own shift (default settings), run on these graphs by benchmarks/poprithms.py
        (gen.grid(20, 50, 1, max_size=19), 140227),
        (gen.adversary(1000, 1), 1102494),
        (gen.layered(20, 50, 4), 46659),
        (gen.recompute(37, 1), 3565),
    ],
    ids=lambda x: getattr(x, "name", ""),
)
def test_the_reference_ends_at_poprithms_schedule(inst: ScheduleInstance, poprithms: int) -> None:
    state, converged = seed_shift(inst.graph)
    assert converged and state.sum_liveness == poprithms


def test_the_iterated_search_takes_the_side_descents_better_minimum() -> None:
    inst = gen.adversary(40, 15)  # the seed's procedure ends below our descent here
    ours, converged = shift_order(inst.graph, best_start(inst), "sum_liveness")
    seeds, _ = seed_shift(inst.graph)
    assert converged and seeds.sum_liveness < ours.sum_liveness
    # no kicks (patience 0): the side descent alone, then the final climb from its minimum
    stats = iterate_order(ours, patience=0, side=SeedDescent(inst.graph))
    assert stats["side_converged"] == stats["side_better"] == 1 and stats["kicks"] == 0
    assert ours.sum_liveness <= seeds.sum_liveness
    order = ours.order
    assert not check(inst, to_solution(inst, order))
    assert _objective(inst, order) == ours.sum_liveness

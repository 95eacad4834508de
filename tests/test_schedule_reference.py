"""The seed-faithful reference of poprithms' shift (heuristics/schedule_reference.py), and the
default `shift` held to it."""

from __future__ import annotations

import pytest

from tensorplan.harness.run import solve
from tensorplan.heuristics.schedule_reference import seed_shift, seed_start
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

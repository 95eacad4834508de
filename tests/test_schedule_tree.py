"""The exact out-tree sum-liveness (`problems/schedule_tree.py`): brute force on small forests
with allocs on any of an op's children, the order's own objective, refusals, and its use in
`dp` and in the bound `shift` reports."""

from __future__ import annotations

import itertools
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from tensorplan.harness.run import solve
from tensorplan.problems import schedule_gen as gen
from tensorplan.problems.core import Options, Status
from tensorplan.problems.schedule import Alloc, Op, ScheduleInstance, order_objective
from tensorplan.problems.schedule_bound import lagrangian_bound, search_bound
from tensorplan.problems.schedule_tree import Part, _pareto, tree_form, tree_optimum


def brute_force(inst: ScheduleInstance) -> int:
    """The least sum-liveness over every topological order."""
    g = inst.graph
    return min(
        order_objective(g, perm, "sum_liveness")
        for perm in itertools.permutations(range(g.n))
        if all(perm.index(u) < perm.index(v) for v in range(g.n) for u in g.preds[v])
    )


def random_forest(n: int, seed: int) -> ScheduleInstance:
    """An out-forest of `n` ops (each after a random earlier op, or a root), each op with 0-2
    allocs of size 1-9 used by it and a random subset of its children."""
    rng = random.Random(seed)
    parent = [rng.randrange(-1, v) if v else -1 for v in range(n)]
    children: list[list[int]] = [[] for _ in range(n)]
    for v, p in enumerate(parent):
        if p >= 0:
            children[p].append(v)
    ops = tuple(Op(f"o{v}", (f"o{parent[v]}",) if parent[v] >= 0 else ()) for v in range(n))
    allocs = []
    for v in range(n):
        for k in range(rng.randint(0, 2)):
            users = [c for c in children[v] if rng.random() < 0.6]
            ids = (f"o{v}", *(f"o{c}" for c in users))
            allocs.append(Alloc(f"a{v}_{k}", rng.randint(1, 9), ids))
    return ScheduleInstance(ops, tuple(allocs), "sum_liveness", f"forest-{n}-s{seed}")


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 8), seed=st.integers(0, 100_000))
def test_the_tree_optimum_is_the_brute_force_one(n: int, seed: int) -> None:
    """On random out-forests whose allocs are each used by an op and any of its children, the
    value is the least over every order, and the order returned is topological and has it."""
    inst = random_forest(n, seed)
    g = inst.graph
    found = tree_optimum(g, 10.0)
    assert found is not None
    value, order = found
    assert sorted(order) == list(range(g.n))
    assert all(order.index(u) < order.index(v) for v in range(g.n) for u in g.preds[v])
    assert order_objective(g, order, "sum_liveness") == value == brute_force(inst)


def test_graphs_that_are_not_out_trees_are_refused() -> None:
    """An op after two ops (a grid), or an alloc used by two siblings without their parent, or
    by an op and a grandchild: no tree form, no value."""
    assert tree_form(gen.grid(2, 3, 1).graph) is None
    chain = (Op("a"), Op("b", ("a",)), Op("c", ("b",)), Op("d", ("a",)))
    siblings = ScheduleInstance(chain, (Alloc("x", 2, ("b", "d")),), "sum_liveness", "siblings")
    grandchild = ScheduleInstance(chain, (Alloc("x", 2, ("a", "c")),), "sum_liveness", "far")
    for inst in (siblings, grandchild):
        assert tree_form(inst.graph) is None
        assert tree_optimum(inst.graph, 1.0) is None


def test_dp_proves_a_300_op_tree_at_once_and_shift_reports_its_optimum_as_bound() -> None:
    """On a random 300-op tree `dp` (downsets: 100 ops at most before) returns the tree
    optimum as proven; it is at most `shift`'s objective, at least the Lagrangian bound, and
    it is the bound `shift`'s search reports."""
    inst = gen.tree(300, 2)
    exact = solve(inst, "dp", Options(time_limit=10.0))
    assert exact.status is Status.OPTIMAL and exact.objective is not None
    heuristic = solve(inst, "shift", Options(time_limit=2.0))
    assert heuristic.objective is not None
    assert lagrangian_bound(inst, int(heuristic.objective), 1.0) <= exact.objective
    assert exact.objective <= heuristic.objective
    assert search_bound(inst, int(heuristic.objective), 5.0) == exact.objective


def test_a_cheaper_part_is_kept_beside_one_with_a_lower_phi() -> None:
    """Two parts of the same ops (weight 3, length 2): blocks (5, 1), (-2, 1) have phi at or
    below one block (3, 2) at every ratio (at 1.5: -0.5 against 3), so at no higher cost they
    dominate it, while at a higher cost both are kept: the cheaper one may lose in a larger
    part."""
    low = ((5, 1, [0]), (-2, 1, [1]))
    flat = ((3, 2, [0, 1]),)
    assert _pareto([Part(4, low), Part(5, flat)]) == [Part(4, low)]
    assert _pareto([Part(5, low), Part(4, flat)]) == [Part(4, flat), Part(5, low)]

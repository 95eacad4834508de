"""Liu's pebbling bound (problems/schedule_pebble.py): the algorithm against brute force on its
own model, the bound against brute force on schedule graphs, and where it beats the hulls."""

from __future__ import annotations

import functools
import random
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorplan.problems import schedule_gen as gen
from tensorplan.problems import schedule_pebble
from tensorplan.problems.schedule import (
    Alloc,
    Op,
    ScheduleInstance,
    forced_live,
    lower_bound,
)
from tensorplan.problems.schedule_pebble import OverWork, forest, liu_traversal, pebble_bound


def liu_peak(parent: list[int], file: list[float], work: list[float], order: list[int]) -> float:
    """The peak of a traversal in Liu's model, step by step; asserts children come first."""
    done = [False] * len(parent)
    peak = 0.0
    for x in order:
        assert all(done[c] for c, p in enumerate(parent) if p == x)
        held = sum(file[y] for y, p in enumerate(parent) if done[y] and (p < 0 or not done[p]))
        peak = max(peak, held + file[x] + work[x])
        done[x] = True
    assert all(done)
    return peak


def liu_brute_force(parent: list[int], file: list[float], work: list[float]) -> float:
    """The least peak of Liu's model over every traversal (DP over the sets already run)."""
    n = len(parent)
    kids = [sum(1 << c for c, p in enumerate(parent) if p == x) for x in range(n)]

    @functools.cache
    def best(done: int) -> float:
        if done == (1 << n) - 1:
            return 0.0
        held = sum(
            file[y] for y, p in enumerate(parent) if done >> y & 1 and (p < 0 or not done >> p & 1)
        )
        return min(
            max(held + file[x] + work[x], best(done | 1 << x))
            for x in range(n)
            if not done >> x & 1 and kids[x] & done == kids[x]
        )

    return best(0)


@settings(max_examples=150, deadline=None)
@given(
    n=st.integers(1, 8),
    seed=st.integers(0, 10**6),
    roots=st.floats(0, 0.4),
)
def test_liu_traversal_is_optimal_on_its_model(n: int, seed: int, roots: float) -> None:
    """Random in-forests with fractional files and work spaces: Liu's merge of hill-valley
    segments reaches the brute-force optimum, and its traversal has exactly that peak."""
    r = random.Random(seed)
    parent = [-1] + [-1 if r.random() < roots else r.randrange(i) for i in range(1, n)]
    file = [r.choice([0.0, 0.5, 1.0, 2.0, 3.0, 7.0]) for _ in range(n)]
    work = [r.choice([0.0, 0.0, 1.0, 4.0]) for _ in range(n)]
    peak, order = liu_traversal(parent, file, work, order=True)
    assert abs(peak - liu_brute_force(parent, file, work)) < 1e-9
    assert abs(liu_peak(parent, file, work, order) - peak) < 1e-9
    assert liu_traversal(parent, file, work) == (peak, [])


def downset_peak(inst: ScheduleInstance) -> int:
    """The least peak by DP over the sets of ops already run (fine for trees of 20 ops and
    any DAG of 8)."""
    g = inst.graph
    full = (1 << g.n) - 1
    preds = [sum(1 << u for u in g.preds[v]) for v in range(g.n)]
    users = [sum(1 << u for u in ops) for ops in g.alloc_ops]

    @functools.cache
    def best(done: int) -> int:
        if done == full:
            return 0
        out = None
        for v in range(g.n):
            if not done >> v & 1 and preds[v] & done == preds[v]:
                after = done | 1 << v
                live = sum(
                    s
                    for s, u in zip(g.sizes, users, strict=True)
                    if u >> v & 1 or (u & done and u & ~after & full)
                )
                value = max(live, best(after))
                out = value if out is None else min(out, value)
        assert out is not None
        return out

    return best(0)


@settings(max_examples=80, deadline=None)
@given(n=st.integers(1, 8), seed=st.integers(0, 10**6), extra=st.integers(0, 3))
def test_pebble_bound_is_at_most_the_optimum(n: int, seed: int, extra: int) -> None:
    """Random trees, with extra allocs used by random ops (not parent and children: work
    space in the model), and random DAGs (a forest is kept, the other edges dropped)."""
    r = random.Random(seed)
    tree = gen.tree(n, seed, objective="peak")
    ids = [o.id for o in tree.ops]
    more = tuple(
        Alloc(f"x{k}", r.randint(1, 9), tuple(r.sample(ids, r.randint(1, min(3, n)))))
        for k in range(extra)
    )
    dag_ops = tuple(
        Op(f"o{i}", tuple(f"o{j}" for j in range(i) if r.random() < 0.35)) for i in range(n)
    )
    dag_allocs = tuple(
        Alloc(f"a{k}", r.randint(1, 5), tuple(r.sample([o.id for o in dag_ops], r.randint(1, n))))
        for k in range(n)
    )
    dag = ScheduleInstance(dag_ops, dag_allocs, "peak")
    for inst in (tree, replace(tree, allocs=tree.allocs + more), dag):
        assert pebble_bound(inst.graph) <= downset_peak(inst)


def test_pebble_bound_beats_the_hulls_on_trees() -> None:
    """Random trees: the hulls only see a parent's output with one child at a time; the model
    sees the subtrees' traversals interleave. Above the hulls on some 20-op trees (at most the
    optimum, by DP) and well above on 1,000 ops (16 against 12); `lower_bound` takes the
    higher."""
    better = 0
    for seed in range(20):
        inst = gen.tree(20, seed, objective="peak")
        hull = int(max(forced_live(inst.graph)))
        bound = pebble_bound(inst.graph)
        assert bound <= downset_peak(inst)
        assert lower_bound(inst) == max(hull, bound)
        better += bound > hull
    assert better >= 3
    big = gen.tree(1000, 1, objective="peak")
    assert pebble_bound(big.graph) >= int(max(forced_live(big.graph))) + 3


def test_forest_relaxation_of_a_tree_keeps_every_output() -> None:
    """On the `tree` family each op's output is shared by its children (or, on a leaf, work
    space at the leaf); a DAG's second parent is dropped, its output's other users too."""
    inst = gen.tree(30, 4)
    g = inst.graph
    fr = forest(g)
    assert list(fr.parent) == [p[0] if p else -1 for p in g.preds]
    leaves = [v for v in range(g.n) if not g.succs[v]]
    assert len(fr.shared) == g.n - len(leaves)
    assert sum(fr.work) == sum(g.sizes[v] for v in leaves)  # alloc v: op v's output
    diamond = ScheduleInstance(
        (Op("a"), Op("b", ("a",)), Op("c", ("a",)), Op("d", ("b", "c"))),
        (Alloc("A", 3, ("a", "b", "c")), Alloc("C", 2, ("c", "d")), Alloc("B", 1, ("b", "d"))),
        "peak",
    )
    fr = forest(diamond.graph)
    assert fr.parent == (-1, 0, 0, 1)  # d keeps b (first of equals)
    assert fr.shared == ((0, (1, 2)), (2, (3,)))  # C is work space at c
    assert fr.work == (0.0, 0.0, 2.0, 0.0)


def test_liu_traversal_gives_up_past_its_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """A star merges its 99 leaves' segments at the root: a budget below that raises
    `OverWork`, and `pebble_bound` then gives 0 (the hulls stand) rather than spend the time.
    A chain merges nothing (each op takes its one child's segments as they are)."""
    star = [-1] + [0] * 99
    file, work = [1.0] * 100, [0.0] * 100
    assert liu_traversal(star, file, work, budget=99)[0] == 100.0
    with pytest.raises(OverWork):
        liu_traversal(star, file, work, budget=98)
    assert liu_traversal([-1, *range(99)], file, work, budget=0)[0] == 2.0
    tree = gen.tree(100, 0, objective="peak")
    assert pebble_bound(tree.graph) > 0
    monkeypatch.setattr(schedule_pebble, "WORK", 50)
    assert pebble_bound(tree.graph) == 0

"""The cut bound (`problems.schedule_cut`): the frontier DP finds the lightest ideal cut of every
size (checked against enumeration of all ideals, and against a grid-only staircase DP), the
bounds it gives are at most the brute-force optima of both objectives, and `shift` reports it."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorplan.harness.run import solve
from tensorplan.heuristics.schedule import kahn
from tensorplan.models.schedule import _rest_bound
from tensorplan.problems import schedule_gen as gen
from tensorplan.problems.core import Options, Status
from tensorplan.problems.schedule import (
    Graph,
    ScheduleInstance,
    closure_counts,
    lower_bound,
    order_objective,
    spans,
)
from tensorplan.problems.schedule_bound import lagrangian_bound, warm
from tensorplan.problems.schedule_cut import (
    MARKED,
    best_cuts,
    bound_of,
    boundary_chains,
    cut_bound,
    cut_order,
    depth_first,
    prefix_cuts,
    signature_bound,
    signature_bounds,
    signature_rest,
    used_size,
)


def small(family: str, n: int, seed: int, objective: str = "sum_liveness") -> ScheduleInstance:
    """A small instance of a family; 'reversed' lists an adversary DAG's ops backwards (op
    indices then run against the precedence)."""
    if family == "tree":
        return gen.tree(n, seed, objective=objective)  # type: ignore[arg-type]
    if family == "grid":
        return gen.grid(2, max(n // 2, 1), seed, objective=objective)  # type: ignore[arg-type]
    inst = gen.adversary(max(n, 2), seed, objective=objective)  # type: ignore[arg-type]
    if family == "reversed":
        inst = ScheduleInstance(inst.ops[::-1], inst.allocs, inst.objective, inst.name)
    return inst


def ideals(g: Graph) -> Iterator[tuple[int, int]]:
    """Every subset of ops closed under predecessors (a bit mask) with its cross size."""
    for mask in range(1 << g.n):
        if any(mask >> v & 1 and any(not mask >> u & 1 for u in g.preds[v]) for v in range(g.n)):
            continue
        cross = sum(
            size
            for size, vs in zip(g.sizes, g.alloc_ops, strict=True)
            if any(mask >> u & 1 for u in vs) and any(not mask >> u & 1 for u in vs)
        )
        yield mask, cross


def ideal_cuts(g: Graph) -> list[int]:
    """cut(k) by enumerating every ideal."""
    best = [-1] * (g.n + 1)
    for mask, cross in ideals(g):
        k = mask.bit_count()
        best[k] = cross if best[k] < 0 else min(best[k], cross)
    return best


def optimum(inst: ScheduleInstance) -> int:
    g = inst.graph
    return min(
        order_objective(g, perm, inst.objective)
        for perm in itertools.permutations(range(g.n))
        if all(perm.index(u) < perm.index(v) for v in range(g.n) for u in g.preds[v])
    )


FAMILIES = st.sampled_from(["tree", "grid", "adversary", "reversed"])


def small_both(test: Callable[..., None]) -> Callable[..., None]:
    """Hypothesis over instances of up to 7 ops (brute force over orders), either objective."""
    cases = given(
        n=st.integers(1, 7),
        seed=st.integers(0, 10_000),
        family=FAMILIES,
        objective=st.sampled_from(["sum_liveness", "peak"]),
    )
    return settings(max_examples=40, deadline=None)(cases(test))


@settings(max_examples=80, deadline=None)
@given(n=st.integers(1, 9), seed=st.integers(0, 10_000), family=FAMILIES)
def test_the_dp_finds_the_lightest_ideal_cut_of_every_size(n: int, seed: int, family: str) -> None:
    """Trees, grids and random DAGs with allocs shared by unrelated ops, in both depth-first
    orders: the DP's cut(k) equals the enumeration's for every k."""
    g = small(family, n, seed).graph
    expected = ideal_cuts(g)
    for last_first in (True, False):
        cuts = prefix_cuts(g, depth_first(g, last_first=last_first))
        assert cuts is not None
        assert cuts.tolist() == expected


@small_both
def test_the_cut_bound_is_at_most_the_optimum(
    n: int, seed: int, family: str, objective: str
) -> None:
    inst = small(family, n, seed, objective)
    bound = cut_bound(inst.graph, objective, 10.0)
    assert bound is not None
    assert bound <= optimum(inst)


def staircase_cuts(rows: int, cols: int, sizes: np.ndarray) -> list[int]:
    """cut(k) of a grid (`schedule_gen.grid`) by its own DP: an ideal is a staircase of row
    lengths lam_0 >= lam_1 >= ...; the output of (i, j) crosses it when (i, j) is in and its
    right or lower neighbour is out."""
    inf = 10**18
    n = rows * cols

    def row_cost(i: int, a: int, b: int) -> int:  # lam_i = a, lam_(i+1) = b
        if a == 0:
            return 0
        last = i == rows - 1
        cost = 0 if last else int(sizes[i, b:a].sum())
        if a < cols and (last or a - 1 < b):
            cost += int(sizes[i, a - 1])
        return cost

    f = np.full((cols + 1, n + 1), inf, dtype=np.int64)  # [lam_i, cells so far]
    for a in range(cols + 1):
        f[a, a] = 0
    for i in range(rows - 1):
        nxt = np.full_like(f, inf)
        for a in range(cols + 1):
            for b in range(a + 1):
                cand = np.full(n + 1, inf, dtype=np.int64)
                cand[b:] = f[a, : n + 1 - b] + row_cost(i, a, b)
                np.minimum(nxt[b], cand, out=nxt[b])
        f = nxt
    last = [row_cost(rows - 1, a, 0) for a in range(cols + 1)]
    return [min(int(f[a, k]) + last[a] for a in range(cols + 1)) for k in range(n + 1)]


@pytest.mark.parametrize(("rows", "cols", "seed"), [(3, 7, 1), (6, 9, 2), (9, 5, 3)])
def test_grid_cuts_match_the_staircase_dp(rows: int, cols: int, seed: int) -> None:
    inst = gen.grid(rows, cols, seed)
    g = inst.graph
    sizes = np.asarray(g.sizes).reshape(rows, cols)
    cuts = prefix_cuts(g, depth_first(g, last_first=True))
    assert cuts is not None
    assert cuts.tolist() == staircase_cuts(rows, cols, sizes)


def test_the_cut_bound_is_far_above_the_others_on_a_grid() -> None:
    """A 10 x 20 grid: the hull counts an output live over its three users only and the
    Lagrangian bound relaxes the grid to a forest; the cut bound knows that about one output
    per row is live at every step: 40 % above both, and at least 90 % of `shift`'s objective."""
    warm()
    inst = gen.grid(10, 20, 1)
    g = inst.graph
    objective = solve(inst, "shift", Options(time_limit=2.0)).objective
    assert objective is not None
    upper = int(objective)
    cut = cut_bound(g, "sum_liveness", 10.0)
    assert cut is not None
    assert cut > 1.4 * max(lower_bound(inst), lagrangian_bound(inst, upper, 5.0))
    assert 0.9 * upper <= cut <= upper


def test_the_dp_gives_up_past_its_state_cap() -> None:
    """Random DAGs with allocs shared far apart keep many states: capped, the DP returns None
    (no bound) rather than a relaxed value."""
    g = gen.adversary(60, 3).graph
    assert prefix_cuts(g, depth_first(g, last_first=True), max_states=4) is None
    assert prefix_cuts(g, depth_first(g, last_first=True), seconds=0.0) is None


def test_shift_reports_the_cut_bound_for_peak() -> None:
    """Peak instances had only the hull bound (one op's users: 18 on a 10 x 20 grid whose
    `shift` peak is above 30); `shift` now reports max_k cut(k), or the signature bounds' best
    where it is higher (36 -> 37 here), sound against its objective."""
    inst = gen.grid(10, 20, 1, objective="peak")
    r = solve(inst, "shift", Options(time_limit=3.0))
    assert r.bound is not None and r.objective is not None
    assert lower_bound(inst) < r.bound <= r.objective
    found = cut_order(inst.graph, 10.0)
    assert found is not None
    cut = bound_of(inst.graph, found[1], "peak")
    signed = signature_bounds(inst.graph, found[0], "peak", 10.0)
    assert signed is not None and signed.bound(inst.graph, "peak") >= cut
    assert r.bound == signed.bound(inst.graph, "peak")


def test_random_orders_give_the_same_cuts() -> None:
    """The DP is exact in any topological order (only its state count depends on it)."""
    inst = gen.adversary(9, 5)
    g = inst.graph
    reference = prefix_cuts(g, depth_first(g, last_first=True))
    assert reference is not None
    for seed in range(5):
        cuts = prefix_cuts(g, kahn(g, "random", seed))
        assert cuts is not None
        assert cuts.tolist() == reference.tolist()


def remaining_costs(g: Graph, order: tuple[int, ...], objective: str) -> list[int]:
    """Per k, the cost of positions k..n-1 of `order`: summed (sum-liveness) or maxed (peak)."""
    first, last = spans(g, order)
    live = [
        sum(s for s, f, la in zip(g.sizes, first, last, strict=True) if f <= p <= la)
        for p in range(g.n)
    ]
    tail = [0] * (g.n + 1)
    for p in range(g.n - 1, -1, -1):
        tail[p] = max(tail[p + 1], live[p]) if objective == "peak" else tail[p + 1] + live[p]
    return tail


@small_both
def test_the_dp_pruning_bound_never_passes_what_is_left(
    n: int, seed: int, family: str, objective: str
) -> None:
    """`dp`'s bound on the cost after a downset of k ops (cut values included, and with the
    signature of two sets counted, every other op and every fourth from the second, its paths
    from the downset's size and counts) is at most what positions k..n-1 cost in every order
    that starts with that downset."""
    g = small(family, n, seed, objective).graph
    peak = objective == "peak"
    order = depth_first(g, last_first=True)
    signature = signature_rest(g, order, [range(0, g.n, 2), range(1, g.n, 4)], objective, 10.0)
    assert signature is not None
    bounds = [
        _rest_bound(g, peak, best_cuts(g, 10.0)),
        _rest_bound(g, peak, best_cuts(g, 10.0), signature),
    ]
    for perm in itertools.permutations(range(g.n)):
        if any(perm.index(u) > perm.index(v) for v in range(g.n) for u in g.preds[v]):
            continue
        tail = remaining_costs(g, perm, objective)
        mask = 0
        for k in range(g.n + 1):
            assert all(rest(mask, k) <= tail[k] for rest in bounds)
            if k < g.n:
                mask |= 1 << perm[k]


@pytest.mark.parametrize("inst", [gen.grid(4, 25, 1), gen.grid(4, 50, 1)], ids=lambda i: i.name)
def test_dp_proves_grid_optima_with_few_downsets(inst: ScheduleInstance) -> None:
    """With each op's own allocs as its bound on the rest, `dp` proved these grids by visiting
    9,135 and 40,193 downsets; the cut values pruned all but 925 and 1,432, and now the
    signature bound of both boundary chains that its warm start reports meets the start's
    objective, so no downset is visited (and `shift`'s objective is the optimum)."""
    r = solve(inst, "dp", Options(time_limit=30.0))
    assert r.status is Status.OPTIMAL
    assert r.stats.get("states", 0) < 2_000  # no count when the bound alone meets the start
    assert r.objective == solve(inst, "shift", Options(time_limit=2.0)).objective


def signature_by_enumeration(g: Graph, counters: list[list[int]], objective: str) -> int:
    """The signature bound from every ideal: the lightest cut per (size, ops of each disjoint
    set inside), then the best path over sizes on which one count at most moves by one a
    step."""
    light: dict[tuple[int, tuple[int, ...]], int] = {}
    for mask, cross in ideals(g):
        key = (mask.bit_count(), tuple(sum(mask >> x & 1 for x in ops) for ops in counters))
        light[key] = min(light.get(key, cross), cross)
    join = max if objective == "peak" else int.__add__

    def moves(counts: tuple[int, ...]) -> list[tuple[int, ...]]:
        """The counts themselves, and each with one count one higher."""
        ups = [(*counts[:i], c + 1, *counts[i + 1 :]) for i, c in enumerate(counts)]
        return [counts, *ups]

    path = {tuple(0 for _ in counters): 0}
    for k in range(1, g.n):
        after: dict[tuple[int, ...], int] = {}
        for counts, cost in path.items():
            for nxt in moves(counts):
                if (k, nxt) in light:
                    value = join(cost, light[k, nxt])
                    after[nxt] = min(after.get(nxt, value), value)
        path = after
    full = tuple(len(ops) for ops in counters)
    final = min(cost for counts, cost in path.items() if full in moves(counts))
    return final if objective == "peak" else used_size(g) + final


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(2, 7),
    seed=st.integers(0, 10_000),
    family=FAMILIES,
    objective=st.sampled_from(["sum_liveness", "peak"]),
    picks=st.lists(st.integers(0, 2), min_size=7, max_size=7),
)
def test_the_signature_bound_is_the_enumerated_one_and_at_most_the_optimum(
    n: int, seed: int, family: str, objective: str, picks: list[int]
) -> None:
    """Any one or two disjoint sets of counted ops (chains or not): the DP's signature bound
    equals the one built from every ideal, lies between the cut bound and the brute-force
    optimum, is at least each set's alone, and with no set it is the cut bound itself."""
    inst = small(family, n, seed, objective)
    g = inst.graph
    sets = [[v for v in range(g.n) if picks[v] == c] for c in (1, 2)]
    order = depth_first(g, last_first=True)
    one = signature_bound(g, order, sets[:1], objective, 10.0)
    both = signature_bound(g, order, sets, objective, 10.0)
    cut = cut_bound(g, objective, 10.0)
    assert one is not None and both is not None and cut is not None
    assert one == signature_by_enumeration(g, sets[:1], objective)
    assert both == signature_by_enumeration(g, sets, objective)
    alone = signature_bound(g, order, sets[1:], objective, 10.0)
    assert alone is not None
    assert cut <= max(one, alone) <= both <= optimum(inst)
    assert signature_bound(g, order, [], objective, 10.0) == cut


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 40), seed=st.integers(0, 10_000), family=FAMILIES)
def test_boundary_chains_are_chains_from_the_widest_source(n: int, seed: int, family: str) -> None:
    """Each chain starts at the op with the most descendants (the lowest index on ties), steps
    along edges to a successor with the fewest ancestors, ends at a sink or at `MARKED` ops,
    and the two chains differ (a path graph has one)."""
    g = small(family, n, seed).graph
    ancestors, descendants = closure_counts(g)
    chains = boundary_chains(g)
    start = max(range(g.n), key=lambda v: (descendants[v], -v))
    if not g.succs[start]:
        assert chains == []
    assert len(chains) <= 2
    for chain in chains:
        assert chain[0] == start and 1 < len(chain) <= MARKED
        for u, v in itertools.pairwise(chain):
            assert v in g.succs[u]
            assert ancestors[v] == min(ancestors[w] for w in g.succs[u])
        assert len(chain) == MARKED or not g.succs[chain[-1]]
    assert len({tuple(chain) for chain in chains}) == len(chains)


def test_overlapping_counters_count_an_op_once() -> None:
    """An op in two sets is counted by the first only (a path moves one count a step), so the
    bound with a set repeated is the bound with it once; counting more ops than a state's
    slot holds is refused."""
    inst = gen.grid(3, 4, 1, max_size=19)
    g = inst.graph
    order = depth_first(g, last_first=True)
    row = [0, 1, 2, 3]
    once = signature_bound(g, order, [row], "sum_liveness", 10.0)
    assert once is not None
    assert signature_bound(g, order, [row, row[1:]], "sum_liveness", 10.0) == once
    with pytest.raises(ValueError, match="127"):
        prefix_cuts(g, order, counters=[list(range(128))])


def test_a_grid_row_as_signature_lifts_the_cut_bound() -> None:
    """On a 3 x 6 grid with sizes 1-19, the chains `boundary_chains` counts (from the source
    along the first row then the last column, and down the first column then along the last
    row), counted together (the second without the ops they share), give a sum-liveness bound
    above the cut bound (585 against 580; each chain alone at most 583), equal to the
    enumeration's, and at most the proven optimum (`dp`: 585)."""
    inst = gen.grid(3, 6, 1, max_size=19)
    g = inst.graph
    chains = boundary_chains(g)
    assert chains == [[0, 1, 2, 3, 4, 5, 11, 17], [0, 6, 12, 13, 14, 15, 16, 17]]
    order = depth_first(g, last_first=True)
    cut = cut_bound(g, "sum_liveness", 10.0)
    signed = signature_bounds(g, order, "sum_liveness", 10.0)
    exact = solve(inst, "dp", Options(time_limit=30.0))
    assert exact.status is Status.OPTIMAL and exact.objective is not None
    assert cut is not None and signed is not None
    best = signed.bound(g, "sum_liveness")
    assert cut < best <= exact.objective
    alone = [signature_by_enumeration(g, [chain], "sum_liveness") for chain in chains]
    sets = [chains[0], [v for v in chains[1] if v not in chains[0]]]
    assert best == signature_by_enumeration(g, sets, "sum_liveness") >= max(alone)


def test_the_signature_prunes_dp_downsets(monkeypatch: pytest.MonkeyPatch) -> None:
    """`dp` prunes with the signature's paths where the cut DP completes: on a 5 x 40 grid it
    proves the same optimum through fewer downsets than with the cut values alone."""
    import tensorplan.models.schedule as models

    inst = gen.grid(5, 40, 1)
    signed = solve(inst, "dp", Options(time_limit=30.0))
    real = models.rest_tables
    monkeypatch.setattr(models, "rest_tables", lambda g, o, s: (real(g, o, s)[0], None))
    plain = solve(inst, "dp", Options(time_limit=30.0))
    assert signed.status is plain.status is Status.OPTIMAL
    assert signed.objective == plain.objective
    assert signed.stats["states"] < plain.stats["states"]

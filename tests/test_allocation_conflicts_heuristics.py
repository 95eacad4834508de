"""The heuristics on concurrent lifetimes (`heuristics.allocation_conflicts`): the greedy over the
conflict graph against a literal reference, the orders that cannot raise the peak, every solver
that declares `conflicts` on the concurrent generator, and the refusal of those that do not."""

from __future__ import annotations

import functools
import itertools
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorplan.harness import registry
from tensorplan.harness.run import solve
from tensorplan.heuristics import allocation_conflicts as hc
from tensorplan.problems import allocation_conflicts as ac
from tensorplan.problems.allocation import (
    AllocationInstance,
    AllocationSolution,
    Buffer,
    check,
    lower_bound,
    peak,
    upper_bound,
)
from tensorplan.problems.allocation_gen import concurrent_family, sample
from tensorplan.problems.core import Options, Progress, Status

SUPPORTING = ("ffd", "bfd", "multistart", "fast")


@pytest.fixture(autouse=True, scope="module")
def _compiled() -> None:
    """The kernels built (or loaded) before anything is timed, as `tensorplan warm` does."""
    hc.warm()


def concurrent(sizes: list[int], pairs: list[tuple[int, int]], alignment: int = 1, **kw):
    bufs = tuple(Buffer(str(i), s, 0, 0) for i, s in enumerate(sizes))
    return AllocationInstance(bufs, alignment, conflicts=ac.Pairs.of(pairs), **kw)


def reference(inst: AllocationInstance, order, best_fit: bool = False) -> list[int]:
    """The greedy, literally. First fit: of 0 and every aligned end of a placed neighbour, the
    lowest clear of all placed neighbours. Best fit: the placed neighbours' ranges by start,
    each closing the gap above the aligned end of those before it; the fitting gap of least
    room left (ties: the lowest), else the aligned top (as `allocation_kernels.place_py`)."""
    a, size = inst.alignment, [b.size for b in inst.buffers]
    mates: dict[int, set[int]] = {i: set() for i in range(len(size))}
    for i, j in inst.conflicts or ():
        mates[i].add(j)
        mates[j].add(i)
    off = [-1] * len(size)
    for i in order:
        spans = sorted((off[j], off[j] + size[j]) for j in mates[i] if off[j] >= 0)
        if not best_fit:
            cands = sorted({0} | {-(-hi // a) * a for _, hi in spans})
            off[i] = next(c for c in cands if all(hi <= c or c + size[i] <= lo for lo, hi in spans))
            continue
        cur, best, room = 0, -1, -1
        for lo, hi in spans:
            if lo - cur - size[i] >= 0 and (best < 0 or lo - cur - size[i] < room):
                best, room = cur, lo - cur - size[i]
            cur = max(cur, -(-hi // a) * a)
        off[i] = cur if best < 0 else best
    return off


def test_first_fit_by_hand() -> None:
    # sizes d=5, a=4, b=3, c=2 (ffd order: 3, 0, 1, 2); conflicts a-d, a-b, b-c, c-d
    inst = concurrent([4, 3, 2, 5], [(0, 3), (0, 1), (1, 2), (2, 3)])
    res = registry.solver("allocation", "ffd").run(inst, Options())
    assert res.solution == AllocationSolution((5, 0, 5, 0)) and res.objective == 9
    aligned = concurrent([4, 3, 2, 5], [(0, 3), (0, 1), (1, 2), (2, 3)], alignment=4)
    res = registry.solver("allocation", "ffd").run(aligned, Options())
    assert res.solution == AllocationSolution((8, 0, 8, 0)) and res.objective == 12


def test_best_fit_takes_the_tightest_gap() -> None:
    # A at 0, P above it at 4, B at 6, Q at 8; X meets only P and Q: gaps [0, 4) and [6, 8)
    inst = concurrent(
        [4, 2, 2, 12, 2], [(0, 1), (0, 2), (1, 2), (0, 3), (1, 3), (2, 3), (1, 4), (3, 4)]
    )
    a = hc.conflict_arrays(inst)
    first, top = a.place(np.arange(5), False)
    assert first.tolist() == [0, 4, 6, 8, 0] and top == 20
    best, _ = a.place(np.arange(5), True)
    assert best.tolist() == [0, 4, 6, 8, 6]


@st.composite
def graphs(draw) -> AllocationInstance:
    n = draw(st.integers(1, 12))
    sizes = draw(st.lists(st.integers(1, 20), min_size=n, max_size=n))
    every = list(itertools.combinations(range(n), 2))
    pairs = draw(st.lists(st.sampled_from(every), unique=True)) if every else []
    return concurrent(sizes, pairs, draw(st.integers(1, 4)))


@settings(max_examples=150, deadline=None)
@given(
    graphs(),
    st.randoms(use_true_random=False),
    st.booleans(),
    st.sampled_from(["packed", "argsort", "dense"]),
)
def test_greedy_is_the_reference_and_never_overlaps(inst, rnd, best_fit, path) -> None:
    """On random small graphs: the compiled greedy (both key paths of the rows, and the walk
    by offset through the bit matrix) is the literal one, the packing passes the checker, and
    it is never above stacking every buffer."""
    order = list(range(len(inst.buffers)))
    rnd.shuffle(order)
    a = hc.conflict_arrays(inst)
    shift = 0 if path == "argsort" else None
    bits = hc.bit_rows(len(a), a.indptr, a.indices) if path == "dense" else None
    offsets, top = hc.pack(
        a.size, a.indptr, a.indices, order, a.alignment, best_fit=best_fit, shift=shift, bits=bits
    )
    assert offsets.tolist() == reference(inst, order, best_fit)
    sol = AllocationSolution(tuple(offsets.tolist()))
    assert check(inst, sol) == [] and top == peak(inst, sol) <= upper_bound(inst)


@pytest.mark.parametrize("seed", [1, 2])
def test_dense_graphs_walk_by_offset_to_the_same_packings(seed: int) -> None:
    """A dense graph (`DENSE_SHARE`) packs through the bit matrix, a sparse one through the
    rows; on the dense one both give the same packings for the orders the search uses, with or
    without a cutoff."""
    rng = np.random.default_rng(seed)
    sparse = hc.conflict_arrays(concurrent_family(2000, seed))
    assert sparse.bits is None
    n = 300
    pairs = [(i, j) for i, j in itertools.combinations(range(n), 2) if rng.random() < 0.5]
    inst = concurrent(rng.integers(1, 1000, n).tolist(), pairs, alignment=8)
    a = hc.conflict_arrays(inst)
    assert a.bits is not None and a.bits.shape == (n, 5)
    offsets, top = a.place(hc.sort_order(a, "size"))
    for fit, order in itertools.product(
        (False, True), (rng.permutation(n), hc.extension_order(a, offsets, rng, False))
    ):
        for cutoff in (None, top):
            want = hc.pack(a.size, a.indptr, a.indices, order, 8, best_fit=fit, cutoff=cutoff)
            got = a.place(order, fit, cutoff)
            assert got[1] == want[1] and (got[0] == want[0]).all()


def test_cutoff_stops_at_the_peak() -> None:
    inst = concurrent_family(150, 4)
    a = hc.conflict_arrays(inst)
    order = hc.sort_order(a, "size")
    offsets, top = a.place(order)
    part, cut = a.place(order, cutoff=top)
    assert cut >= top and (part < 0).any()
    full, full_top = a.place(order, cutoff=top + 1)
    assert full_top == top and (full == offsets).all()


def test_orders_that_cannot_raise_the_peak() -> None:
    """First fit in a random extension order, or the compaction order, keeps or lowers the peak
    (the mirrored order too at alignment 1)."""
    rng = np.random.default_rng(0)
    for seed, alignment in itertools.product((1, 2), (1, 8)):
        base = concurrent_family(200, seed)
        inst = AllocationInstance(base.buffers, alignment, conflicts=base.conflicts)
        a = hc.conflict_arrays(inst)
        offsets, top = a.place(hc.sort_order(a, "degree"), True)
        assert a.place(hc.compaction_order(a, offsets))[1] <= top
        for _ in range(20):
            mirror = alignment == 1 and bool(rng.random() < 0.5)
            new, new_top = a.place(hc.extension_order(a, offsets, rng, mirror))
            assert new_top <= top
            assert mirror or (new <= offsets).all()  # no buffer moved up
            offsets, top = new, new_top


@functools.cache
def family(n: int, seed: int) -> tuple[AllocationInstance, int]:
    inst = concurrent_family(n, seed)
    return inst, lower_bound(inst)


@pytest.mark.parametrize("solver", SUPPORTING)
@pytest.mark.parametrize(("n", "seed"), [(20, 1), (60, 2), (450, 1), (450, 3)])
def test_supporting_solvers_pack_concurrent_instances(solver: str, n: int, seed: int) -> None:
    inst, bound = family(n, seed)
    chosen = registry.solver("allocation", solver)
    assert "conflicts" in chosen.supports
    res = chosen.run(inst, Options(time_limit=0.2, seed=seed))
    assert res.status is Status.FEASIBLE and res.solution is not None
    assert check(inst, res.solution) == []
    assert res.objective == peak(inst, res.solution) >= bound
    if solver in ("multistart", "fast"):
        ffd = registry.solver("allocation", "ffd").run(inst, Options()).objective
        assert ffd is not None and res.objective <= ffd  # the portfolio starts with ffd
    assert res.runtime_s < 1.0


def test_no_time_for_the_heavy_clique(monkeypatch: pytest.MonkeyPatch) -> None:
    """With less time left than the heavy clique may take, the portfolio neither grows it (no
    bound from it, no orderings by it) nor fails: it still packs."""
    monkeypatch.setattr(hc, "HEAVY_CLIQUE_S", 3600.0)
    inst = concurrent_family(120, 3)
    search = hc.ConcurrentSearch(hc.conflict_arrays(inst), 0)
    search.run(time.perf_counter() + 0.3)
    assert "clique" not in vars(search.arrays)
    assert search.top >= 0 and not any(k.startswith("clique") for k in search.label.split("/"))
    sol = AllocationSolution(tuple(int(x) for x in search.offsets))
    assert check(inst, sol) == [] and peak(inst, sol) == search.top
    search.tighten(time.perf_counter() + 7200.0)  # time enough: grown, and its bound taken
    assert "clique" in vars(search.arrays) and search.bound >= search.arrays.clique_bound


def test_through_the_harness_and_its_progress() -> None:
    inst = concurrent_family(20, 5)
    heard: list[Progress] = []
    res = solve(inst, "multistart", Options(time_limit=0.3, progress=heard.append))
    assert res.status.has_solution and res.solution is not None
    assert check(inst, res.solution) == []
    assert heard and heard[-1].final and heard[-1].objective == res.objective


@pytest.mark.parametrize("solver", ["xla", "ff-lifetime", "ff-area", "ff-start"])
def test_interval_only_solvers_answer_unknown(solver: str) -> None:
    inst = concurrent_family(20, 1)
    res = solve(inst, solver, Options(time_limit=0.5))
    assert res.status is Status.UNKNOWN and res.solution is None
    assert "does not take conflicts" in res.message


def test_stops_at_the_clique_bound() -> None:
    """A clique: every packing stacks it, the first pass meets the bound, nothing runs after."""
    inst = concurrent([5, 3, 7, 2], list(itertools.combinations(range(4), 2)))
    res = registry.solver("allocation", "multistart").run(inst, Options(time_limit=5.0))
    assert res.objective == 17 and res.stats["tries"] == 1 and res.runtime_s < 1.0


def test_hint_is_compacted_and_a_bad_one_ignored() -> None:
    inst, _ = family(60, 2)
    stacked = np.concatenate([[0], np.cumsum([b.size for b in inst.buffers])[:-1]])
    hint = AllocationSolution(tuple(int(x) for x in stacked))
    search = hc.ConcurrentSearch(
        hc.conflict_arrays(inst), 0, hc.hint_offsets(inst, Options(hint=hint))
    )
    assert search.hint is not None
    search.attempt(hc.compaction_order(search.arrays, search.hint), False, "hint", None)
    assert search.top <= peak(inst, hint)
    before = search.top
    search.offer(np.asarray(hint.offsets), "stacked")  # higher: nothing changes
    assert (
        search.top == before
        and check(inst, AllocationSolution(tuple(search.offsets.tolist()))) == []
    )
    clash = AllocationSolution((0,) * len(inst.buffers))
    assert hc.hint_offsets(inst, Options(hint=clash)) is None
    res = registry.solver("allocation", "multistart").run(inst, Options(time_limit=0.2, hint=clash))
    assert res.status is Status.FEASIBLE and res.solution is not None
    assert check(inst, res.solution) == []


def test_capacity() -> None:
    base, _ = family(60, 2)
    found = registry.solver("allocation", "ffd").run(base, Options()).objective
    assert isinstance(found, int)
    roomy = AllocationInstance(base.buffers, capacity=found, conflicts=base.conflicts)
    for solver in SUPPORTING:
        res = registry.solver("allocation", solver).run(roomy, Options(time_limit=0.1))
        assert res.status is Status.FEASIBLE and res.objective is not None
        assert res.objective <= found
    tight = AllocationInstance(base.buffers, capacity=1, conflicts=base.conflicts)
    assert registry.solver("allocation", "fast").run(tight, Options()).status is Status.INFEASIBLE
    assert registry.solver("allocation", "ffd").run(tight, Options()).status is Status.UNKNOWN


def test_heavy_clique_is_a_clique_at_least_as_heavy_as_greedy_clique() -> None:
    inst = concurrent_family(300, 2)
    a = hc.conflict_arrays(inst)
    members = np.flatnonzero(a.clique).tolist()
    pairs = set(inst.conflicts or ())
    assert all((u, v) in pairs for u, v in itertools.combinations(members, 2))
    weight = ac.clique_weight(a.size, members)
    assert weight >= ac.clique_weight(a.size, ac.greedy_clique(a.graph, a.size))
    assert a.clique_bound == weight


def test_interval_instances_keep_their_engine() -> None:
    """Interval lifetimes never reach the conflict-graph code (no arrays of it are built)."""
    inst = sample(30, 1)
    for solver in SUPPORTING:
        registry.solver("allocation", solver).run(inst, Options(time_limit=0.1))
    assert hc._ARRAYS.peek(inst) is None


def test_warm_and_empty() -> None:
    hc.warm()
    empty = concurrent([], [])
    for solver in SUPPORTING:
        res = registry.solver("allocation", solver).run(empty, Options(time_limit=0.1))
        assert res.status is Status.FEASIBLE and res.objective == 0


def test_clique_growth_stops_at_its_work_budget() -> None:
    """`heavy_clique` and the bb family's `greedy_cliques` stop after the start at which their
    work passes the budget (dense graphs of thousands of buffers took seconds): with budget 0,
    the first start's clique only; with room, every start, and never a lighter best clique.
    The harness's check reserve grows with the pairs it must check."""
    from tensorplan.models import allocation_conflict_bb_kernels as bbk
    from tensorplan.problems import allocation_kernels as ak
    from tensorplan.problems.allocation import check_reserve, conflict_graph
    from tensorplan.problems.allocation import sizes as sizes_of
    from tensorplan.problems.allocation_gen import concurrent_family

    inst = concurrent_family(80, 2)
    g = conflict_graph(inst)
    w = sizes_of(inst).astype(np.int64)
    starts = np.arange(len(w), dtype=np.int64)
    first = ak.heavy_clique(g.indptr, g.indices, w, starts[:1], 10**18)
    cut = ak.heavy_clique(g.indptr, g.indices, w, starts, 0)
    full = ak.heavy_clique(g.indptr, g.indices, w, starts, 10**18)
    assert list(cut) == list(first) and w[full].sum() >= w[cut].sum()
    ptr, mem = bbk.greedy_cliques(g.indptr, g.indices, w, starts, 0)
    assert len(ptr) == 2 and sorted(mem) == sorted(first)
    ptr, _ = bbk.greedy_cliques(g.indptr, g.indices, w, starts, 10**18)
    assert len(ptr) == len(starts) + 1
    assert check_reserve(inst) > check_reserve(inst.__class__(inst.buffers, name="x"))


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 40), st.floats(0.0, 1.0), st.integers(0, 10**6))
def test_compiled_neighbourhood_weights_equal_numpy(n: int, density: float, seed: int) -> None:
    from tensorplan.problems import allocation_kernels as ak

    rng = np.random.default_rng(seed)
    pairs = [(i, j) for i, j in itertools.combinations(range(n), 2) if rng.random() < density]
    g = ac.Pairs.of(pairs).graph(n)
    w = rng.integers(1, 10**9, n).astype(np.int64)
    want = w + np.array([w[g.neighbours(v)].sum() for v in range(n)], dtype=np.int64)
    assert ac.neighbourhood_weight(g, w).tolist() == want.tolist()
    assert ak.neighbourhood(g.indptr, g.indices, w).tolist() == want.tolist()


def test_one_heavy_clique_per_solve_for_the_heuristic_and_the_harness() -> None:
    """On a graph too big for the exact clique, `fast` grows the instance's heavy clique in the
    time reserved for the harness's bound; the harness's bound then reads it (no second
    search), the reserve drops by that share, and the clique is one (pairwise conflicting)."""
    from tensorplan.problems import allocation as pa

    inst = concurrent_family(ac.EXACT_CLIQUE_MAX + 100, 3)
    before = pa.check_reserve(inst)
    assert pa._HEAVY.peek(inst) is None
    res = solve(inst, "fast", Options(time_limit=5.0))
    assert res.solution is not None and not pa.check(inst, res.solution)
    kept = pa._HEAVY.peek(inst)
    assert kept is not None
    members = kept[0].tolist()
    assert inst.conflicts is not None
    adjacent = set(map(tuple, inst.conflicts.array.tolist()))
    assert all((min(a, b), max(a, b)) in adjacent for a, b in itertools.combinations(members, 2))
    size = pa.sizes(inst)
    bound = max(ac.rounded_clique_bound(size, members, inst.alignment), int(size.max()))
    assert pa.clique_bound(inst) == (bound, False) and res.bound is not None
    assert res.bound >= bound and pa.check_reserve(inst) < before
    mask = hc.conflict_arrays(inst).clique
    assert np.flatnonzero(mask).tolist() == sorted(members)


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 30), st.floats(0.1, 1.0), st.integers(0, 10**6))
def test_compiled_overlap_screen_equals_numpy(n: int, density: float, seed: int) -> None:
    """The checker's compiled screen (`allocation_kernels.overlap_mask`, used from
    `COMPILED_ROWS` pairs on) flags exactly the pairs numpy's does."""
    from tensorplan.problems import allocation_kernels as ak

    rng = np.random.default_rng(seed)
    pairs = [(i, j) for i, j in itertools.combinations(range(n), 2) if rng.random() < density]
    if not pairs:
        return
    held = ac.Pairs.of(pairs).array  # read-only int32, as instances hold them
    size = rng.integers(1, 20, n).astype(np.int64)
    offsets = rng.integers(0, 60, n).astype(np.int64)
    i, j = held[:, 0], held[:, 1]
    want = (offsets[i] < offsets[j] + size[j]) & (offsets[j] < offsets[i] + size[i])
    assert ak.overlap_mask(i, j, size, offsets).tolist() == want.tolist()


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 40),
    d=st.integers(1, 4),
    seed=st.integers(0, 2**16),
)
def test_start_order_extends_the_clocks_order(n: int, d: int, seed: int) -> None:
    """First fit by start clock places every buffer that is done before another starts ahead of
    it; without clocks the order is ffd's."""
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, 8, size=(n, d))
    ends = starts + rng.integers(0, 5, size=(n, d))
    bufs = tuple(Buffer(str(i), int(rng.integers(1, 9)), 0, 0) for i in range(n))
    inst = AllocationInstance(bufs, conflicts=ac.from_clocks(starts, ends))
    arrays = hc.conflict_arrays(inst)
    where = np.argsort(hc.sort_order(arrays, "start"))
    for k, m in itertools.permutations(range(n), 2):
        if (ends[k] <= starts[m]).all() and (ends[k] > starts[k]).any():
            assert where[k] < where[m]
    plain = concurrent([b.size for b in bufs], list(inst.conflicts or ()))
    bare = hc.conflict_arrays(plain)
    assert hc.sort_order(bare, "start").tolist() == hc.sort_order(bare, "size").tolist()


def test_portfolio_takes_the_start_order_of_clocked_instances() -> None:
    """On clocked instances the portfolio's second ordering is first fit by start clock: after
    two orderings its packing is the lower of ffd's and that one's."""
    inst = concurrent_family(300, 4)
    assert inst.conflicts is not None and inst.conflicts.clocks is not None
    tops = [
        peak(inst, AllocationSolution(tuple(hc.greedy(inst, key).tolist())))
        for key in ("size", "start")
    ]
    assert tops[0] != tops[1]  # the instance tells the two apart
    search = hc.ConcurrentSearch(hc.conflict_arrays(inst))
    search.run(time.perf_counter() + 60, upto=2, improve=False)
    assert search.tries == 2 and search.top == min(tops)


def test_solve_reserve_grows_the_clique_only_when_its_share_fits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A solver's reserve: with a limit below the whole reserve the clique is left to the
    harness (and the whole reserve kept); with room, it is grown now and only the check's
    share kept. `bb` takes its reserve so too, before its search."""
    from tensorplan.models import allocation_conflict_bb as cb
    from tensorplan.problems import allocation as pa

    inst = concurrent_family(ac.EXACT_CLIQUE_MAX + 100, 5)
    whole = pa.check_reserve(inst)
    assert pa.solve_reserve(inst, time.perf_counter(), whole / 2) == whole
    assert pa._HEAVY.peek(inst) is None
    kept = pa.solve_reserve(inst, time.perf_counter(), whole + 1.0)
    assert pa._HEAVY.peek(inst) is not None and kept == pa.check_reserve(inst) < whole
    other = concurrent_family(ac.EXACT_CLIQUE_MAX + 100, 6)
    grown: list[bool] = []

    def spy(inst: pa.AllocationInstance, began: float, limit: float) -> float:
        out = pa.solve_reserve(inst, began, limit)
        grown.append(pa._HEAVY.peek(inst) is not None)
        return out

    monkeypatch.setattr(cb, "solve_reserve", spy)
    res = cb.solve(other, Options(time_limit=2.0))
    assert res.solution is not None and grown[:1] == [True]


def test_every_kick_is_a_permutation_and_the_peak_swap_swaps_neighbours() -> None:
    """Each of `kick`'s seven ways gives a permutation of the order; the seventh swaps a buffer
    at the peak with one of its neighbours and leaves every other position alone."""
    inst = concurrent_family(80, 2)
    arrays = hc.conflict_arrays(inst)
    order = hc.sort_order(arrays, "size")
    offsets, _ = arrays.place(order)
    ends = offsets + arrays.size
    seen = set()
    for seed in range(300):
        rng = np.random.default_rng(seed)
        pick = int(np.random.default_rng(seed).integers(7))
        out = hc.kick(arrays, order, offsets, rng)
        assert sorted(out.tolist()) == list(range(len(arrays)))
        seen.add(pick)
        if pick == 6:
            moved = np.flatnonzero(out != order)
            assert len(moved) == 2
            a, b = order[moved].tolist()
            assert ends.max() in (ends[a], ends[b])
            assert b in arrays.indices[arrays.indptr[a] : arrays.indptr[a + 1]].tolist()
    assert seen == set(range(7))

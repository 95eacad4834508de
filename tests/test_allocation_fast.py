"""The compiled allocation engine: the same packings as before and as the reference; peers."""

from __future__ import annotations

import itertools
import re
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorplan.harness.run import load_instance, solve, with_capacity
from tensorplan.heuristics import allocation_kernels, allocation_peers
from tensorplan.heuristics.allocation import (
    KEYS,
    ORDERS,
    PEER_RULES,
    PORTFOLIO,
    OverlapIndex,
    PortfolioSearch,
    buffer_arrays,
    compaction_order,
    id_rank,
    natural_key,
    place,
    portfolio,
    sort_order,
)
from tensorplan.problems.allocation import (
    AllocationInstance,
    AllocationSolution,
    Buffer,
    check,
    lower_bound,
    peak,
)
from tensorplan.problems.allocation_gen import mixed_family, pow2_family, random_family
from tensorplan.problems.core import Options, Status

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted(  # the interval ones: the old code knew no conflicts
    p for p in (ROOT / "instances" / "allocation").glob("*.json") if "concurrent" not in p.stem
)


# --- the implementation before the compiled engine, kept verbatim as the reference -------------


def old_order(inst: AllocationInstance, key) -> list[int]:
    bs = inst.buffers
    return sorted(range(len(bs)), key=lambda i: (*key(bs[i]), natural_key(bs[i].id)))


OLD_ORDERS = {
    "size": lambda inst: old_order(inst, lambda b: (-b.size,)),
    "lifetime": lambda inst: old_order(inst, lambda b: (-b.duration, -b.size)),
    "area": lambda inst: old_order(inst, lambda b: (-b.size * b.duration, -b.size)),
    "xla": lambda inst: old_order(inst, lambda b: (-b.size, -b.duration, b.start)),
    "start": lambda inst: old_order(inst, lambda b: (b.start, -b.size)),
}


def old_place(inst: AllocationInstance, order, *, best_fit: bool = False) -> list[int]:
    n, a = len(inst.buffers), inst.alignment
    index = OverlapIndex(inst)
    sizes = [b.size for b in inst.buffers]
    offsets = [-1] * n
    for i in order:
        size = sizes[i]
        placed = [
            (offsets[j], offsets[j] + sizes[j]) for j in index.of(i).tolist() if offsets[j] >= 0
        ]
        placed.sort()
        cur, best, best_slack = 0, -1, -1
        for lo, hi in placed:
            if lo >= cur + size:
                if not best_fit:
                    break
                slack = lo - cur - size
                if best < 0 or slack < best_slack:
                    best, best_slack = cur, slack
            if hi > cur:
                cur = -(-hi // a) * a
        else:
            cur = cur if best < 0 else best
        offsets[i] = cur
    return offsets


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_every_greedy_pass_places_shipped_instances_exactly_as_before(path):
    inst = load_instance(path)
    for name, make in OLD_ORDERS.items():
        order = make(inst)
        assert ORDERS[name](inst) == order, name
        for fit in (False, True):
            assert place(inst, order, best_fit=fit) == old_place(inst, order, best_fit=fit)


def test_ffd_solver_returns_the_old_ffd_offsets_on_shipped_instances():
    for path in SHIPPED:
        inst = load_instance(path)
        r = solve(inst, "ffd")
        assert list(r.solution.offsets) == old_place(inst, OLD_ORDERS["size"](inst)), path.stem


def test_ffd_on_larger_generated_instances_matches_the_old_code():
    for inst in (random_family(3000, 5), mixed_family(2000, 6), pow2_family(1500, 7)):
        order = OLD_ORDERS["size"](inst)
        assert place(inst, order) == old_place(inst, order)
        assert place(inst, order, best_fit=True) == old_place(inst, order, best_fit=True)


# --- compiled engine == pure-Python reference ----------------------------------------------------

raw_buffers = st.lists(
    st.tuples(st.integers(1, 40), st.integers(-10, 40), st.integers(0, 25)),
    min_size=1,
    max_size=60,
)


def arrays_of(raw):
    size = np.array([s for s, _, _ in raw], dtype=np.int64)
    start = np.array([t for _, t, _ in raw], dtype=np.int64)
    return size, start, start + np.array([d for _, _, d in raw], dtype=np.int64)


@settings(max_examples=150, deadline=None)
@given(raw_buffers, st.sampled_from([1, 2, 3, 8]), st.randoms(use_true_random=False))
def test_compiled_engine_equals_reference(raw, alignment, rnd):
    size, start, end = arrays_of(raw)
    order = list(range(len(raw)))
    rnd.shuffle(order)
    for fit, packed in itertools.product((False, True), (True, False)):
        got, top = allocation_kernels.place(
            size, start, end, np.array(order), alignment, best_fit=fit, packed=packed
        )
        want = allocation_kernels.place_py(
            size.tolist(), start.tolist(), end.tolist(), order, alignment, best_fit=fit
        )
        assert got.tolist() == want
        assert top == max(o + s for o, s in zip(want, size.tolist(), strict=True))


@settings(max_examples=60, deadline=None)
@given(raw_buffers, st.sampled_from([1, 4]))
def test_cutoff_stops_at_the_first_buffer_reaching_it(raw, alignment):
    size, start, end = arrays_of(raw)
    order = np.argsort(-size, kind="stable")
    full, top = allocation_kernels.place(size, start, end, order, alignment)
    cut, reached = allocation_kernels.place(size, start, end, order, alignment, cutoff=top)
    assert reached == top
    k = next(k for k, i in enumerate(order) if full[i] + size[i] == top)  # first to reach it
    assert cut[order[: k + 1]].tolist() == full[order[: k + 1]].tolist()
    assert (cut[order[k + 1 :]] == -1).all()


def test_first_fit_reference_is_the_seed_trace():
    size, start, end = [10, 5, 8, 4, 6, 12], [1, 2, 1, 4, 3, 5], [5, 6, 3, 7, 8, 9]
    offsets = allocation_kernels.place_py(size, start, end, [5, 0, 2, 4, 1, 3])
    assert offsets == [12, 28, 0, 33, 22, 0]


def test_index_memory_is_linear_in_the_number_of_buffers():
    for inst in (
        random_family(20_000, 1, horizon=20_000, max_size=999, max_life=201),
        mixed_family(20_000, 2),
    ):
        a = buffer_arrays(inst)
        assert a.layout.entries <= 3 * len(a)


# --- orders, features -----------------------------------------------------------------------------

ids = st.lists(
    st.one_of(
        st.integers(-30, 30).map(str),
        st.sampled_from(["a", "b", "x1", "-", "+3", " 4", "07", "٣", "10a"]),
    ),
    min_size=1,
    max_size=30,
)


@given(ids)
def test_id_rank_is_the_natural_key_order(names):
    want = sorted(range(len(names)), key=lambda i: natural_key(names[i]))
    rank = id_rank(names)
    assert np.argsort(rank).tolist() == want
    assert all(re.fullmatch(r"-?\d+", x) is not None for x in names if x.isdecimal())


@settings(max_examples=60, deadline=None)
@given(raw_buffers)
def test_section_load_and_degree_by_brute_force(raw):
    size, start, end = arrays_of(raw)
    n = len(raw)
    live = {
        t: sum(int(size[j]) for j in range(n) if start[j] <= t <= end[j])
        for t in range(int(start.min()), int(end.max()) + 1)
    }
    load = allocation_kernels.section_load(start, end, size)
    degree = allocation_kernels.conflict_degree(start, end)
    for i in range(n):
        assert load[i] == max(live[t] for t in range(int(start[i]), int(end[i]) + 1))
        assert degree[i] == sum(
            1 for j in range(n) if j != i and max(start[i], start[j]) <= min(end[i], end[j])
        )


# --- the portfolio ------------------------------------------------------------------------------


def make(raw, alignment: int = 1) -> AllocationInstance:
    return AllocationInstance(
        tuple(Buffer(str(i), s, t, t + d) for i, (s, t, d) in enumerate(raw)), alignment=alignment
    )


@settings(max_examples=40, deadline=None)
@given(raw_buffers, st.sampled_from([1, 8]), st.integers(0, 3))
def test_portfolio_is_never_worse_than_ffd_and_feasible(raw, alignment, seed):
    inst = make(raw, alignment)
    ffd = solve(inst, "ffd")
    ms = solve(inst, "multistart", Options(seed=seed))
    assert ms.status.has_solution and not check(inst, ms.solution)
    assert lower_bound(inst) <= ms.objective <= ffd.objective


def test_portfolio_is_never_worse_than_ffd_on_shipped_instances():
    for path in SHIPPED:
        inst = load_instance(path)
        ms = solve(inst, "multistart", Options(time_limit=30))
        assert ms.status.has_solution and ms.objective <= solve(inst, "ffd").objective, path.stem


def test_portfolio_improves_on_ffd_and_is_deterministic():
    inst = random_family(2000, 3, horizon=2000, max_size=999, max_life=201)
    ffd = solve(inst, "ffd")
    runs = [solve(inst, "multistart", Options(seed=5, time_limit=60)) for _ in range(2)]
    assert runs[0].objective < ffd.objective
    assert runs[0].solution == runs[1].solution
    assert buffer_arrays(inst).lower_bound == lower_bound(inst)


def test_capacity_is_reported_in_the_message():
    inst = load_instance(ROOT / "instances" / "allocation" / "seed-example.json")
    fits = solve(with_capacity(inst, 40), "ffd")
    assert fits.status is Status.OPTIMAL and fits.message == "peak 37 fits capacity 40"
    over = solve(with_capacity(inst, 36), "multistart")
    assert over.status is Status.UNKNOWN and over.solution is None
    assert over.message == "heuristic peak 37 exceeds capacity 36"


# --- OmniMalloc peers ---------------------------------------------------------------------------

PEERS = [name for name, *_ in allocation_peers.PEERS]


@pytest.mark.skipif(not allocation_peers.available(), reason="omnimalloc not installed")
@pytest.mark.parametrize("name", PEERS)
def test_peers_pass_the_checker(name):
    for inst in (
        load_instance(ROOT / "instances" / "allocation" / "seed-example.json"),
        pow2_family(60, 4),  # alignment 8
        mixed_family(80, 5),
    ):
        r = solve(inst, name, Options(time_limit=2))
        assert r.status.has_solution, r.message
        assert not check(inst, r.solution) and r.objective == peak(inst, r.solution)
        assert r.objective >= lower_bound(inst)


@pytest.mark.skipif(not allocation_peers.available(), reason="omnimalloc not installed")
def test_omnimalloc_greedy_by_size_is_our_ffd_on_distinct_sizes():
    # with distinct sizes both orders are the same, and first fit is first fit
    inst = make([(s, (7 * s) % 23, s % 5) for s in range(1, 40)])
    assert solve(inst, "omnimalloc-greedy").objective == solve(inst, "ffd").objective


# --- the peers' placement rules, components, compaction, `fast` (issue 32) --------------------

mixed_lives = st.lists(  # mostly short lifetimes, a few long: both engine paths (merge, sort)
    st.tuples(
        st.integers(1, 40),
        st.integers(0, 60),
        st.one_of(st.integers(0, 2), st.integers(0, 2), st.integers(0, 2), st.integers(0, 80)),
    ),
    min_size=1,
    max_size=70,
)


@settings(max_examples=120, deadline=None)
@given(mixed_lives, st.sampled_from([1, 3, 8]), st.randoms(use_true_random=False))
def test_merge_and_sort_paths_equal_the_reference(raw, alignment, rnd):
    size, start, end = arrays_of(raw)
    order = list(range(len(raw)))
    rnd.shuffle(order)
    for fit, packed in itertools.product((False, True), (True, False)):
        got, _ = allocation_kernels.place(
            size, start, end, np.array(order), alignment, best_fit=fit, packed=packed
        )
        want = allocation_kernels.place_py(
            size.tolist(), start.tolist(), end.tolist(), order, alignment, best_fit=fit
        )
        assert got.tolist() == want


@settings(max_examples=40, deadline=None)
@given(mixed_lives, st.sampled_from([1, 8]))
def test_every_rule_gives_a_packing(raw, alignment):
    inst = make(raw, alignment)
    arrays = buffer_arrays(inst)
    for key in KEYS:
        order = sort_order(arrays, key)
        assert sorted(order.tolist()) == list(range(len(raw))), key
        for fit in (False, True):
            offsets, top = arrays.place(order, fit)
            sol = AllocationSolution(tuple(offsets.tolist()))
            assert not check(inst, sol) and top == peak(inst, sol), (key, fit)


@settings(max_examples=40, deadline=None)
@given(mixed_lives, st.sampled_from([1, 8]), st.integers(0, 3))
def test_portfolio_is_never_worse_than_any_rule_it_runs(raw, alignment, seed):
    inst = make(raw, alignment)
    arrays = buffer_arrays(inst)
    rules = [arrays.place(sort_order(arrays, key), fit)[1] for key, fit in PORTFOLIO]
    ms = portfolio(inst, Options(seed=seed, time_limit=30), restarts=3)
    assert ms.status.has_solution and not check(inst, ms.solution)
    assert lower_bound(inst) <= ms.objective <= min(rules)
    search = PortfolioSearch(inst, seed)
    search.run(time.perf_counter() + 30, upto=PEER_RULES)
    assert search.done == PEER_RULES or search.best.top == lower_bound(inst)
    assert search.best.top <= min(rules[:PEER_RULES])
    search.offer(ms.solution, "multistart")  # taken in: never raises the best
    assert search.best.top <= ms.objective
    assert not check(inst, AllocationSolution(tuple(search.best.offsets.tolist())))


@settings(max_examples=40, deadline=None)
@given(mixed_lives, st.sampled_from([1, 4]), st.randoms(use_true_random=False))
def test_compaction_never_raises_a_buffer(raw, alignment, rnd):
    inst = make(raw, alignment)
    arrays = buffer_arrays(inst)
    order = list(range(len(raw)))
    rnd.shuffle(order)
    offsets, _ = arrays.place(np.array(order), rnd.random() < 0.5)
    again, _ = arrays.place(compaction_order(arrays, offsets))
    assert (again <= offsets).all()
    hinted = portfolio(inst, Options(hint=AllocationSolution(tuple(offsets.tolist()))))
    assert hinted.objective <= int((offsets + arrays.size).max())


@settings(max_examples=40, deadline=None)
@given(mixed_lives)
def test_components_never_meet_and_merge_into_a_packing(raw):
    inst = make(raw)
    arrays = buffer_arrays(inst)
    label, _, begins = arrays.components
    n = len(raw)
    assert len(set(label.tolist())) == len(begins)
    for i in range(n):
        for j in range(n):
            if max(raw[i][1], raw[j][1]) <= min(raw[i][1] + raw[i][2], raw[j][1] + raw[j][2]):
                assert label[i] == label[j]
    a, _ = arrays.place(sort_order(arrays, "size"))
    b, _ = arrays.place(sort_order(arrays, "start"), best_fit=True)
    pick = (arrays.component_peaks(a) <= arrays.component_peaks(b))[label]
    merged = np.where(pick, a, b)
    assert not check(inst, AllocationSolution(tuple(merged.tolist())))
    assert arrays.component_peaks(merged).max() <= min(
        arrays.component_peaks(a).max(), arrays.component_peaks(b).max()
    )


@settings(max_examples=15, deadline=None)
@given(mixed_lives, st.sampled_from([1, 8]))
def test_fast_is_never_worse_than_the_rules_it_runs(raw, alignment):
    inst = make(raw, alignment)
    arrays = buffer_arrays(inst)
    rules = [arrays.place(sort_order(arrays, key), fit)[1] for key, fit in PORTFOLIO[:PEER_RULES]]
    r = solve(inst, "fast", Options(time_limit=2))
    assert r.status.has_solution and not check(inst, r.solution)
    assert lower_bound(inst) <= r.objective <= min(rules)


@pytest.mark.skipif(not allocation_peers.available(), reason="omnimalloc not installed")
def test_the_omni_rules_give_omnimalloc_s_packings():
    for inst in (random_family(300, 2), mixed_family(400, 3), pow2_family(200, 4)):
        arrays = buffer_arrays(inst)
        omni = [arrays.place(sort_order(arrays, key))[1] for key in KEYS if key[:5] == "omni-"]
        input_first = arrays.place(sort_order(arrays, "input"))[1]
        assert solve(inst, "omnimalloc-omni").objective == min([*omni, input_first])
        best_fit = arrays.place(sort_order(arrays, "input"), best_fit=True)[1]
        assert solve(inst, "omnimalloc-best").objective == best_fit
        assert (
            solve(inst, "omnimalloc-greedy").objective
            == arrays.place(sort_order(arrays, "omni-size"))[1]
        )

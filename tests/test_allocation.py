"""Allocation packing: seed example, checker, back-ends, heuristics, brute force, bad input."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tensorplan.harness import registry
from tensorplan.harness.cli import main
from tensorplan.harness.importers import minimalloc_csv
from tensorplan.harness.run import load_instance, parse_instance, solve
from tensorplan.heuristics.allocation import ORDERS, OverlapIndex, place
from tensorplan.problems.allocation import (
    AllocationInstance,
    AllocationSolution,
    Buffer,
    check,
    instance_to_json,
    lower_bound,
    peak,
    upper_bound,
)
from tensorplan.problems.allocation_gen import (
    SEED_EXAMPLE,
    layered_family,
    mixed_family,
    pow2_family,
)
from tensorplan.problems.core import InstanceError, Options, Status

ROOT = Path(__file__).resolve().parents[1]
SEED_FILE = ROOT / "instances" / "allocation" / "seed-example.json"
EXACT = ["cpsat", "mip", "mip-cbc"]
HEURISTICS = [n for n, s in registry.solvers("allocation").items() if s.kind == "heuristic"]


def seed() -> AllocationInstance:
    return load_instance(SEED_FILE)


def test_seed_example_ffd_offsets_and_peak():
    res = solve(seed(), "ffd")
    offsets = dict(zip("012345", res.solution.offsets, strict=True))
    assert offsets == {"0": 12, "1": 28, "2": 0, "3": 33, "4": 22, "5": 0}
    assert res.objective == 37
    # the live sizes at time 5 add up to 37 too, so the harness proves ffd optimal here
    assert lower_bound(seed()) == 37
    assert res.status is Status.OPTIMAL and res.message == "optimal by bound"


def test_seed_example_sorted_order_matches_the_trace():
    order = [seed().buffers[i].id for i in ORDERS["size"](seed())]
    assert order == ["5", "0", "2", "4", "1", "3"]


def test_shipped_seed_file_is_the_seed_data():
    assert json.loads(SEED_FILE.read_text()) == SEED_EXAMPLE


def test_checker_rejects_overlap_alignment_negative_and_capacity():
    inst = seed()
    bad = AllocationSolution((12, 28, 0, 33, 22, 5))  # buffer 5 moved into buffer 0 at time 5
    assert any(v.startswith("overlap: buffers 0 and 5") for v in check(inst, bad))
    aligned = AllocationInstance(inst.buffers, alignment=4)
    assert any(
        "bad alignment" in v for v in check(aligned, AllocationSolution((12, 28, 0, 33, 22, 0)))
    )
    assert any(
        "negative offset" in v for v in check(inst, AllocationSolution((12, 28, 0, 33, 22, -12)))
    )
    capped = AllocationInstance(inst.buffers, capacity=36)
    assert check(capped, AllocationSolution((12, 28, 0, 33, 22, 0))) == [
        "capacity exceeded: peak 37 > capacity 36"
    ]


def test_touching_lifetimes_conflict_but_touching_addresses_do_not():
    inst = AllocationInstance((Buffer("a", 4, 0, 2), Buffer("b", 4, 2, 3), Buffer("c", 4, 3, 5)))
    assert check(inst, AllocationSolution((0, 4, 0))) == []  # a, c disjoint in time
    assert check(inst, AllocationSolution((0, 2, 8)))  # a, b share time 2 and addresses [2, 4)


def test_harness_refuses_an_infeasible_solution():
    from tensorplan.harness.run import verify
    from tensorplan.problems.allocation import PROBLEM
    from tensorplan.problems.core import Result

    lying = Result("liar", Status.FEASIBLE, 12, None, 0.0, AllocationSolution((0,) * 6))
    out = verify(PROBLEM, seed(), lying)
    assert out.status is Status.ERROR and out.solution is None
    assert "checker rejected" in out.message


@pytest.mark.parametrize("name", EXACT)
def test_exact_on_seed_example(name):
    res = solve(seed(), name, Options(time_limit=10))
    assert res.status is Status.OPTIMAL and res.objective == 37 and res.bound == 37


def small_instances() -> list[AllocationInstance]:
    return [
        seed(),
        mixed_family(10, 1),
        pow2_family(9, 2),
        layered_family(4, 3),
        load_instance(ROOT / "instances" / "allocation" / "random-12-s2.json"),
    ]


@pytest.mark.parametrize("inst", small_instances(), ids=lambda i: i.name)
def test_backends_agree_and_bracket_heuristics(inst):
    exact = {n: solve(inst, n, Options(time_limit=20)) for n in EXACT}
    assert all(r.status is Status.OPTIMAL for r in exact.values()), exact
    opt = {r.objective for r in exact.values()}
    assert len(opt) == 1
    (optimum,) = opt
    assert lower_bound(inst) <= optimum <= upper_bound(inst)
    for h in HEURISTICS:
        r = solve(inst, h)
        assert r.status.has_solution and r.objective >= optimum


def brute_force(inst: AllocationInstance) -> int:
    """Smallest peak over every assignment of aligned offsets below the stacking bound."""
    n, a = len(inst.buffers), inst.alignment
    ub = upper_bound(inst)
    bs = inst.buffers
    best = ub
    overl = [
        [i != j and max(bs[i].start, bs[j].start) <= min(bs[i].end, bs[j].end) for j in range(n)]
        for i in range(n)
    ]
    offs = [0] * n

    def go(k: int, top: int) -> None:
        nonlocal best
        if top >= best:
            return
        if k == n:
            best = top
            return
        for o in range(0, ub - bs[k].size + 1, a):
            if all(
                not overl[k][j] or o + bs[k].size <= offs[j] or offs[j] + bs[j].size <= o
                for j in range(k)
            ):
                offs[k] = o
                go(k + 1, max(top, o + bs[k].size))

    go(0, 0)
    return best


buffers = st.lists(
    st.tuples(st.integers(1, 6), st.integers(0, 5), st.integers(0, 3)), min_size=1, max_size=5
)


def make(raw, alignment: int = 1) -> AllocationInstance:
    return AllocationInstance(
        tuple(Buffer(str(i), s, t, t + d) for i, (s, t, d) in enumerate(raw)), alignment=alignment
    )


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(buffers, st.sampled_from([1, 1, 2, 4]))
def test_brute_force_equals_exact_and_bounds_hold(raw, alignment):
    inst = make(raw, alignment)
    optimum = brute_force(inst)
    for name in ("cpsat", "mip"):
        r = solve(inst, name, Options(time_limit=10))
        assert r.status is Status.OPTIMAL and r.objective == optimum
    assert lower_bound(inst) <= optimum
    for h in ("ffd", "bfd", "multistart"):
        r = solve(inst, h)
        assert r.objective >= optimum and not check(inst, r.solution)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 50), st.integers(0, 30), st.integers(0, 12)),
        min_size=1,
        max_size=40,
    ),
    st.sampled_from([1, 8]),
)
def test_every_heuristic_is_feasible_on_random_instances(raw, alignment):
    """Feasibility, not quality: the anytime heuristics (`multistart`, `fast`) get 0.5 s, not
    the default limit they would spend whenever the bound is not tight."""
    inst = make(raw, alignment)
    lb = lower_bound(inst)
    for h in HEURISTICS:
        r = solve(inst, h, Options(time_limit=0.5))
        assert r.status.has_solution, r.message
        assert r.objective >= lb and r.objective == peak(inst, r.solution)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 5), st.integers(0, 20), st.integers(0, 8)), min_size=1, max_size=30
    )
)
def test_overlap_index_is_exactly_the_lifetime_overlaps(raw):
    inst = make(raw)
    bs = inst.buffers
    want = {
        (i, j)
        for i, j in itertools.permutations(range(len(bs)), 2)
        if max(bs[i].start, bs[j].start) <= min(bs[i].end, bs[j].end)
    }
    for cap in (10**9, 0):  # stored graph, then the memory-bounded scan
        index = OverlapIndex(inst, max_edges=cap)
        assert (index.csr is None) == (cap == 0 and len(want) > 0)
        assert {(i, int(j)) for i in range(len(bs)) for j in index.of(i)} == want


def test_first_fit_is_the_lowest_free_offset():
    # placed: [0,4) and [6,10) live together; a size-2 buffer fits the gap at 4, size 3 does not
    inst = AllocationInstance(
        (Buffer("a", 4, 0, 9), Buffer("b", 4, 0, 9), Buffer("c", 2, 0, 9), Buffer("d", 3, 0, 9))
    )
    offs = place(inst, [0, 1])
    assert offs[:2] == [0, 4]
    gap = AllocationInstance((*inst.buffers[:2], Buffer("c", 2, 5, 9)))
    assert place(gap, [0, 1, 2]) == [0, 4, 8]


def test_best_fit_takes_the_tightest_gap():
    # two holes of sizes 5 and 3 below the top; a size-3 buffer goes into the 3-hole
    bs = (
        Buffer("lo", 2, 0, 0),
        Buffer("x", 5, 0, 9),
        Buffer("hole5", 5, 0, 0),
        Buffer("y", 2, 0, 9),
        Buffer("hole3", 3, 0, 0),
        Buffer("z", 1, 0, 9),
        Buffer("new", 3, 1, 9),
    )
    inst = AllocationInstance(bs)
    fixed = [0, 1, 2, 3, 4, 5]
    first = place(inst, [*fixed, 6])
    best = place(inst, [*fixed, 6], best_fit=True)
    # x, y, z leave gaps [0,2), [7,12), [14,17) for `new`: first fit the lowest that fits,
    # best fit the tightest
    assert first[6] == 7 and best[6] == 14


def test_exact_time_out_returns_incumbent_with_bound():
    inst = mixed_family(120, 7)
    r = solve(inst, "cpsat", Options(time_limit=0.5))
    assert r.status in (Status.FEASIBLE, Status.OPTIMAL)
    assert r.bound is not None and r.bound <= r.objective


def test_capacity_infeasible_and_tight():
    base = seed()
    tight = AllocationInstance(base.buffers, capacity=37)
    assert solve(tight, "cpsat").objective == 37
    over = AllocationInstance(base.buffers, capacity=36)
    for name in EXACT:
        assert solve(over, name).status is Status.INFEASIBLE
    assert solve(over, "ffd").status is Status.UNKNOWN


def test_round_trip():
    inst = pow2_family(12, 3)
    assert parse_instance(instance_to_json(inst)) == inst


def test_ids_may_be_integers_and_are_keyed_as_strings(tmp_path):
    data = {
        "problem": "allocation",
        "buffers": [
            {"id": 7, "size": 3, "start": 0, "end": 1},
            {"id": "x", "size": 2, "start": 1, "end": 2},
        ],
    }
    f = tmp_path / "i.json"
    f.write_text(json.dumps(data))
    out = tmp_path / "s.json"
    assert main(["solve", str(f), "--solver", "ffd", "-o", str(out)]) == 0
    assert set(json.loads(out.read_text())["solution"]["offsets"]) == {"7", "x"}
    assert main(["check", str(f), str(out)]) == 0


# --- bad input -------------------------------------------------------------------------------

GOOD = {
    "problem": "allocation",
    "buffers": [
        {"id": "0", "size": 4, "start": 0, "end": 2},
        {"id": "1", "size": 4, "start": 1, "end": 3},
    ],
}


def mutate(path: str, value):
    data = json.loads(json.dumps(GOOD))
    keys = path.split(".")
    target = data
    for k in keys[:-1]:
        target = target[int(k)] if k.isdigit() else target[k]
    last = keys[-1]
    if value is KeyError:
        del target[last]
    else:
        target[int(last) if last.isdigit() else last] = value
    return json.dumps(data)


BAD = [
    (mutate("buffers.0.size", KeyError), "buffers[0].size: missing required field"),
    (mutate("buffers.1.size", "4"), 'buffers[1].size: must be an integer, got string "4"'),
    (mutate("buffers.0.size", 0), "buffers[0].size: must be a positive integer, got 0"),
    (mutate("buffers.0.size", -4), "buffers[0].size: must be a positive integer, got -4"),
    (mutate("buffers.1.end", 0), "buffers[1].end: end 0 is before start 1"),
    (mutate("buffers.1.id", "0"), "buffers[1].id: duplicate id '0'"),
    (mutate("buffers", KeyError), "buffers: missing required field"),
    (mutate("alignment", 0), "alignment: must be a positive integer, got 0"),
    (mutate("problem", "allocatoin"), "problem: unknown problem 'allocatoin'"),
    ("", "<file>: file is empty"),
    ("{not json", "<file>: not valid JSON"),
    ("[1, 2]", "<file>: top level must be an object, got list"),
]


@pytest.mark.parametrize(("text", "expected"), BAD, ids=[e for _, e in BAD])
def test_bad_input_is_one_line_naming_file_and_field(tmp_path, capsys, text, expected):
    f = tmp_path / "bad.json"
    f.write_text(text)
    with pytest.raises(InstanceError) as err:
        load_instance(f)
    assert str(err.value).startswith(f"{f}: {expected}")
    out = tmp_path / "never.json"
    assert main(["solve", str(f), "-o", str(out)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {f}: ")
    assert not out.exists()


def test_check_exit_codes(tmp_path, capsys):
    sol = tmp_path / "s.json"
    assert main(["solve", str(SEED_FILE), "--solver", "ffd", "-o", str(sol)]) == 0
    assert main(["check", str(SEED_FILE), str(sol)]) == 0
    assert capsys.readouterr().out.strip().endswith("37")
    doc = json.loads(sol.read_text())
    doc["solution"]["offsets"]["5"] = 5
    sol.write_text(json.dumps(doc))
    assert main(["check", str(SEED_FILE), str(sol)]) == 1
    assert "overlap: buffers 0 and 5" in capsys.readouterr().out
    doc["solution"]["offsets"]["9"] = 0
    sol.write_text(json.dumps(doc))
    assert main(["check", str(SEED_FILE), str(sol)]) == 1  # well-formed, but not for this instance
    assert "solution.offsets.9: no buffer has this id" in capsys.readouterr().out
    sol.write_text('{"solution": {"offsets": [1, 2]}}')
    assert main(["check", str(SEED_FILE), str(sol)]) == 2  # malformed
    assert "solution.offsets: must be an object" in capsys.readouterr().err


def test_import_minimalloc(tmp_path):
    csv = tmp_path / "input.12.csv"
    csv.write_text("id,lower,upper,size\nb0,0,3,4\nb1,3,5,4\nb2,1,4,2\n")
    data = minimalloc_csv(csv)
    assert [(b["start"], b["end"]) for b in data["buffers"]] == [(0, 2), (3, 4), (1, 3)]
    out = tmp_path / "out.json"
    assert main(["import", "minimalloc", str(csv), "-o", str(out)]) == 0
    inst = load_instance(out)
    assert solve(inst, "cpsat").objective == 6  # b0, b1 never live together; b2 meets both
    csv.write_text("id,lower,upper,size\nb0,0,3,x\n")
    with pytest.raises(InstanceError, match=r"line 2\.size"):
        minimalloc_csv(csv)

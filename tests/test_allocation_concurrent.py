"""Concurrent lifetimes (`conflicts`): the format, the checker, the clique bound, vector clocks,
the OmniMalloc importer and the harness's refusal of solvers that take intervals only."""

from __future__ import annotations

import itertools
import json
import pickle
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorplan.harness import run
from tensorplan.harness.cli import main
from tensorplan.harness.importers import minimalloc_csv, omnimalloc_csv
from tensorplan.problems import allocation as al
from tensorplan.problems import allocation_conflicts as ac
from tensorplan.problems.allocation_gen import concurrent_family
from tensorplan.problems.core import InstanceError, MismatchError, Status

DOC = {
    "problem": "allocation",
    "buffers": [
        {"id": "a", "size": 4},
        {"id": "b", "size": 3},
        {"id": "c", "size": 5},
        {"id": "d", "size": 2},
    ],
    "conflicts": [["a", "b"], ["b", "c"], ["c", "a"], ["c", "d"]],
}


def test_parse_normalises_and_round_trips() -> None:
    inst = al.parse_instance(DOC)
    assert inst.concurrent and inst.conflicts == ((0, 1), (0, 2), (1, 2), (2, 3))
    again = al.parse_instance(al.instance_to_json(inst))
    assert again == inst
    assert "start" not in al.instance_to_json(inst)["buffers"][0]


@pytest.mark.parametrize(
    ("change", "error", "field"),
    [
        ({"conflicts": [["a", "z"]]}, MismatchError, "conflicts[0][1]"),
        ({"conflicts": [["a", "a"]]}, InstanceError, "conflicts[0]"),
        ({"conflicts": [["a"]]}, InstanceError, "conflicts[0]"),
        ({"conflicts": "a,b"}, InstanceError, "conflicts"),
        ({"conflicts": [["a", 1.5]]}, InstanceError, "conflicts[0][1]"),
        (
            {"buffers": [{"id": "a", "size": 4, "start": 0, "end": 1}], "conflicts": []},
            InstanceError,
            "buffers[0].start",
        ),
        ({"buffers": [{"id": "a", "size": -4}], "conflicts": []}, InstanceError, "buffers[0].size"),
    ],
)
def test_bad_conflicts_name_the_field(change: dict, error: type[InstanceError], field: str) -> None:
    with pytest.raises(error) as caught:
        al.parse_instance({**DOC, **change})
    assert caught.value.where == field


def test_instance_type_checks_indices() -> None:
    b = (al.Buffer("x", 1, 0, 0), al.Buffer("y", 1, 0, 0))
    with pytest.raises(InstanceError, match=r"out of range"):
        al.AllocationInstance(b, conflicts=ac.Pairs.of(((0, 2),)))
    assert al.AllocationInstance(b, conflicts=ac.Pairs.of(((1, 0), (0, 1)))).conflicts == ((0, 1),)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 9), st.integers(0, 9)), max_size=30))
def test_pairs_normalise_like_sets_and_keep_a_sorted_graph(raw: list[tuple[int, int]]) -> None:
    """`Pairs` holds exactly the distinct unordered pairs, sorted; equal to the tuple form,
    hashable, picklable, and its graph lists each buffer's neighbours ascending."""
    import pickle

    if any(i == j for i, j in raw):
        with pytest.raises(ValueError, match=r"cannot conflict with itself"):
            ac.normalise(raw, 10)
        return
    want = sorted({(min(i, j), max(i, j)) for i, j in raw})
    got = ac.normalise(raw, 10)
    assert list(got) == want and got == tuple(want) and len(got) == len(want)
    assert got == ac.normalise(np.array(raw, dtype=np.int64).reshape(-1, 2), 10)
    again = pickle.loads(pickle.dumps(got))
    assert again == got and hash(again) == hash(got) and not again.array.flags.writeable
    g = got.graph(10)
    for v in range(10):
        assert g.neighbours(v).tolist() == sorted(
            {j for i, j in want if i == v} | {i for i, j in want if j == v}
        )


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_compiled_rows_are_the_sorted_rows(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Large pair sets build their graph in a compiled pass (`COMPILED_ROWS`); it gives the
    very arrays of the sort (isolated buffers and the last buffer included)."""
    rng = np.random.default_rng(seed)
    n = 300
    raw = rng.integers(0, n - 1, size=(4_000, 2))
    pairs = ac.normalise(raw[raw[:, 0] != raw[:, 1]], n)
    monkeypatch.setattr(ac, "COMPILED_ROWS", 10**12)
    want = ac.graph(pairs, n + 2)
    monkeypatch.setattr(ac, "COMPILED_ROWS", 0)
    monkeypatch.setattr(ac, "COMPILE_PAYS", 0)  # compiled even on a cold cache
    got = ac.graph(pairs, n + 2)
    assert got.indptr.tolist() == want.indptr.tolist()
    assert got.indices.tolist() == want.indices.tolist()


def test_pairs_given_as_pairs_are_still_checked_against_the_buffers() -> None:
    b = (al.Buffer("x", 1, 0, 0), al.Buffer("y", 1, 0, 0))
    with pytest.raises(InstanceError, match=r"conflicts\[1\].*out of range 0..1: 0, 5"):
        al.AllocationInstance(b, conflicts=ac.Pairs.of(((0, 1), (0, 5))))


@settings(max_examples=40, deadline=None)
@given(
    st.integers(2, 8).flatmap(
        lambda n: st.tuples(
            st.lists(st.integers(1, 6), min_size=n, max_size=n),
            st.lists(st.integers(-2, 12), min_size=n, max_size=n),
            st.lists(st.sampled_from(list(itertools.combinations(range(n), 2))), max_size=12),
        )
    ),
    st.booleans(),
)
def test_checker_screens_in_numpy_as_it_checks_in_python(case, huge: bool) -> None:
    """The same violations, in the same order, whether the pairs are screened in numpy or (with
    numbers beyond int64, shifted by 2**70) checked one by one in Python."""
    sizes, offsets, pairs = case
    shift = 2**70 if huge else 0
    bufs = tuple(al.Buffer(str(k), s, 0, 0) for k, s in enumerate(sizes))
    inst = al.AllocationInstance(bufs, conflicts=ac.Pairs.of(pairs))
    got = al.check(inst, al.AllocationSolution(tuple(o + shift for o in offsets)))
    want = [
        f"overlap: conflicting buffers {i} and {j} share addresses "
        f"[{max(offsets[i], offsets[j]) + shift}, "
        f"{min(offsets[i] + sizes[i], offsets[j] + sizes[j]) + shift})"
        for i, j in inst.conflicts or ()
        if offsets[i] < offsets[j] + sizes[j] and offsets[j] < offsets[i] + sizes[i]
    ]
    assert [v for v in got if v.startswith("overlap")] == want


def test_checker_sees_overlaps_of_conflicting_pairs_only() -> None:
    inst = al.parse_instance(DOC)
    assert al.check(inst, al.AllocationSolution((0, 4, 7, 0))) == []  # d beside c, below it
    bad = al.check(inst, al.AllocationSolution((0, 3, 7, 8)))
    assert bad == [
        "overlap: conflicting buffers a and b share addresses [3, 4)",
        "overlap: conflicting buffers c and d share addresses [8, 10)",
    ]
    # a and d do not conflict: the same addresses are fine
    assert al.check(inst, al.AllocationSolution((0, 4, 7, 1))) == []


def test_bound_is_the_heaviest_clique() -> None:
    inst = al.parse_instance(DOC)
    assert al.lower_bound(inst) == 12  # a, b, c
    assert al.clique_bound(inst) == (12, True)
    aligned = al.parse_instance({**DOC, "alignment": 4})  # 4 + 4 + 5 (c on top)
    assert al.lower_bound(aligned) == 13


def _brute_clique(n: int, pairs: set[tuple[int, int]], w: list[int]) -> int:
    best = 0
    for mask in range(1 << n):
        vs = [v for v in range(n) if mask >> v & 1]
        if all((a, b) in pairs for a, b in itertools.combinations(vs, 2)):
            best = max(best, sum(w[v] for v in vs))
    return best


def _brute_peak(inst: al.AllocationInstance) -> int:
    return ac.brute_peak([b.size for b in inst.buffers], inst.conflicts or (), inst.alignment)


@st.composite
def small(draw: st.DrawFn) -> al.AllocationInstance:
    n = draw(st.integers(1, 6))
    sizes = draw(st.lists(st.integers(1, 12), min_size=n, max_size=n))
    every = list(itertools.combinations(range(n), 2))
    pairs = draw(st.lists(st.sampled_from(every), unique=True)) if every else []
    bufs = tuple(al.Buffer(str(k), s, 0, 0) for k, s in enumerate(sizes))
    return al.AllocationInstance(bufs, draw(st.integers(1, 3)), conflicts=ac.Pairs.of(pairs))


@settings(max_examples=60, deadline=None)
@given(small())
def test_clique_bound_exact_and_below_the_optimum(inst: al.AllocationInstance) -> None:
    n = len(inst.buffers)
    w = [b.size for b in inst.buffers]
    members, exact = ac.max_clique(al.conflict_graph(inst), np.array(w), 5.0)
    assert exact and sum(w[v] for v in members) == _brute_clique(n, set(inst.conflicts or ()), w)
    greedy = ac.greedy_clique(al.conflict_graph(inst), np.array(w))
    assert sum(w[v] for v in greedy) <= sum(w[v] for v in members)
    assert al.lower_bound(inst) <= _brute_peak(inst)


def test_from_clocks_is_the_definition() -> None:
    rng = np.random.default_rng(3)
    starts = rng.integers(0, 6, size=(30, 3))
    ends = starts + rng.integers(1, 6, size=(30, 3))
    pairs = set(ac.from_clocks(starts, ends))
    for k, m in itertools.combinations(range(30), 2):
        ordered = (ends[k] <= starts[m]).all() or (ends[m] <= starts[k]).all()
        assert ((k, m) in pairs) == (not ordered)


def test_generator_is_seeded_and_valid() -> None:
    one, two = concurrent_family(120, 5), concurrent_family(120, 5)
    assert one == two and one.conflicts and len(one.buffers) == 120
    assert concurrent_family(120, 6) != one
    assert al.parse_instance(al.instance_to_json(one)) == one


def test_intervals_only_solver_is_refused_with_names(tmp_path: Path) -> None:
    inst = al.parse_instance(DOC)
    res = run.solve(inst, "ff-start")
    assert res.status is Status.UNKNOWN and res.solution is None
    assert "does not take conflicts" in res.message


def _omni_csv(tmp_path: Path, rows: list[str], first: str = "") -> Path:
    path = tmp_path / "pool.csv"
    path.write_text(first + "id,lower,upper,size,offset\r\n" + "\r\n".join(rows) + "\r\n")
    return path


def test_omnimalloc_csv_clocks_become_conflicts(tmp_path: Path) -> None:
    path = _omni_csv(
        tmp_path,
        ["0,0:0,2:0,4,", "1,0:0,0:3,4,", "2,2:0,3:1,4,0", "3,1:0,3:0,4,"],
        "# pool_offset=64\r\n",
    )
    data = omnimalloc_csv(path)
    assert data["buffers"][2] == {"id": "2", "size": 4, "start": [2, 0], "end": [3, 1]}
    inst = al.parse_instance(data)
    # 0 ends (2,0) before 2 starts (2,0); 1 ends (0,3), not before 2's (2,0) nor 3's (1,0)
    assert inst.conflicts == ((0, 1), (0, 3), (1, 2), (1, 3), (2, 3))
    assert inst.conflicts is not None and inst.conflicts.clocks is not None


def test_clock_instances_round_trip_and_keep_the_clocks() -> None:
    """A generated instance is written with its buffers' clocks (no pair list) and read back
    to the same conflicts and clocks; pickling (to a worker) keeps the clocks too."""
    inst = concurrent_family(60, 2)
    doc = json.loads(json.dumps(al.instance_to_json(inst)))
    assert "conflicts" not in doc and len(doc["buffers"][0]["start"]) == 4
    back = al.parse_instance(doc)
    assert back == inst and back.conflicts is not None and inst.conflicts is not None
    for clocks in (back.conflicts.clocks, pickle.loads(pickle.dumps(inst.conflicts)).clocks):
        assert clocks is not None and inst.conflicts.clocks is not None
        assert np.array_equal(clocks.starts, inst.conflicts.clocks.starts)
        assert np.array_equal(clocks.ends, inst.conflicts.clocks.ends)


@pytest.mark.parametrize(
    ("second", "where"),
    [
        ({"start": [0], "end": [1]}, "buffers[1].start"),  # another clock length
        ({"start": [0, 2], "end": [1, 1]}, "buffers[1].end[1]"),  # the clock goes back
        ({"start": 3, "end": [1, 1]}, "buffers[1].start"),  # a step, not a clock
        ({"start": [0, True], "end": [1, 1]}, "buffers[1].start[1]"),
        ({"start": [0, 0]}, "buffers[1].end"),  # no end
    ],
)
def test_clock_errors_name_the_field(second: dict[str, object], where: str) -> None:
    buffers = [{"id": "a", "size": 1, "start": [0, 0], "end": [1, 1]}, {"id": "b", "size": 2}]
    buffers[1].update(second)
    doc = {"problem": "allocation", "buffers": buffers}
    with pytest.raises(InstanceError) as caught:
        al.parse_instance(doc)
    assert caught.value.where == where


def test_omnimalloc_csv_scalar_times_are_minimalloc(tmp_path: Path) -> None:
    path = _omni_csv(tmp_path, ["0,0,3,4,", "1,3,5,2,"])
    assert omnimalloc_csv(path)["buffers"] == [
        {"id": "0", "size": 4, "start": 0, "end": 2},
        {"id": "1", "size": 2, "start": 3, "end": 4},
    ]
    plain = tmp_path / "plain.csv"
    plain.write_text("id,lower,upper,size\n0,0,3,4\n1,3,5,2\n")
    assert minimalloc_csv(plain)["buffers"] == omnimalloc_csv(path)["buffers"]


@pytest.mark.parametrize(
    ("rows", "where"),
    [
        (["0,0:0,2:0,4,", "1,0,3,4,"], "line 3"),  # clock lengths differ
        (["0,2:0,1:1,4,"], "line 2.upper"),  # the clock goes back
        (["0,0:x,2:0,4,"], "line 2.lower"),
    ],
)
def test_omnimalloc_csv_errors_name_the_line(tmp_path: Path, rows: list[str], where: str) -> None:
    with pytest.raises(InstanceError) as caught:
        omnimalloc_csv(_omni_csv(tmp_path, rows))
    assert caught.value.where == where


def test_cli_imports_omnimalloc_and_reports_bad_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _omni_csv(tmp_path, ["0,0:0,2:0,4,", "1,0:0,0:3,4,"])
    out = tmp_path / "pool.json"
    assert main(["import", "omnimalloc", str(path), "-o", str(out)]) == 0
    assert al.parse_instance(json.loads(out.read_text())).conflicts == [(0, 1)]
    bad = _omni_csv(tmp_path, ["0,2:0,1:1,4,"])
    assert main(["import", "omnimalloc", str(bad), "-o", str(out)]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pool.csv" in err[0] and "line 2.upper" in err[0]


def test_compare_shows_refusals_as_not_applicable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A solver that does not take conflicts is `n/a` in the tables, counted apart from the
    solves that found nothing, and named with its reason in the report."""
    path = tmp_path / "two-streams.json"
    path.write_text(json.dumps(DOC))
    out = tmp_path / "out"
    argv = ["compare", str(path), "--solvers", "ffd,xla", "--time-limit", "2", "-o", str(out)]
    assert main([*argv, "--jobs", "1"]) == 0
    printed = capsys.readouterr()
    row = next(line for line in printed.out.splitlines() if line.startswith("two-streams"))
    assert row.split()[-2:] == ["12*", "n/a"]  # ffd packs at the clique bound; xla refuses
    assert "1 task(s) not run" in printed.err and "without a solution" not in printed.err
    assert "xla does not take conflicts" in (out / "report.md").read_text()

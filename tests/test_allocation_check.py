"""The allocation checker and readers at scale: the compiled sweep reports exactly what the Python
sweep reports, and the column-wise parsers accept, build or reject exactly as the field readers."""

from __future__ import annotations

import gc
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorplan.heuristics.allocation import place
from tensorplan.problems import allocation_kernels
from tensorplan.problems.allocation import (
    COMPILED_CHECK_MIN,
    AllocationInstance,
    AllocationSolution,
    Buffer,
    check,
    check_compiled,
    check_reference,
    columns,
    instance_to_json,
    parse_instance,
    parse_instance_columns,
    parse_instance_fields,
    parse_solution,
    parse_solution_fields,
    peak,
    solution_to_json,
)
from tensorplan.problems.allocation_gen import mixed_family, pow2_family, random_family
from tensorplan.problems.core import InstanceError

ROOT = Path(__file__).resolve().parents[1]
BAD_DIR = ROOT / "tests" / "bad_inputs" / "allocation"


def _json_object(path: Path) -> bool:
    try:
        return isinstance(json.loads(path.read_text()), dict)
    except ValueError:
        return False


# the catalogue's files that reach a reader (the others fail in `load_json` already)
BAD_FILES = [p for p in sorted(BAD_DIR.glob("*.json")) if _json_object(p)]


def outcome(f, *args) -> tuple[str, Any]:
    """("ok", value) or (exception type, message): what a caller of `f` observes."""
    try:
        return "ok", f(*args)
    except Exception as err:
        return type(err).__name__, str(err)


def make(raw, alignment: int = 1, capacity: int | None = None) -> AllocationInstance:
    return AllocationInstance(
        tuple(Buffer(str(i), s, t, t + d) for i, (s, t, d) in enumerate(raw)),
        alignment=alignment,
        capacity=capacity,
    )


# --- compiled sweep == Python sweep ---------------------------------------------------------------

raw_buffers = st.lists(
    st.tuples(st.integers(1, 12), st.integers(-5, 20), st.integers(0, 8)), min_size=0, max_size=40
)


@settings(max_examples=300, deadline=None)
@given(
    raw_buffers,
    st.sampled_from([1, 1, 2, 3, 8]),
    st.one_of(st.none(), st.integers(1, 60)),
    st.randoms(use_true_random=False),
)
def test_compiled_check_equals_reference_on_random_offsets(raw, alignment, capacity, rnd):
    inst = make(raw, alignment, capacity)
    sol = AllocationSolution(tuple(rnd.randint(-4, 40) for _ in raw))
    assert check_compiled(inst, sol) == check_reference(inst, sol)


def plant(inst: AllocationInstance, offsets: list[int], kind: str, rnd) -> list[int]:
    """One violation of `kind` planted into a packing (ties in the key order included)."""
    out = list(offsets)
    n = len(out)
    i = rnd.randrange(n)
    if kind == "overlap":  # onto a buffer alive at the same time, shifted a little or not
        bs = inst.buffers
        mates = [j for j in range(n) if j != i and bs[i].start <= bs[j].end <= bs[i].end]
        if mates:
            j = rnd.choice(mates)
            out[i] = out[j] + rnd.choice([0, 0, 1, -1, bs[j].size - 1])
    elif kind == "negative":
        out[i] = -rnd.randint(1, 20) * rnd.choice([1, inst.alignment])
    elif kind == "misaligned":
        out[i] += 1
    elif kind == "same":  # two buffers with the same offset and size: ties broken by index
        out[i] = out[(i + 1) % n]
    return out


KINDS = ["overlap", "negative", "misaligned", "same"]


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 30), st.integers(0, 40), st.integers(0, 10)),
        min_size=2,
        max_size=60,
    ),
    st.sampled_from([1, 4]),
    st.lists(st.sampled_from(KINDS), min_size=0, max_size=4),
    st.randoms(use_true_random=False),
)
def test_compiled_check_equals_reference_on_planted_violations(raw, alignment, kinds, rnd):
    inst = make(raw, alignment)
    offsets = place(inst, list(range(len(raw))))
    assert check_compiled(inst, AllocationSolution(tuple(offsets))) == []
    for kind in kinds:
        offsets = plant(inst, offsets, kind, rnd)
    sol = AllocationSolution(tuple(offsets))
    top = peak(inst, sol)
    for capped in (inst, AllocationInstance(inst.buffers, alignment, max(1, top - 1), "c")):
        assert check_compiled(capped, sol) == check_reference(capped, sol)


def test_every_kind_of_violation_by_name():
    inst = make([(10, 1, 4), (5, 2, 4), (8, 1, 2), (4, 6, 3)], alignment=2, capacity=12)
    sol = AllocationSolution((0, 4, 10, -3))
    want = [
        "negative offset: buffer 3 at -3",
        "bad alignment: buffer 3 at -3 is not a multiple of 2",
        "overlap: buffers 0 and 2 share addresses [10, 10) at time 1",
        "overlap: buffers 0 and 1 share addresses [4, 9) at time 2",
        "capacity exceeded: peak 18 > capacity 12",
    ]
    got = check_reference(inst, sol)
    assert check_compiled(inst, sol) == got
    # [10, 10) is not an overlap: buffer 2 starts where buffer 0 ends
    assert got == [want[0], want[1], want[3], want[4]]
    short = AllocationSolution((0, 4))
    assert check_compiled(inst, short) == check(inst, short) == ["length: 2 offsets for 4 buffers"]


def test_check_takes_the_compiled_sweep_on_large_instances_and_agrees():
    import random

    rnd = random.Random(4)
    for inst in (
        random_family(3000, 2, horizon=3000, max_size=999, max_life=201),
        mixed_family(2500, 3),
        pow2_family(2200, 5),  # alignment 8
    ):
        assert len(inst.buffers) >= COMPILED_CHECK_MIN
        offsets = place(inst, list(range(len(inst.buffers))))
        assert check(inst, AllocationSolution(tuple(offsets))) == []
        for kind in KINDS * 5:
            offsets = plant(inst, offsets, kind, rnd)
        sol = AllocationSolution(tuple(offsets))
        got = check(inst, sol)
        assert len(got) >= 10 and got == check_reference(inst, sol) == check_compiled(inst, sol)


def test_numbers_beyond_int64_take_the_python_sweep():
    size = 2**52  # sizes add up to 2**53 at most (issue 34); offsets still come from the file
    big = 2**63 - size
    inst = AllocationInstance((Buffer("a", size, 0, 1), Buffer("b", size, 1, 2)))
    for offsets in ((0, big), (big, 0), (big, big)):
        sol = AllocationSolution(offsets)
        assert check_compiled(inst, sol) is None  # offset + size reaches 2**63
        assert check(inst, sol) == check_reference(inst, sol)
    assert check_reference(inst, AllocationSolution((big, big)))[0] == (
        f"overlap: buffers a and b share addresses [{big}, {2**63}) at time 1"
    )
    small = make([(3, 0, 2), (3, 1, 2)])
    for offsets in ((2**63, 0), (True, 0), (np.int64(1), 0), (1.0, 0)):  # not plain ints
        sol = AllocationSolution(offsets)
        assert check_compiled(small, sol) is None
    floaty = AllocationInstance((Buffer("a", 3, 0, 2.5), Buffer("b", 3, 1, 2)))
    assert columns(floaty) is None and check_compiled(floaty, AllocationSolution((0, 1))) is None
    with pytest.raises(InstanceError, match="rounded up to the alignment"):
        AllocationInstance(small.buffers, alignment=2**63)  # 2 x 2**63 once aligned: refused


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 3), st.integers(0, 6)), min_size=1, max_size=20),
    st.randoms(use_true_random=False),
)
def test_large_numbers_within_int64_are_compiled_alike(raw, rnd):
    # offsets near 2**61 (sizes near 2**48, all 20 within the 2**53 total): the packed sort keys
    # no longer fit, the sweep sorts by lexsort
    big = 2**61
    inst = AllocationInstance(
        tuple(Buffer(str(i), s * 2**48 // 3, t, t + 2) for i, (s, t) in enumerate(raw))
    )
    sol = AllocationSolution(tuple(rnd.choice([0, big, big // 3, -big]) for _ in raw))
    got = check_compiled(inst, sol)
    assert got is not None and got == check_reference(inst, sol)


def test_columns_are_shared_and_read_only():
    inst = parse_instance(instance_to_json(random_family(30, 1)))
    size = columns(inst)[0]
    assert columns(inst)[0] is size  # the parser's arrays, kept
    with pytest.raises(ValueError, match="read-only"):
        size[0] = 0
    again = make([(2, 0, 1)])
    assert columns(again) is columns(again) and not columns(again)[1].flags.writeable


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.one_of(st.integers(-3, 3), st.integers(-(2**62), 2**62)),
            st.one_of(st.integers(0, 3), st.integers(0, 2**62)),
        ),
        min_size=1,
        max_size=30,
    )
)
def test_sorted_by_is_the_stable_lexicographic_order(pairs):
    a = np.array([x for x, _ in pairs], dtype=np.int64)
    b = np.array([y for _, y in pairs], dtype=np.int64)
    want = sorted(range(len(pairs)), key=lambda i: (pairs[i], i))
    assert allocation_kernels.sorted_by(a, b).tolist() == want
    assert allocation_kernels.sorted_by(a).tolist() == sorted(range(len(a)), key=lambda i: a[i])


# --- instance reader: columns == fields ---------------------------------------------------------

ODD_VALUES: st.SearchStrategy[Any] = st.sampled_from(
    [0, -1, 4.0, 2.5, True, False, None, "4", [], {}, 2**62, 2**62 + 1, 2**63, -(2**62) - 1,
     -(2**62), 2.0**53, 2.0**54, 1e30, math.nan, math.inf]
)  # fmt: skip
ODD_IDS: st.SearchStrategy[Any] = st.sampled_from([None, True, 1.5, [], "", "0", 0, -1, "a"])
TOP_MUTATIONS = [
    ("problem", "schedule"), ("name", ""), ("name", 3), ("alignment", 0), ("alignment", "2"),
    ("alignment", 2.0), ("capacity", 0), ("capacity", 1e3), ("capacty", 1), ("buffers", None),
    ("buffers", {}), ("buffers", "b"),
]  # fmt: skip
BUFFER_MUTATIONS = ["id", "size", "start", "end", "missing", "extra", "renamed", "list", "null"]


@st.composite
def instance_docs(draw) -> dict[str, Any]:
    """A good document (integer and string ids, any order of fields), then half the time one
    or two mutations: an odd value, a missing / extra / misspelt field, a buffer that is not an
    object, a bad top-level field."""
    n = draw(st.integers(0, 12))
    buffers: list[Any] = []  # buffer objects, until a mutation puts something else in
    for i in range(n):
        start = draw(st.integers(-3, 40))
        item = {
            "id": draw(st.sampled_from([i, str(i), f"b{i}"])),
            "size": draw(st.integers(1, 2**62)) if draw(st.booleans()) else draw(st.integers(1, 9)),
            "start": start,
            "end": start + draw(st.integers(0, 9)),
        }
        keys = draw(st.permutations(list(item)))
        buffers.append({k: item[k] for k in keys})
    doc: dict[str, Any] = {"problem": "allocation", "buffers": buffers}
    for field, values in (("name", ["x"]), ("alignment", [1, 4]), ("capacity", [None, 50])):
        if draw(st.booleans()):
            doc[field] = draw(st.sampled_from(values))
    if not draw(st.booleans()):
        return doc
    for _ in range(draw(st.integers(1, 2))):
        if n and draw(st.integers(0, 4)):
            k = draw(st.integers(0, n - 1))
            what = draw(st.sampled_from(BUFFER_MUTATIONS))
            item = buffers[k]
            if not isinstance(item, dict):
                continue
            if what == "id":
                item["id"] = draw(ODD_IDS)
            elif what in ("size", "start", "end"):
                item[what] = draw(ODD_VALUES)
            elif what == "missing":
                del item[draw(st.sampled_from(sorted(item)))]
            elif what == "extra":
                item["szie"] = 1
            elif what == "renamed":
                item["szie"] = item.pop(draw(st.sampled_from(sorted(item))))
            else:
                buffers[k] = [1, 2, 3, 4] if what == "list" else None
        else:
            field, value = draw(st.sampled_from(TOP_MUTATIONS))
            doc[field] = value
    return doc


@settings(max_examples=400, deadline=None)
@given(instance_docs())
def test_column_reader_agrees_with_field_reader(doc):
    fields = outcome(parse_instance_fields, doc)
    assert outcome(parse_instance, doc) == fields
    fast = outcome(parse_instance_columns, doc)
    assert fast in (fields, ("ok", None))  # the same result or error, or "not mine"


def test_column_reader_takes_plain_documents():
    doc = instance_to_json(random_family(500, 1, horizon=500, max_size=999, max_life=201))
    doc["buffers"][7]["id"] = 7  # integer ids are keyed as strings
    inst = parse_instance_columns(doc)
    assert inst is not None and inst == parse_instance_fields(doc)
    assert inst.buffers[7].id == "7"
    size, start, end = columns(inst)
    assert size.tolist() == [b.size for b in inst.buffers]
    assert (start.tolist(), end.tolist()) == (
        [b.start for b in inst.buffers],
        [b.end for b in inst.buffers],
    )


def bad_documents() -> list[dict[str, Any]]:
    """A large good document with one bad field at a time, deep inside the list."""
    base = instance_to_json(random_family(3000, 2))
    out = []
    for k, field, value in [
        (0, "size", KeyError),
        (2999, "size", "4"),
        (1500, "size", 0),
        (1500, "size", -4),
        (1500, "size", 4.0),  # accepted: an exact float
        (1500, "size", 2**62 + 1),
        (1500, "size", 2**64),
        (1500, "size", 1e30),
        (1500, "size", True),
        (1500, "end", 0),
        (1500, "start", None),
        (1500, "id", "0"),  # duplicate of buffer 0
        (1500, "id", 0),  # duplicate of "0" once keyed as a string
        (1500, "id", None),
        (1500, "id", 1.5),
        (1500, "id", 10**5000),  # too long to print: str() refuses it
        (1500, "szie", 3),
        (1500, "item", [1]),
    ]:
        doc = json.loads(json.dumps(base))
        if field == "item":
            doc["buffers"][k] = value
        elif value is KeyError:
            del doc["buffers"][k][field]
        else:
            doc["buffers"][k][field] = value
        out.append(doc)
    for field, value in [("alignment", 0), ("capacity", -1), ("aligment", 4), ("name", 1)]:
        out.append({**base, field: value})
    out.append({**base, "buffers": {}})
    out.append({"problem": "allocation", "buffers": []})
    return out


@pytest.mark.parametrize("doc", bad_documents())
def test_errors_are_the_field_readers_errors(doc):
    want = outcome(parse_instance_fields, doc)
    assert outcome(parse_instance, doc) == want
    assert outcome(parse_instance_columns, doc) in (want, ("ok", None))


@pytest.mark.parametrize("path", BAD_FILES, ids=lambda p: p.stem)
def test_shipped_bad_inputs_read_alike(path):
    doc = json.loads(path.read_text())
    if "solution" not in doc:
        assert outcome(parse_instance, doc) == outcome(parse_instance_fields, doc)
    else:
        inst = parse_instance(json.loads((BAD_DIR / "ok.json").read_text()))
        sol = doc["solution"]
        assert outcome(parse_solution, sol, inst) == outcome(parse_solution_fields, sol, inst)


def test_collector_state_is_restored():
    doc = instance_to_json(random_family(50, 1))
    assert gc.isenabled()
    parse_instance(doc)
    assert gc.isenabled()
    with pytest.raises(ValueError):
        parse_instance({**doc, "alignment": 0})
    assert gc.isenabled()
    gc.disable()
    try:
        parse_instance(doc)
        assert not gc.isenabled()  # a caller's choice stands
    finally:
        gc.enable()


def test_post_init_names_the_first_bad_buffer():
    ok = Buffer("a", 1, 0, 0)
    for buffers, want in [
        ((ok, Buffer("b", 0, 0, 0), Buffer("c", 1, 3, 2)), "buffers[1].size: must be a positive"),
        ((ok, Buffer("b", 1, 3, 2), Buffer("c", 0, 0, 0)), "buffers[1].end: end 2 is before st"),
        ((ok, Buffer("b", 1, 0, 0), Buffer("a", 1, 0, 0)), "buffers[2].id: duplicate id 'a'"),
    ]:
        with pytest.raises(ValueError, match=want.replace("[", r"\[").replace("]", r"\]")):
            AllocationInstance(buffers)


# --- solution reader and writer ------------------------------------------------------------------

SOL_INST = make([(3, 0, 2), (4, 1, 3), (2, 2, 2), (5, 0, 9)])


@st.composite
def offset_docs(draw) -> Any:
    """Offsets for every buffer in any key order, then half the time an odd value, a missing
    or unknown id, or a malformed document."""
    ids = [b.id for b in SOL_INST.buffers]
    offsets = {k: draw(st.integers(-(2**62), 2**62)) for k in draw(st.permutations(ids))}
    if draw(st.booleans()):
        return {"offsets": offsets}
    what = draw(st.sampled_from(["value", "value", "missing", "unknown", "list", "extra", "typo"]))
    key = draw(st.sampled_from(ids))
    if what == "value":
        offsets[key] = draw(ODD_VALUES)
    elif what == "missing":
        del offsets[key]
    elif what == "unknown":
        offsets[draw(st.sampled_from(["9", "x", "00"]))] = 1
        if draw(st.booleans()):
            del offsets[key]  # as many keys as buffers, one of them unknown
    elif what == "list":
        return {"offsets": list(offsets.values())}
    elif what == "extra":
        return {"offsets": offsets, "offset": 1}
    else:
        return {"ofsets": offsets}
    return {"offsets": offsets}


@settings(max_examples=300, deadline=None)
@given(offset_docs())
def test_solution_reader_agrees_with_key_by_key_reader(doc):
    assert outcome(parse_solution, doc, SOL_INST) == outcome(parse_solution_fields, doc, SOL_INST)


def test_solution_round_trip_in_any_key_order():
    inst = random_family(2000, 3)
    offsets = tuple(place(inst, list(range(2000))))
    sol = AllocationSolution(offsets)
    doc = solution_to_json(inst, sol)
    assert doc == {"offsets": {b.id: o for b, o in zip(inst.buffers, offsets, strict=True)}}
    assert list(doc["offsets"]) == [b.id for b in inst.buffers]
    assert parse_solution(doc, inst) == sol
    shuffled = {"offsets": dict(reversed(doc["offsets"].items()))}
    assert parse_solution(shuffled, inst) == sol == parse_solution_fields(shuffled, inst)
    with pytest.raises(ValueError, match="zip"):
        solution_to_json(inst, AllocationSolution(offsets[:-1]))

"""The bad-input catalogue (`tests/bad_inputs/cases.toml`): every deliberately broken instance or
solution file of the four problems gives its one expected error, through the library's loaders
and through `tensorplan check` (exit 2 for a malformed file, 1 for an infeasible solution, one
line naming the file and the field)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from tensorplan.harness.cli import main
from tensorplan.harness.run import check, load_instance, load_solution
from tensorplan.problems.core import InstanceError, MismatchError

HERE = Path(__file__).parent / "bad_inputs"
CASES = tomllib.loads((HERE / "cases.toml").read_text(encoding="utf-8"))["case"]
ERRORS = {"InstanceError": InstanceError, "MismatchError": MismatchError}
PROBLEMS = ("allocation", "schedule", "fusion", "layout")


def _id(case: dict) -> str:
    return case["file"].removesuffix(".json")


def test_catalogue_covers_every_kind_for_every_problem():
    files = {c["file"] for c in CASES}
    on_disk = {
        str(p.relative_to(HERE)) for p in HERE.rglob("*.json") if not p.name.startswith("ok")
    }
    assert files == on_disk  # every file has its expected error, every case its file
    for problem in PROBLEMS:
        mine = [c for c in CASES if c["file"].startswith(f"{problem}/")]
        for kind in ("instance", "solution"):
            names = {c["file"].split("/")[1] for c in mine if c["kind"] == kind}
            for must in ("empty", "not-json", "misspelled"):
                assert any(must in n for n in names), (problem, kind, must)
        assert any("unknown" in c["file"] for c in mine), problem
        assert any(c["error"] == "violation" for c in mine), problem


@pytest.mark.parametrize("problem", PROBLEMS)
def test_ok_files_pass(problem, capsys):
    inst = load_instance(HERE / problem / "ok.json")
    _, sol = load_solution(HERE / problem / "ok-solution.json", inst)
    assert check(inst, sol)[0] == []
    rc = main(["check", str(HERE / problem / "ok.json"), str(HERE / problem / "ok-solution.json")])
    assert rc == 0, capsys.readouterr()


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_loader_gives_the_expected_error(case):
    path = HERE / case["file"]
    if case["kind"] == "instance":
        with pytest.raises(InstanceError) as got:
            load_instance(path)
    else:
        inst = load_instance(HERE / case["against"])
        if case["error"] == "violation":
            _, sol = load_solution(path, inst)
            violations, objective = check(inst, sol)
            assert violations and objective is None
            assert any(case["says"] in v for v in violations), violations
            return
        with pytest.raises(InstanceError) as got:
            load_solution(path, inst)
    err = got.value
    assert type(err) is ERRORS[case["error"]], repr(err)
    assert err.file == str(path)
    assert err.where == case["where"], str(err)
    assert case["says"] in err.why, str(err)


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_cli_check_exit_code_and_one_line(case, capsys):
    problem = case["file"].split("/")[0]
    path = HERE / case["file"]
    if case["kind"] == "instance":
        argv = ["check", str(path), str(HERE / problem / "ok-solution.json")]
    else:
        argv = ["check", str(HERE / case["against"]), str(path)]
    rc = main(argv)
    out = capsys.readouterr()
    assert rc == case["exit"], (out.out, out.err)
    text = out.out + out.err
    if case["error"] == "violation":
        assert case["says"] in text
        return
    lines = [x for x in text.splitlines() if x.strip()]
    assert len(lines) == 1, lines
    assert str(path) in lines[0] and f"{case['where']}: " in lines[0], lines[0]


def test_schedule_totals_up_to_2_53_are_exact_and_beyond_refused(tmp_path, capsys):
    """An alloc of 2**51 used by 4 ops lives 4 positions: 2**53, the most an instance may reach
    (issue 34: past it, solvers overflowed or rounded); one more byte is refused at load."""
    import json

    from tensorplan.problems import schedule

    doc = {
        "problem": "schedule",
        "ops": [{"id": o} for o in "abcd"],
        "allocs": [{"id": "X", "size": 2**51, "ops": list("abcd")}],
    }
    inst = schedule.parse_instance(doc)
    sol = schedule.parse_solution({"order": list("abcd")}, inst)
    assert schedule.evaluate(inst, sol) == 2**53 == schedule.lower_bound(inst)
    peak = {
        **doc,
        "objective": "peak",
        "allocs": [
            {"id": "X", "size": 2**52, "ops": ["a", "b"]},
            {"id": "Y", "size": 2**52, "ops": ["b", "c"]},
        ],
    }
    got = schedule.parse_instance(peak)
    assert schedule.evaluate(got, schedule.parse_solution({"order": list("abcd")}, got)) == 2**53
    (tmp_path / "i.json").write_text(json.dumps(doc))
    (tmp_path / "s.json").write_text(json.dumps({"solution": {"order": list("abcd")}}))
    assert main(["check", str(tmp_path / "i.json"), str(tmp_path / "s.json")]) == 0
    assert capsys.readouterr().out.split() == ["feasible,", "sum_liveness", str(2**53)]
    for bad, says in (
        ({**doc, "ops": [*doc["ops"], {"id": "e"}]}, "x 5 ops = 11258999068426240"),
        ({**peak, "allocs": [*peak["allocs"], {"id": "Z", "size": 1, "ops": []}]}, "at once"),
    ):
        with pytest.raises(InstanceError, match=r"more than 2\*\*53") as err:
            schedule.parse_instance(bad)
        assert err.value.where == "allocs" and says in err.value.why
        (tmp_path / "i.json").write_text(json.dumps(bad))
        assert main(["check", str(tmp_path / "i.json"), str(tmp_path / "s.json")]) == 2
        assert "allocs: the sizes add up to" in capsys.readouterr().err


def test_floats_are_integers_only_when_exact():
    from tensorplan.problems.core import MAX_INT, integer

    assert integer(4.0, "x") == 4 and integer(2.0**53, "x") == 2**53 and integer(MAX_INT, "x")
    for bad in (1e30, 2.0**54, 0.5, float("nan"), float("inf"), MAX_INT + 1, -MAX_INT - 1, True):
        with pytest.raises(InstanceError, match="must be"):
            integer(bad, "x")

"""The command line as a terminal shows it (issue 35 items 3-5, issue 34's argument items): help
on every argument with its default, examples and exit codes per verb, one-line argument errors
in the user's words, tables that fit 80 columns, `generate` for every family of every problem."""

from __future__ import annotations

import argparse
import io
import json
import logging
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tensorplan.harness import cli, registry
from tensorplan.harness.cli import main
from tensorplan.harness.console import cells, solvers_lines, table_blocks
from tensorplan.harness.generate import FAMILIES
from tensorplan.harness.run import load_instance
from tensorplan.problems.core import InstanceError

ROOT = Path(__file__).resolve().parents[1]
SEED = ROOT / "instances" / "allocation" / "seed-example.json"
SCHEDULE = ROOT / "instances" / "schedule" / "recompute-4-s1.json"
FAST = {"allocation": "ffd", "schedule": "greedy", "layout": "greedy0", "fusion": "greedy"}


@pytest.fixture(autouse=True)
def eighty_columns(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")


def verb_parsers() -> dict[str, argparse.ArgumentParser]:
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def refused(argv: list[str], capsys) -> str:
    """Run `argv`, expect exit 2, return its one line of stderr."""
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "Traceback" not in err
    return err


def fits(text: str, width: int = 80) -> list[str]:
    """The lines of `text` wider than `width` terminal cells."""
    return [line for line in text.splitlines() if cells(line) > width]


# --- help -------------------------------------------------------------------------------------


def test_every_argument_has_one_line_help_with_its_default():
    for verb, parser in verb_parsers().items():
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            assert action.help and "\n" not in action.help, (verb, action.dest)
            text = cli._Help("tensorplan")._get_help_string(action) or ""
            if action.option_strings and not action.required:
                assert "default" in text or "required" in text, (verb, action.option_strings)


def test_bare_tensorplan_prints_the_verbs_with_examples_and_exit_codes(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    for verb in cli.VERBS:
        assert f"\n$ tensorplan {verb}" in out and f"\n  {verb}: " in out, verb
        what, command, prints = cli.EXAMPLES[verb]
        assert f"{verb}: {what}\n$ {command}\n  {prints}\n" in out  # three lines each
    assert not fits(out)
    with pytest.raises(SystemExit) as stop:
        main(["--help"])
    assert stop.value.code == 0 and capsys.readouterr().out == out


def test_version(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.startswith("tensorplan 0.")


@pytest.mark.parametrize("verb", list(cli.VERBS))
def test_each_verb_help_has_its_example_and_exit_codes(verb, capsys):
    with pytest.raises(SystemExit) as stop:
        main([verb, "--help"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    assert "example:\n" in out and f"$ tensorplan {verb}" in out
    assert "exit codes: 0" in out
    assert not fits(out)


def test_generate_script_help_works_from_anywhere(tmp_path):
    done = subprocess.run(
        [sys.executable, str(ROOT / "instances" / "tools" / "generate.py"), "--help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and "usage:" in done.stdout and "PROBLEM" in done.stdout
    assert not list(tmp_path.iterdir())


def test_readme_documents_generate_and_the_exit_codes():
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Command line") : readme.index("## Python")]
    assert "tensorplan generate" in section and "--list" in section
    for verb in cli.VERBS:
        assert f"`{verb}`" in section or f"tensorplan {verb}" in section, verb
    assert "exit codes" in section.lower() and "| exit 130 |" in section


# --- what a terminal shows --------------------------------------------------------------------


def test_verbose_is_accepted_before_and_after_the_verb(capsys):
    parse = cli.build_parser().parse_args
    assert parse(["-v", "solve", "x.json"]).verbose is True
    assert parse(["solve", "x.json", "-v"]).verbose is True
    assert parse(["solve", "x.json", "--verbose"]).verbose is True
    assert parse(["solve", "x.json"]).verbose is False
    assert main(["solve", str(SEED), "--solver", "ffd", "-v"]) == 0


FUSION = ROOT / "instances" / "fusion" / "random-12-s2.json"


def test_solve_verbose_logs_the_solvers_progress(capsys, caplog):
    caplog.set_level(logging.INFO, logger="tensorplan")
    assert main(["solve", str(FUSION), "--solver", "cpsat", "-v"]) == 0
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("cpsat ")]
    assert lines, "no progress line"
    assert all(re.search(r"s: best \S+, bound \S+, gap \S+$", line) for line in lines), lines
    summary = capsys.readouterr().out  # the summary agrees with the last progress line's best
    assert f"objective={lines[-1].split('best ')[1].split(',')[0]} " in summary


@pytest.mark.parametrize(
    ("solver", "needle"),
    [("cpsat", "CP-SAT"), ("ilp", "integer variables"), ("ilp-cbc", "CBC MILP Solver")],
)
def test_solve_log_passes_the_back_ends_own_log_through_to_stderr(solver, needle, capsys):
    assert main(["solve", str(FUSION), "--solver", solver, "--log"]) == 0
    out, err = capsys.readouterr()
    assert needle in err and needle not in out
    assert main(["solve", str(FUSION), "--solver", solver]) == 0
    assert needle not in capsys.readouterr().err


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_solve_live_line_is_rewritten_in_place_on_a_terminal_only():
    from tensorplan.harness.progress import solve_printer
    from tensorplan.problems.core import Progress

    assert solve_printer(False, io.StringIO()) is None  # not a terminal, not verbose: nothing
    term = _Terminal()
    live = solve_printer(False, term)
    assert live is not None
    live(Progress("cpsat", 1.0, 120, 100))
    live(Progress("cpsat", 2.0, 110, 100))
    live(Progress("cpsat", 2.5, 110, 100, final=True))
    text = term.getvalue()
    assert "\n" not in text  # one line, rewritten: the summary then prints over a clean line
    assert text.startswith("\rcpsat 1.0 s: best 120, bound 100, gap 20.00%")
    assert "\rcpsat 2.0 s: best 110, bound 100, gap 10.00%" in text
    assert text.endswith("\r" + " " * len("cpsat 2.0 s: best 110, bound 100, gap 10.00%") + "\r")


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["solve", str(SEED), "--time-limit", "abc"], "--time-limit: must be a positive number"),
        (["solve", str(SEED), "--seed", "-5"], "--seed: must be an integer from 0 to 2**31 - 1"),
        (["solve", str(SEED), "--seed", "x"], "--seed: must be an integer"),
        (["solve", str(SEED), "--threads", "0"], "--threads: must be a positive integer"),
        (["solve", str(SEED), "--gap", "one"], "--gap: must be a relative gap"),
        (["plan", str(SCHEDULE), "-o", "x", "--seed", "-5"], "--seed: must be an integer"),
        (["compare", str(SEED), "--jobs", "0"], "--jobs: must be from 1 to"),
        (["compare", str(SEED), "--jobs", "-1"], "--jobs: must be from 1 to"),
        (["batch", str(SEED), "--solver", "ffd", "--jobs", "1000"], "per core"),
        (["compare", str(SEED), "--executor", "dask", "--scheduler", "garbage"], "tcp://HOST"),
        (["compare", str(SEED), "--scheduler", "tcp://127.0.0.1:9"], "for --executor dask only"),
        (["compare", str(SEED), "--executor", "dask"], "needs --scheduler ADDRESS"),
        (["import", "onnx", "m.onnx", "-o", "x", "--dim", "batch=99999999999999999999"], "2**62"),
        (["import", "onnx", "m.onnx", "-o", "x", "--dim", "batch=²"], "got 'batch=²'"),
        (["import", "onnx", "m.onnx", "-o", "x", "--dim", "batch"], "expected NAME=VALUE"),
        (["plan", "m.onnx", "-o", "x", "--dim", "b=1", "--dim", "b=2"], "b given twice"),
        (["import", "minimalloc", "x.csv", "-o", "x.json", "--dim", "a=1"], "onnx only"),
        (["import", "onnx", "m.onnx", "-o", "x", "--alignment", "0"], "--alignment: must be"),
        (["generate"], "which problem?"),
        (["generate", "allocation"], "-o FILE is required"),
        (["generate", "allocation", "--size", "0", "-o", "x"], "--size: must be a positive"),
        (["nope"], "invalid choice: 'nope'"),
    ],
)
def test_argument_errors_are_one_line_in_the_users_words(argv, needle, capsys, tmp_path):
    err = refused(argv, capsys)
    assert needle in err and "invalid _" not in err and "invalid int" not in err
    assert err.startswith("tensorplan") and err.endswith("--help)")


def test_options_refusal_is_one_line():
    ns = argparse.Namespace(time_limit=1.0, seed=-5, threads=1, gap=0.0)
    with pytest.raises(InstanceError, match="seed must be an integer"):
        cli._options(ns)


def test_solvers_table_fits_80_columns_and_is_aligned(capsys):
    assert main(["solvers"]) == 0
    out = capsys.readouterr().out
    assert not fits(out)
    names = {s.name for p in registry.PROBLEMS for s in registry.solvers(p).values()}
    starts = set()
    for line in out.splitlines():
        head = line.split()
        if line.startswith("  ") and line[2] != " " and head[0] in names:
            starts.add(line.index(head[1], 2 + len(head[0])))
    assert len(starts) == 1  # the kind column starts at one place, long names included
    assert "omnimalloc-greedy" not in out or "omnimalloc-greedy  heuristic" in out
    assert solvers_lines(120) != solvers_lines(60)  # wraps to the width it is given


def test_tables_split_into_blocks_and_never_cut_a_number():
    solvers = [f"solver-with-a-long-name-{k}" for k in range(9)] + ["omnimalloc-greedy"]
    headers = ["instance", "size", "best bound", *solvers]
    rows = [
        ["a-very-long-instance-name-" * 3, "123456", "9876543210"]
        + [f"{9876543210 + k} (+{k}.25%)" for k in range(len(solvers))],
        ["模型一号测试", "6", "37", *(["37*"] * len(solvers))],
    ]
    lines = table_blocks(headers, rows, keys=3, width=80)
    text = "\n".join(lines)
    assert not fits(text)
    for row in rows:
        for value in row[1:]:
            assert value in text  # every number whole
    assert "…" in text  # the long name abbreviated
    blocks = [line for line in lines if line.startswith("-")]
    assert len(blocks) > 1 and text.count("模型一号测试") == len(blocks)  # labels in every block


def test_check_says_feasible_and_the_objective(tmp_path, capsys):
    sol = tmp_path / "s.json"
    assert main(["solve", str(SEED), "--solver", "ffd", "-o", str(sol)]) == 0
    capsys.readouterr()
    assert main(["check", str(SEED), str(sol)]) == 0
    assert capsys.readouterr().out.strip() == "feasible, peak 37"
    sol2 = tmp_path / "s2.json"
    assert main(["solve", str(SCHEDULE), "--solver", "greedy", "-o", str(sol2)]) == 0
    capsys.readouterr()
    assert main(["check", str(SCHEDULE), str(sol2)]) == 0
    assert capsys.readouterr().out.startswith("feasible, sum_liveness ")


def _named(tmp_path: Path, name: str, file: str) -> Path:
    doc = json.loads(SEED.read_text())
    doc["name"] = name
    path = tmp_path / "in" / file
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
    return path


def test_compare_shows_the_paths_it_was_given(tmp_path, capsys):
    first = _named(tmp_path, "first-instance", "a.json")
    second = ROOT / "instances" / "allocation" / "random-8-s1.json"
    out = tmp_path / "out"
    common = ["--solvers", "ffd", "--jobs", "1", "--no-plots", "-o", str(out)]
    assert main(["compare", str(first), *common]) == 0
    capsys.readouterr()
    assert main(["compare", str(second), *common]) == 0
    shown = capsys.readouterr().out
    assert "random-8-s1" in shown and "first-instance" not in shown
    report = (out / "report.md").read_text()
    assert "first-instance" in report and "random-8-s1" in report  # the report keeps both


def test_report_md_escapes_pipes_and_html_in_names(tmp_path, capsys):
    path = _named(tmp_path, "a|b<script>x</script>", "odd.json")
    out = tmp_path / "out"
    args = ["compare", str(path), "--solvers", "ffd", "--jobs", "1", "--no-plots", "-o", str(out)]
    assert main(args) == 0
    md = (out / "report.md").read_text()
    assert "<script>" not in md and r"a\|b&lt;script&gt;x&lt;/script&gt;" in md
    widths = []  # cells per line of each table: the name adds none
    for line in [*md.splitlines(), ""]:
        if line.startswith("|"):
            widths.append(line.replace(r"\|", "").count("|"))
        elif widths:
            assert len(set(widths)) == 1, widths
            widths = []


def test_unicode_names_give_one_warning_not_pages(tmp_path, capsys):
    _named(tmp_path, "数据集合二", "a.json")
    _named(tmp_path, "模型一号测试", "b.json")
    out = tmp_path / "out"
    args = ["compare", str(tmp_path / "in"), "--solvers", "ffd,bfd", "--jobs", "1", "-o", str(out)]
    assert main(args) == 0
    captured = capsys.readouterr()
    assert "Glyph" not in captured.err
    assert captured.err.count("font lacks") <= 1
    assert not fits(captured.out.split("report:")[0])
    assert "数据集合二" in captured.out and "模型一号测试" in captured.out


# --- generate ---------------------------------------------------------------------------------

SMALL = {"bifurcating": 2, "grid": 3, "layered": 3, "recompute": 4}


@pytest.mark.parametrize(
    ("problem", "family"), [(p, f) for p, fams in FAMILIES.items() for f in fams]
)
def test_generate_every_family_then_solve(problem, family, tmp_path, capsys):
    path = tmp_path / f"{problem}-{family}.json"
    size = str(SMALL.get(family, 8))
    argv = ["generate", problem, "--family", family, "--size", size, "--seed", "3"]
    assert main([*argv, "-o", str(path)]) == 0
    assert f"{problem}/{family} " in capsys.readouterr().out
    inst = load_instance(path)
    assert registry.problem_of(inst).name == problem
    again = tmp_path / "again.json"
    assert main([*argv, "-o", str(again)]) == 0
    assert again.read_bytes() == path.read_bytes()  # a pure function of its arguments
    capsys.readouterr()
    solve = ["solve", str(path), "--solver", FAST[problem], "--time-limit", "5"]
    assert main(solve) == 0
    assert capsys.readouterr().out.startswith(f"{FAST[problem]}: ")


def test_generate_defaults_params_and_list(tmp_path, capsys):
    path = tmp_path / "g.json"
    assert main(["generate", "schedule", "-o", str(path)]) == 0  # the default family and size
    assert load_instance(path).name == "adversary-20-s0"
    argv = ["generate", "schedule", "--family", "grid", "--size", "3", "-p", "cols=5"]
    assert main([*argv, "-p", "objective=peak", "-o", str(path)]) == 0
    inst = load_instance(path)
    assert inst.objective == "peak" and len(inst.ops) == 15
    capsys.readouterr()
    assert main(["generate", "--list"]) == 0
    listed = capsys.readouterr().out
    assert not fits(listed)
    for problem, fams in FAMILIES.items():
        assert f"{problem} (" in listed
        for name, fam in fams.items():
            assert f"  {name}: " in listed
            for prm in fam.params():
                assert f"-p {prm}=" in listed
    assert main(["generate", "fusion", "--list"]) == 0
    assert "allocation" not in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--family", "nope"], "allocation has no family 'nope'; known: random"),
        (["-p", "nope=1"], "-p nope: allocation/random has no such parameter"),
        (["-p", "horizon=0"], "-p horizon: must be an integer in [1, 2**40]"),
        (["-p", "horizon"], "expected NAME=VALUE"),
        (["-p", "max_size=4", "-p", "max_size=5"], "given twice"),
        (["--family", "tight", "-p", "holes=2"], "must be a probability in [0, 1]"),
        (["--family", "tight", "--size", "999999999"], "takes 1 to 200000"),
        (["--family", "layered", "-p", "x=1"], "it takes none"),
    ],
)
def test_generate_refusals_are_one_line(argv, needle, tmp_path, capsys):
    out = tmp_path / "g.json"
    assert main(["generate", "allocation", *argv, "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1 and not out.exists()


def test_generated_files_feed_batch_and_compare(tmp_path, capsys):
    d = tmp_path / "gen"
    for problem, family, size in (("allocation", "tight", "40"), ("schedule", "tree", "9")):
        out = d / f"{family}.json"
        assert main(["generate", problem, "--family", family, "--size", size, "-o", str(out)]) == 0
    batch = ["batch", str(d), "--solver", "ffd", "--jobs", "1", "-o", str(tmp_path / "b")]
    assert main(batch) == 0
    compare = ["compare", str(d), "--solvers", "ffd,greedy", "--jobs", "1", "--no-plots"]
    assert main([*compare, "-o", str(tmp_path / "c")]) == 0
    out = capsys.readouterr().out
    assert "tight-40-s0" in out and "tree-9-s0" in out


# --- alignment --------------------------------------------------------------------------------


def test_alignment_on_import_onnx_and_plan(tmp_path, capsys):
    pytest.importorskip("onnx")
    model = ROOT / "instances" / "models" / "resnet50.onnx"
    argv = ["import", "onnx", str(model), "--dim", "batch=1", "--alignment", "256"]
    assert main([*argv, "-o", str(tmp_path / "imp")]) == 0
    alloc = load_instance(tmp_path / "imp" / "resnet50.allocation.json")
    assert alloc.alignment == 256
    out = tmp_path / "plan"
    argv = ["plan", str(SCHEDULE), "--alignment", "64", "--time-limit", "2", "--no-plots"]
    assert main([*argv, "-o", str(out)]) == 0
    assert json.loads((out / "plan.json").read_text())["alignment"] == 64
    planned = load_instance(out / "planned.allocation.json")
    assert planned.alignment == 64
    capsys.readouterr()
    assert (
        main(["check", str(out / "planned.allocation.json"), str(out / "planned.solution.json")])
        == 0
    )
    shutil.rmtree(out)


# --- warm: kernels compiled at set-up, not in a first solve -------------------------------------


def test_warm_runs_every_solver_of_the_problems_it_is_given(capsys, monkeypatch):
    from tensorplan.harness import run

    seen: list[tuple[str, list[str]]] = []
    real = run.warm_up
    monkeypatch.setattr(
        run, "warm_up", lambda p, s, **kw: seen.append((p, list(s))) or real(p, s, **kw)
    )
    assert main(["warm", "--problems", "layout,fusion"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [p for p, _ in seen] == ["layout", "fusion"]
    for (problem, solvers), line in zip(seen, out, strict=True):
        assert solvers == list(registry.solvers(problem))
        assert line.startswith(f"{problem}: {len(solvers)} solvers ready in ")
    assert main(["warm", "--problems", "nope"]) == 2
    assert "unknown problem 'nope'" in capsys.readouterr().err


def test_warm_counts_a_failing_solver_and_calls_the_hooks(capsys, monkeypatch):
    """A solver that raises on its tiny instance makes `warm` exit 1; every solver's `warm` hook
    runs (bb's loads its search kernel, which a tiny solve never reaches: its start is optimal)."""
    from tensorplan.models import allocation_bb
    from tensorplan.problems.core import Solver

    calls: list[str] = []

    def broken(inst, opts):
        raise RuntimeError("boom")

    table = {
        "bb": registry.solver("allocation", "bb"),
        "broken": Solver("broken", "heuristic", broken, "raises", warm=lambda: calls.append("x")),
    }
    monkeypatch.setattr(registry, "solvers", lambda name: table)
    monkeypatch.setattr(registry, "solver", lambda problem, name: table[name])
    assert main(["warm", "--problems", "allocation"]) == 1
    assert "allocation: 2 solvers ready" in capsys.readouterr().out
    assert calls == ["x"]
    assert allocation_bb.K.search.signatures  # bb's hook compiled or loaded the kernel


def test_solve_reports_a_slow_warm_up_as_one_off_set_up(capsys, monkeypatch):
    """A first solve that compiles kernels (here: a warm-up of 0.6 s) says so on stderr and in
    the result's stats (`setup_s`); a cached one (a warm-up of no time) says nothing."""
    import time

    from tensorplan.harness import run

    monkeypatch.setattr(run, "warm_once", lambda p, s, f=None: time.sleep(0.6))
    assert (
        main(["solve", str(ROOT / "instances/allocation/seed-example.json"), "--solver", "ffd"])
        == 0
    )
    err = capsys.readouterr().err
    assert "one-off set-up before the solve" in err and "tensorplan warm" in err
    monkeypatch.setattr(run, "warm_once", lambda p, s, f=None: None)
    inst = load_instance(ROOT / "instances/allocation/seed-example.json")
    assert "setup_s" not in run.solve(inst, "ffd", run.Options(), warm=True).stats
    assert (
        main(["solve", str(ROOT / "instances/allocation/seed-example.json"), "--solver", "ffd"])
        == 0
    )
    assert "set-up" not in capsys.readouterr().err

"""Nothing lost, nothing wrong accepted: batch integrity under kills, torn writes, concurrent and
relocated runs; solution files that cannot collide; one-line CLI errors; consistent exit codes."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from tensorplan.harness import batch, executors
from tensorplan.harness.cli import main
from tensorplan.harness.rows import RowsFile
from tensorplan.problems.allocation import instance_to_json
from tensorplan.problems.allocation_gen import mixed_family, random_family
from tensorplan.problems.core import Options, write_csv_atomic
from tensorplan.problems.schedule import instance_to_json as schedule_json
from tensorplan.problems.schedule_gen import sample as schedule_sample

ROOT = Path(__file__).resolve().parents[1]
ALLOC = ROOT / "instances" / "allocation" / "seed-example.json"
SCHED = ROOT / "instances" / "schedule" / "seed-example.json"
GRID = ROOT / "instances" / "schedule" / "grid-3x3-s2.json"
CLI = [sys.executable, "-m", "tensorplan.harness.cli"]


def rows(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "rows.jsonl").read_text().splitlines()]


def pairs(out: Path) -> list[tuple[str, str]]:
    return sorted((r["key"], r["solver"]) for r in rows(out))


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    d = tmp_path / "in"
    d.mkdir()
    for n in range(3):
        (d / f"r{n}.json").write_text(json.dumps(instance_to_json(random_family(12, n))))
    return d


# --- solution files ------------------------------------------------------------------------------


def test_same_named_instances_of_two_problems_keep_their_own_solution_files(tmp_path):
    """Both shipped sets have a `seed-example`; each solution file checks against its own."""
    out = tmp_path / "out"
    code = main(
        [
            "compare",
            str(ALLOC),
            str(SCHED),
            "--solvers",
            "cpsat",
            "--jobs",
            "1",
            "-o",
            str(out),
            "--no-plots",
        ]
    )
    assert code == 0
    files = sorted((out / "solutions").rglob("*.json"))
    assert len(files) == 2 == len(rows(out))
    for inst, problem in ((ALLOC, "allocation"), (SCHED, "schedule")):
        (mine,) = (out / "solutions" / problem).glob("seed-example.*.cpsat.json")
        assert main(["check", str(inst), str(mine)]) == 0


def test_batch_of_two_same_named_files_writes_two_solutions(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "x.json").write_text(json.dumps(instance_to_json(random_family(8, 1))))
    (b / "x.json").write_text(json.dumps(instance_to_json(random_family(9, 2))))
    out = tmp_path / "out"
    assert main(["batch", str(a), str(b), "--solver", "ffd", "-o", str(out), "--jobs", "1"]) == 0
    written = sorted((out / "allocation").glob("*.json"))
    assert len(written) == 2
    for inst in (a / "x.json", b / "x.json"):  # exactly one of the two files is its solution
        assert sorted(main(["check", str(inst), str(doc)]) for doc in written) == [0, 1]


# --- the rows file -------------------------------------------------------------------------------


def test_torn_last_line_loses_no_row(corpus, tmp_path):
    """A kill mid-write leaves a fragment: the next run repairs the file and re-solves the torn
    task, so every pair ends with exactly one row."""
    out = tmp_path / "out"
    batch.run_batch([corpus], out, solvers=["ffd", "bfd"], options=Options(time_limit=5))
    whole = pairs(out)
    text = (out / "rows.jsonl").read_text().splitlines(keepends=True)
    torn = "".join(text[:-1]) + text[-1][: len(text[-1]) // 2]  # last row cut in half
    (out / "rows.jsonl").write_text(torn)
    frame = batch.run_batch([corpus], out, solvers=["ffd", "bfd"], options=Options(time_limit=5))
    assert pairs(out) == whole and len(frame) == len(whole)
    assert (out / "rows.jsonl").read_text().endswith("\n")


def test_complete_row_without_newline_is_not_glued_to_the_next(corpus, tmp_path):
    out = tmp_path / "out"
    batch.run_batch([corpus], out, solvers=["ffd"], options=Options(time_limit=5))
    path = out / "rows.jsonl"
    path.write_text(path.read_text().rstrip("\n"))
    batch.run_batch([corpus], out, solvers=["ffd", "bfd"], options=Options(time_limit=5))
    assert len(rows(out)) == 6 and len(set(pairs(out))) == 6


def test_a_second_run_into_the_same_directory_is_refused(corpus, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    with RowsFile(out):
        code = main(["compare", str(corpus), "--solvers", "ffd", "-o", str(out), "--no-plots"])
    assert code == 2
    assert "another run is writing here" in capsys.readouterr().err
    assert not (out / "rows.jsonl").exists()


def test_concurrent_processes_duplicate_no_row(corpus, tmp_path):
    out = tmp_path / "out"
    cmd = [*CLI, "compare", str(corpus), "--solvers", "ffd,bfd,cpsat", "--time-limit", "1"]
    cmd += ["--jobs", "1", "-o", str(out), "--no-plots"]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in (1, 2)]
    codes = sorted(p.wait(timeout=120) for p in procs)
    assert codes[0] == 0 and codes[1] in (0, 2)  # the loser is refused (or ran after the winner)
    assert len(rows(out)) == len(set(pairs(out))) == 9


def test_rerun_from_another_directory_and_after_a_move_solves_nothing_again(corpus, tmp_path):
    out = tmp_path / "out"
    batch.run_batch([corpus], out, solvers=["ffd"], options=Options(time_limit=5))
    first = rows(out)
    moved = tmp_path / "moved"
    shutil.copytree(corpus, moved)
    cwd = os.getcwd()
    try:
        os.chdir(tmp_path)
        frame = batch.run_batch(["moved"], out, solvers=["ffd"], options=Options(time_limit=5))
    finally:
        os.chdir(cwd)
    assert rows(out) == first and len(frame) == 3


def test_an_edited_instance_is_solved_again(corpus, tmp_path):
    out = tmp_path / "out"
    batch.run_batch([corpus], out, solvers=["ffd"], options=Options(time_limit=5))
    (corpus / "r0.json").write_text(json.dumps(instance_to_json(random_family(13, 7))))
    frame = batch.run_batch([corpus], out, solvers=["ffd"], options=Options(time_limit=5))
    assert len(rows(out)) == 4  # the old row stays in the log; the table shows the new one
    assert len(frame) == 3 and 13 in set(frame["size"])
    assert "random-12-s0" not in set(frame["instance"])  # r0's old version


# --- issue 34: a row answers one question, asked with given options; a table shows the current


def _compare(paths, out, *extra: str) -> int:
    argv = ["compare", *map(str, paths), "--jobs", "1", "-o", str(out), "--no-plots", *extra]
    return main(argv)


@pytest.mark.parametrize("order", [((), ("--capacity", "20")), (("--capacity", "20"), ())])
def test_rows_are_keyed_by_the_capacity_asked_either_order(order, tmp_path):
    """`--capacity 20` asks whether the buffers fit in 20 bytes (they do not): never answered
    by the rows of the plain question (37, proven optimal), nor the other way round."""
    out = tmp_path / "out"
    for extra in order:
        assert _compare([ALLOC], out, "--solvers", "cpsat,ffd", *extra) in (0, 1)
    frame = pd.read_csv(out / "results.csv")
    assert len(rows(out)) == 4 and len(frame) == 2  # both questions solved; the last one shown
    cpsat = frame.set_index("solver").loc["cpsat"]
    if order[-1]:
        assert cpsat["status"] == "infeasible" and cpsat["capacity"] == 20
        assert "37*" not in (out / "report.md").read_text()
        assert "seed-example (capacity 20)" in (out / "report.md").read_text()
    else:
        assert cpsat["status"] == "optimal" and cpsat["objective"] == 37
        assert pd.isna(cpsat["capacity"])
    assert _compare([ALLOC], out, "--solvers", "cpsat,ffd", *order[-1]) in (0, 1)
    assert len(rows(out)) == 4  # the same question again: nothing solved


def test_rows_are_keyed_by_the_options_that_change_the_answer(tmp_path):
    """A seed changes cpsat's answer, not ffd's (it takes none); going back to an earlier
    question solves nothing and shows its rows again."""
    out = tmp_path / "out"
    solvers = ("--solvers", "cpsat,ffd")

    def shown() -> dict[str, str]:
        frame = pd.read_csv(out / "results.csv")
        return dict(zip(frame["solver"], frame["options"], strict=True))

    assert _compare([ALLOC], out, *solvers) == 0
    assert shown() == {"cpsat": "gap=0.0 seed=0 threads=1 time_limit=10.0",
                       "ffd": "time_limit=10.0"}  # fmt: skip
    assert _compare([ALLOC], out, *solvers, "--seed", "3") == 0
    assert [r["solver"] for r in rows(out)][2:] == ["cpsat"]  # ffd's answer is reused
    assert shown()["cpsat"] == "gap=0.0 seed=3 threads=1 time_limit=10.0"
    for extra in (("--threads", "2"), ("--gap", "0.5"), ("--time-limit", "9")):
        assert _compare([ALLOC], out, *solvers, *extra) == 0
    assert len(rows(out)) == 2 + 1 + 1 + 1 + 2  # a time limit changes every solver's answer
    solved = len(rows(out))
    assert _compare([ALLOC], out, *solvers, "--seed", "3") == 0  # asked before: not solved
    assert [r["status"] for r in rows(out)[solved:]] == ["optimal", "optimal"]  # shown again
    assert shown()["cpsat"] == "gap=0.0 seed=3 threads=1 time_limit=10.0"
    assert shown()["ffd"] == "time_limit=10.0"
    assert len(list((out / "solutions" / "allocation").glob("*.cpsat.json"))) == 5


def test_a_report_shows_each_files_current_version(tmp_path):
    """An edited file is solved again and shown in its new version only; a renamed copy of a
    file is the same question (solved once, shown once); an edit undone is shown again."""
    src = tmp_path / "in"
    src.mkdir()
    for n in range(3):
        (src / f"r{n}.json").write_text(json.dumps(instance_to_json(random_family(12, n))))
    out = tmp_path / "out"
    solvers = ("--solvers", "ffd,bfd")
    assert _compare([src], out, *solvers) == 0
    original = (src / "r0.json").read_text()
    (src / "r0.json").write_text(json.dumps(instance_to_json(random_family(13, 7))))
    shutil.copy(src / "r1.json", src / "r1-copy.json")
    assert _compare([src], out, *solvers) == 0
    assert len(rows(out)) == 8  # r0's new version solved; the copy is r1's question
    frame = pd.read_csv(out / "results.csv")
    assert sorted(set(frame["instance"])) == ["random-12-s1", "random-12-s2", "random-13-s7"]
    assert len(frame) == 6
    md = (out / "report.md").read_text()
    assert "random-12-s0" not in md and "| random-13-s7 |" in md
    assert "| ffd | heuristic | 3 |" in md  # per solver: 3 instances
    (src / "r0.json").write_text(original)
    assert _compare([src], out, *solvers) == 0
    # nothing solved: one of r0's first rows is written again, and with it r0's first version
    # is the current one (both its rows shown)
    assert len(rows(out)) == 9
    frame = pd.read_csv(out / "results.csv")
    assert sorted(set(frame["instance"])) == ["random-12-s0", "random-12-s1", "random-12-s2"]


def test_instance_names_of_any_length_are_solved_and_rerun(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    long = instance_to_json(random_family(8, 1)) | {"name": "n" * 300}
    (src / "a-long.json").write_text(json.dumps(long))
    (src / "b.json").write_text(json.dumps(instance_to_json(random_family(9, 2))))
    out = tmp_path / "out"
    for _ in range(2):
        assert _compare([src], out, "--solvers", "ffd,cpsat") == 0
        assert main(["batch", str(src), "--solver", "ffd", "-o", str(tmp_path / "b")]) == 0
    assert len(rows(out)) == 4
    (sol,) = (out / "solutions" / "allocation").glob("nnn*.cpsat.json")
    assert len(sol.name) < 120
    assert main(["check", str(src / "a-long.json"), str(sol)]) == 0


def test_kill_9_mid_batch_then_resume_loses_and_duplicates_nothing(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    for n in range(4):
        (src / f"m{n}.json").write_text(json.dumps(instance_to_json(mixed_family(120, n))))
    out = tmp_path / "out"
    cmd = [*CLI, "compare", str(src), "--solvers", "ffd,cpsat", "--time-limit", "1"]
    cmd += ["--jobs", "1", "-o", str(out), "--no-plots"]
    proc = subprocess.Popen(cmd, start_new_session=True, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if (out / "rows.jsonl").exists() and (out / "rows.jsonl").read_text().count("\n") >= 2:
            break
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert lock_released(out / ".lock", within=10.0), "a killed run keeps the directory locked"
    assert main(["compare", str(src), "--solvers", "ffd,cpsat", "--time-limit", "1",
                 "--jobs", "1", "-o", str(out), "--no-plots"]) == 0  # fmt: skip
    assert len(rows(out)) == len(set(pairs(out))) == 8


def test_ctrl_c_stops_workers_and_their_solver_processes_and_removes_temp_files(tmp_path):
    """SIGINT to the parent while CBC runs: exit 130, no CBC left running, no temp files."""
    src = tmp_path / "in"
    src.mkdir()
    # a schedule whose time-indexed MIP CBC cannot close in a minute (no warm start settles it)
    (src / "big.json").write_text(json.dumps(schedule_json(schedule_sample(26, 2))))
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    out = tmp_path / "out"
    cmd = [*CLI, "compare", str(src), "--solvers", "mip-cbc", "--time-limit", "60"]
    cmd += ["--jobs", "1", "-o", str(out), "--no-plots"]
    env = {**os.environ, "TMPDIR": str(tmp)}
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True)

    def cbc_running() -> list[str]:
        ps = subprocess.run(["ps", "-ww", "-eo", "pid,args"], capture_output=True, text=True).stdout
        return [line for line in ps.splitlines() if str(tmp) in line and "cbc" in line.lower()]

    # the batch first compiles its kernels in a warm-up child (up to WARM_UP_S + 6 s per solver
    # on a cold cache, e.g. a fresh clone), then the worker builds the model and starts CBC.
    # The warm-up's own CBC, on a tiny instance, lives for milliseconds: only a CBC seen running
    # for a whole second is the worker's
    deadline = time.monotonic() + executors.WARM_UP_S + 6.0 + 60
    since = None
    while time.monotonic() < deadline and proc.poll() is None:
        if not cbc_running():
            since = None
        elif since is None:
            since = time.monotonic()
        elif time.monotonic() - since >= 1.0:
            break
        time.sleep(0.1)
    assert cbc_running(), f"CBC never started (exit {proc.poll()})"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and "interrupted" in err
    time.sleep(0.5)
    assert not cbc_running()
    assert not list(tmp.rglob("*")), "temporary files left behind"


def test_a_run_that_fails_at_start_leaves_nothing_behind(corpus, tmp_path):
    dask = ["--executor", "dask", "--scheduler", "tcp://127.0.0.1:9"]  # nobody listens there
    out = tmp_path / "new" / "out"
    assert main(["compare", str(corpus), "--solvers", "ffd", "-o", str(out), *dask]) == 2
    assert not (tmp_path / "new").exists()  # the directories it made are gone again
    old = tmp_path / "old"
    batch.run_batch([corpus], old, solvers=["ffd"], options=Options(time_limit=5))
    before = (old / "rows.jsonl").read_text()
    assert main(["compare", str(corpus), "--solvers", "bfd", "-o", str(old), *dask]) == 2
    assert (old / "rows.jsonl").read_text() == before
    assert not (old / ".lock").exists()


def _cbc_running(tmp: Path) -> list[str]:
    ps = subprocess.run(["ps", "-ww", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [line for line in ps.splitlines() if str(tmp) in line and "cbc" in line.lower()]


def test_kill_9_ends_the_runs_cbc_and_the_next_run_sweeps_its_files(tmp_path):
    """A kill -9 of a run while CBC runs: its worker takes CBC down with it; the model files
    it leaves in the temporary folder are removed by the next run."""
    src = tmp_path / "in"
    src.mkdir()
    (src / "big.json").write_text(json.dumps(schedule_json(schedule_sample(26, 2))))
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    out = tmp_path / "out"
    cmd = [*CLI, "compare", str(src), "--solvers", "mip-cbc", "--time-limit", "60"]
    cmd += ["--jobs", "1", "-o", str(out), "--no-plots"]
    env = {**os.environ, "TMPDIR": str(tmp)}
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + executors.WARM_UP_S + 6.0 + 60
    since = None
    while time.monotonic() < deadline and proc.poll() is None:  # the worker's CBC, for 1 s
        if not _cbc_running(tmp):
            since = None
        elif since is None:
            since = time.monotonic()
        elif time.monotonic() - since >= 1.0:
            break
        time.sleep(0.1)
    assert _cbc_running(tmp), f"CBC never started (exit {proc.poll()})"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    gone = time.monotonic() + 10
    while _cbc_running(tmp) and time.monotonic() < gone:
        time.sleep(0.1)
    assert not _cbc_running(tmp), "CBC outlived its run"
    assert list(tmp.glob("tensorplan-task-*/**/*.mps")), "the kill left no model file to sweep"
    done = subprocess.run(
        [*CLI, "compare", str(ALLOC), "--solvers", "ffd", "-o", str(tmp_path / "o2"), "--no-plots"],
        env=env,
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 0
    assert not list(tmp.iterdir()), "the dead run's files were not swept"


def test_the_sweep_takes_only_directories_of_dead_runs(tmp_path):
    """Dead: marked by a run that no longer exists (a process that runs from it is killed).
    Kept: a live run's, an unmarked one, another prefix."""
    me = executors._proc_stat(os.getpid())
    assert me is not None
    names = ("tensorplan-task-dead", "tensorplan-task-live", "tensorplan-task-x", "keep-me")
    dead, live, unmarked, other = (tmp_path / n for n in names)
    for d in (dead, live, unmarked, other):
        d.mkdir()
        (d / "model.mps").write_bytes(b"x" * 1000)
    (dead / ".owner").write_text(f"{os.getpid()} {me[2] + 1}\n")  # this pid, another start
    (live / ".owner").write_text(f"{os.getpid()} {me[2]}\n")
    (other / ".owner").write_text(f"{os.getpid()} {me[2] + 1}\n")
    orphan = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", str(dead / "model.mps")]
    )
    assert executors.sweep_stale_task_dirs(str(tmp_path)) == 1
    assert orphan.wait(timeout=10) == -signal.SIGKILL
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["tensorplan-task-live", "tensorplan-task-x", "keep-me"]
    )


def lock_released(path: Path, within: float) -> bool:
    """Whether the directory lock can be taken (and is then let go) within `within` seconds."""
    deadline = time.monotonic() + within
    with path.open("a") as f:
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.05)
                continue
            fcntl.flock(f, fcntl.LOCK_UN)
            return True


# --- CLI errors: one line, exit 2, nothing half-written ------------------------------------------


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["solve", str(ALLOC), "--solver", "ffd", "-o", "/proc/x.json"], "cannot write"),
        (["solve", str(ALLOC), "--solver", "ffd", "-o", str(ROOT / "instances")], "directory"),
        (["solve", str(ALLOC), "--solver", "ffd", "-o", ""], "empty path"),
        (["compare", str(ALLOC), "--solvers", "ffd", "-o", str(ROOT / "README.md")], "a file"),
        (["compare", str(ALLOC), "--solvers", "shift", "-o", "{tmp}"], "nothing to solve"),
        (["compare", "{tmp}/nowhere.json", "-o", "{tmp}/o"], "no such file"),
        (["report", "{tmp}/missing"], "not a batch directory"),
        (["solve", str(ALLOC), "--solver", "cpsat", "--capacity", "5"], None),  # infeasible: 0
        (
            [
                "compare",
                str(ALLOC),
                "--solvers",
                "ffd",
                "-o",
                "{tmp}/d",
                "--executor",
                "dask",
                "--scheduler",
                "tcp://127.0.0.1:9",
            ],
            "cannot reach the Dask scheduler",
        ),
    ],
)
def test_cli_errors_are_one_line(argv, needle, tmp_path, capsys):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    code = main(argv)
    err = capsys.readouterr().err.strip()
    if needle is None:
        assert code == 0
        return
    assert code == 2, err
    assert needle in err and len(err.splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize("value", ["nan", "-1", "0", "inf"])
def test_bad_time_limits_are_refused(value, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["solve", str(ALLOC), "--time-limit", value])
    assert exit_info.value.code == 2
    assert "positive number of seconds" in capsys.readouterr().err


def test_solvers_into_a_closed_pipe_is_quiet():
    done = subprocess.run(
        f"{sys.executable} -m tensorplan.harness.cli solvers | head -1",
        shell=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and done.stdout.startswith("allocation") and not done.stderr


def test_outputs_are_readable_by_others(tmp_path):
    old = os.umask(0o022)
    try:
        target = tmp_path / "s.json"
        assert main(["solve", str(ALLOC), "--solver", "ffd", "-o", str(target)]) == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE(target.stat().st_mode) == 0o644


def test_csv_tables_are_replaced_whole(tmp_path, monkeypatch):
    """A benchmark table is written beside its path and renamed: a failed write leaves the old
    table and no temporary file."""
    target = tmp_path / "t.csv"
    write_csv_atomic(target, [{"a": 1, "b": 2}, {"a": 3, "b": 4, "c": 5}])
    assert target.read_text().splitlines() == ["a,b", "1,2", "3,4"]
    write_csv_atomic(target, [{"a": 1, "b": 2}], ["b"])
    assert target.read_text().splitlines() == ["b", "2"]

    def broken(*_: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken)
    with pytest.raises(OSError, match="disk full"):
        write_csv_atomic(target, [{"x": 9}])
    assert target.read_text().splitlines() == ["b", "2"]
    assert [p.name for p in tmp_path.iterdir()] == ["t.csv"]


# --- issue 34: an output replaces only a regular file (or is written through a symlink), and is
# checked before the work --------------------------------------------------------------------


def _special(path: Path, kind: str) -> None:
    """Make a FIFO, a character device (/dev/null's numbers) or a socket at `path`."""
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        if os.geteuid() != 0:
            pytest.skip("making a device node needs root")
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    else:
        import socket

        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
        sock.close()


@pytest.mark.parametrize("kind", ["fifo", "device", "socket"])
def test_outputs_never_replace_a_device_fifo_or_socket_and_fail_before_the_work(
    kind, tmp_path, monkeypatch, capsys
):
    from tensorplan.harness import cli
    from tensorplan.harness import plan as plan_module

    def never(*_: object, **__: object) -> None:
        raise AssertionError("the work started although its output cannot be written")

    monkeypatch.setattr(cli, "solve", never)
    monkeypatch.setattr(batch, "_solve_into", never)
    monkeypatch.setattr(plan_module, "make_plan", never)
    target = tmp_path / "target"
    _special(target, kind)
    mode = target.lstat().st_mode
    d = tmp_path / "d"
    d.mkdir()
    for name in ("results.csv", "report.md"):
        _special(d / name, kind)
    csv = tmp_path / "x.csv"
    csv.write_text("id,lower,upper,size\n0,0,2,4\n")
    runs = [
        ["solve", str(ALLOC), "--solver", "ffd", "-o", str(target)],
        ["compare", str(ALLOC), "--solvers", "ffd", "-o", str(d), "--no-plots"],
        ["batch", str(ALLOC), "--solver", "ffd", "-o", str(d)],
        ["plan", str(SCHED), "-o", str(d), "--no-plots"],
        ["import", "minimalloc", str(csv), "-o", str(target)],
    ]
    for argv in runs:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert "replaces only a regular file" in err and ".tmp" not in err, err
    for path in (target, d / "results.csv", d / "report.md"):
        assert path.lstat().st_mode == mode  # still what it was
    assert sorted(p.name for p in d.iterdir()) == ["report.md", "results.csv"]  # nothing else
    with pytest.raises(OSError, match="replaces only a regular file"):
        write_csv_atomic(target, [{"a": 1}])


def test_outputs_are_written_through_a_symlink_and_a_failed_output_names_itself(
    tmp_path, monkeypatch, capsys
):
    real = tmp_path / "elsewhere" / "real.json"
    real.parent.mkdir()
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    assert main(["solve", str(ALLOC), "--solver", "ffd", "-o", str(link)]) == 0
    assert link.is_symlink() and json.loads(real.read_text())["objective"] == 37
    dangling = tmp_path / "dangling.json"
    dangling.symlink_to(tmp_path / "made" / "new.json")
    assert main(["solve", str(ALLOC), "--solver", "ffd", "-o", str(dangling)]) == 0
    assert dangling.is_symlink() and (tmp_path / "made" / "new.json").is_file()
    assert not list(tmp_path.rglob("*.tmp"))
    from tensorplan.harness import cli

    def never(*_: object, **__: object) -> None:
        raise AssertionError("solved although -o cannot be written")

    monkeypatch.setattr(cli, "solve", never)
    capsys.readouterr()
    assert main(["solve", str(ALLOC), "--solver", "ffd", "-o", "/proc/x.json"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: /proc/x.json: cannot write") and ".tmp" not in err


@pytest.mark.parametrize(
    "doc, says",
    [
        ({"problem": "schedule", "ops": [], "allocs": []}, "ops: the model has no op"),
        ({"problem": "schedule", "ops": [{"id": "a"}], "allocs": []}, "no tensor to place"),
    ],
)
def test_plan_of_an_empty_model_is_a_clear_error_and_writes_nothing(doc, says, tmp_path, capsys):
    model = tmp_path / "empty.json"
    model.write_text(json.dumps(doc))
    out = tmp_path / "plan"
    assert main(["plan", str(model), "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {model}: ") and says in err and err.endswith("nothing to plan")
    assert "Traceback" not in err and not out.exists()


# --- check: 1 = infeasible for the instance, 2 = unreadable or malformed ------------------------


def _solution(tmp_path: Path, instance: Path, mutate) -> Path:
    out = tmp_path / "sol.json"
    assert main(["solve", str(instance), "--solver", "cpsat", "-o", str(out)]) == 0
    doc = json.loads(out.read_text())
    mutate(doc["solution"])
    out.write_text(json.dumps(doc))
    return out


@pytest.mark.parametrize(
    "instance, mutate, code",
    [
        (ALLOC, lambda s: s["offsets"].pop(next(iter(s["offsets"]))), 1),  # missing buffer
        (ALLOC, lambda s: s["offsets"].update({"zz": 0}), 1),  # unknown buffer
        (SCHED, lambda s: s["order"].pop(), 1),  # missing op
        (GRID, lambda s: s["order"].reverse(), 1),  # broken precedence
        (ALLOC, lambda s: s.update({"offsets": [1, 2]}), 2),  # malformed
        (SCHED, lambda s: s.update({"order": "abc"}), 2),  # malformed
    ],
)
def test_check_exit_codes_are_consistent(instance, mutate, code, tmp_path):
    assert main(["check", str(instance), str(_solution(tmp_path, instance, mutate))]) == code


def test_check_of_layout_and_fusion_mismatches_is_infeasible(tmp_path):
    layout = ROOT / "instances" / "layout" / "exercise.json"
    sol = _solution(tmp_path, layout, lambda s: s["sinks"].popitem())
    assert main(["check", str(layout), str(sol)]) == 1
    fusion = ROOT / "instances" / "fusion" / "normalizeInc.json"
    sol = _solution(tmp_path, fusion, lambda s: s["clusters"].append(["no-such-binding"]))
    assert main(["check", str(fusion), str(sol)]) == 1

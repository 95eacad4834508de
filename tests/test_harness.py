"""Batch runner, reports, batch verbs: resume, bad files, crashes, time-outs, parallel, Dask."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from tensorplan.harness import batch, executors, registry
from tensorplan.harness.api import allocation
from tensorplan.harness.cli import main
from tensorplan.harness.report import write_report
from tensorplan.problems.allocation import instance_to_json
from tensorplan.problems.allocation_gen import mixed_family, random_family
from tensorplan.problems.core import Options, Result, Solver, Status

ROOT = Path(__file__).resolve().parents[1]
SEED = ROOT / "instances" / "allocation" / "seed-example.json"
FAST = ["ffd", "bfd", "cpsat"]


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    d = tmp_path / "in"
    d.mkdir()
    shutil.copy(SEED, d / "seed.json")
    (d / "r.json").write_text(json.dumps(instance_to_json(random_family(10, 3))))
    (d / "bad.json").write_text('{"problem": "allocation", "buffers": [{"id": 1}]}')
    return d


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in (path / "rows.jsonl").read_text().splitlines()]


def test_compare_writes_tables_records_bad_file_and_exits_1(corpus, tmp_path, capsys):
    out = tmp_path / "out"
    code = main(
        [
            "compare",
            str(corpus),
            "--solvers",
            ",".join(FAST),
            "--time-limit",
            "5",
            "--jobs",
            "1",
            "-o",
            str(out),
        ]
    )
    assert code == 1  # the bad file counts as a failure
    frame = pd.read_csv(out / "results.csv")
    assert len(frame) == 2 * len(FAST) + 1
    bad = frame[frame["instance"] == "bad"].iloc[0]
    assert bad["status"] == "error" and "buffers[0].size: missing required field" in bad["message"]
    good = frame[frame["instance"] == "seed-example"]
    assert set(good["objective"]) == {37} and set(good["status"]) == {"optimal"}
    assert list(frame.columns[:15]) == [
        "instance",
        "problem",
        "solver",
        "kind",
        "status",
        "objective",
        "bound",
        "best_bound",
        "gap",
        "runtime_s",
        "wall_s",
        "size",
        "message",
        "file",
        "key",
    ]
    md = (out / "report.md").read_text()
    assert "## allocation (minimise)" in md and "| seed-example |" in md and "bad" in md
    page = (out / "report.html").read_text()
    assert page.count("data:image/png;base64,") >= 2 and "<table" in page
    assert len(list((out / "solutions" / "allocation").glob("seed-example.*.cpsat.json"))) == 1


def test_rerun_resumes_and_force_resolves(corpus, tmp_path):
    out = tmp_path / "out"
    args = ["compare", str(corpus), "--solvers", "ffd", "--jobs", "1", "-o", str(out), "--no-plots"]
    main(args)
    first = lines(out)
    main(args)
    assert lines(out) == first  # nothing re-run
    main([*args, "--force"])
    again = lines(out)
    assert len(again) == len(first)
    assert {(r["file"], r["solver"]) for r in again} == {(r["file"], r["solver"]) for r in first}


def test_rows_name_files_relative_to_the_working_directory(corpus, tmp_path, monkeypatch):
    """Rows (and so a committed report) carry no machine paths; resume still matches them."""
    monkeypatch.chdir(tmp_path)
    args = ["compare", "in", "--solvers", "ffd", "--jobs", "1", "-o", "out", "--no-plots"]
    main(args)
    files = {r["file"] for r in lines(tmp_path / "out")}
    assert files == {"in/bad.json", "in/r.json", "in/seed.json"}
    first = lines(tmp_path / "out")
    main(["compare", str(corpus), *args[2:]])  # the same files named absolutely: nothing re-run
    assert lines(tmp_path / "out") == first


def test_interrupt_keeps_finished_rows_and_resume_completes(corpus, tmp_path):
    out = tmp_path / "out"
    seen = []

    def stop_after_first(row, progress):
        seen.append(row)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        batch.run_batch(
            [corpus],
            out,
            solvers=["ffd", "bfd"],
            options=Options(time_limit=5),
            jobs=2,
            on_row=stop_after_first,
        )
    kept = lines(out)
    assert len(kept) == 1 == len(seen)
    frame = batch.run_batch(
        [corpus], out, solvers=["ffd", "bfd"], options=Options(time_limit=5), jobs=2
    )
    assert len(frame) == 5 and len(lines(out)) == 5


def test_parallel_equals_sequential(corpus, tmp_path):
    kw = {"solvers": ["ffd", "multistart", "cpsat"], "options": Options(time_limit=5)}
    seq = batch.run_batch([corpus], tmp_path / "a", jobs=1, **kw)
    par = batch.run_batch([corpus], tmp_path / "b", jobs=2, **kw)
    cols = ["instance", "solver", "status", "objective"]
    assert seq[cols].equals(par[cols])


@pytest.mark.parametrize("executor", ["process", "inline"])
def test_running_tasks_send_their_progress_before_their_row(corpus, tmp_path, executor):
    """Each task's news comes with its task, ends with the harness's final report, and that
    report is what its row records (forked workers send it up their pipe)."""
    heard: dict[tuple[str, str, str], list] = {}
    order: list[str] = []

    def news(task, p) -> None:
        heard.setdefault(task.pair, []).append(p)
        order.append("news")

    def on_row(row, progress) -> None:
        order.append("row")
        if row.status != "error":  # the bad file never ran
            assert heard[row.pair][-1].final

    frame = batch.run_batch(
        [corpus],
        tmp_path / "out",
        solvers=["cpsat", "ffd"],
        options=Options(time_limit=5),
        jobs=2,
        executor=executor,
        on_row=on_row,
        on_news=news,
    )
    assert "news" in order
    ran = frame[frame["status"] != "error"]
    assert len(heard) == len(ran) == 4
    for reports in heard.values():
        assert [p.final for p in reports].count(True) == 1
    finals = {(p.solver, p.objective) for reports in heard.values() for p in reports if p.final}
    assert finals == set(zip(ran["solver"], ran["objective"], strict=True))


def test_solver_crash_and_time_out_become_rows(tmp_path, monkeypatch):
    def boom(inst, opts):
        raise ZeroDivisionError("kaboom")

    table = dict(registry.solvers("allocation"))
    table["boom"] = Solver("boom", "heuristic", boom, "always crashes")
    monkeypatch.setattr(registry, "solvers", lambda name: table)
    d = tmp_path / "in"
    d.mkdir()
    (d / "big.json").write_text(json.dumps(instance_to_json(mixed_family(150, 5))))
    frame = batch.run_batch(
        [d], tmp_path / "out", solvers=["boom", "cpsat"], options=Options(time_limit=0.3), jobs=1
    )
    crash = frame[frame["solver"] == "boom"].iloc[0]
    assert crash["status"] == "error" and "ZeroDivisionError: kaboom" in crash["message"]
    timed = frame[frame["solver"] == "cpsat"].iloc[0]
    assert timed["status"] in ("feasible", "optimal") and timed["bound"] <= timed["objective"]


def test_hung_solver_is_killed_and_dead_worker_is_recorded(tmp_path, monkeypatch):
    import os
    import time

    def sleepy(inst, opts):
        time.sleep(60)

    def dies(inst, opts):
        os._exit(3)

    table = dict(registry.solvers("allocation"))
    table["sleepy"] = Solver("sleepy", "heuristic", sleepy, "never returns in time")
    table["dies"] = Solver("dies", "heuristic", dies, "kills its process")
    monkeypatch.setattr(registry, "solvers", lambda name: table)
    monkeypatch.setattr(executors, "hard_deadline", lambda task: 1.0)
    frame = batch.run_batch(
        [SEED],
        tmp_path / "out",
        solvers=["sleepy", "dies", "ffd"],
        options=Options(time_limit=0.1),
        jobs=2,
    )
    by = frame.set_index("solver")
    assert by.loc["sleepy", "status"] == "error" and "killed after" in by.loc["sleepy", "message"]
    assert by.loc["dies", "status"] == "error" and "exit code 3" in by.loc["dies", "message"]
    assert by.loc["ffd", "objective"] == 37


def test_verify_rejects_a_misreported_objective():
    from tensorplan.harness.run import verify
    from tensorplan.problems.allocation import PROBLEM

    inst = allocation.load(SEED)
    good = allocation.solve(inst, "ffd")
    lie = Result("x", Status.FEASIBLE, 30, None, 0.0, good.solution)
    assert verify(PROBLEM, inst, lie).status is Status.ERROR
    too_strong = Result("x", Status.FEASIBLE, 37, 40, 0.0, good.solution)
    assert "not a valid bound" in verify(PROBLEM, inst, too_strong).message


def test_batch_verb_writes_one_solution_per_instance(corpus, tmp_path):
    out = tmp_path / "sol"
    assert main(["batch", str(corpus), "--solver", "ffd", "--jobs", "2", "-o", str(out)]) == 1
    docs = {p.name.split(".")[0]: p for p in (out / "allocation").glob("*.json")}
    assert set(docs) == {"seed-example", "random-10-s3"}
    assert json.loads(docs["seed-example"].read_text())["objective"] == 37
    assert main(["check", str(SEED), str(docs["seed-example"])]) == 0


def test_report_rebuilds_from_rows(corpus, tmp_path):
    out = tmp_path / "out"
    batch.run_batch([corpus], out, solvers=["ffd"], options=Options(time_limit=5), jobs=1)
    md, page = write_report(out)
    assert "ffd" in md.read_text() and page.exists()
    assert main(["report", str(out), "--no-plots"]) == 0


def test_dask_executor_on_a_local_cluster(corpus, tmp_path):
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        frame = batch.run_batch(
            [corpus],
            tmp_path / "d",
            solvers=["ffd", "cpsat"],
            options=Options(time_limit=5),
            executor="dask",
            scheduler=cluster.scheduler_address,
        )
    local = batch.run_batch(
        [corpus], tmp_path / "l", solvers=["ffd", "cpsat"], options=Options(time_limit=5)
    )
    cols = ["instance", "solver", "status", "objective"]
    assert frame[cols].equals(local[cols])


def test_api_compare_and_plot():
    inst = allocation.load(SEED)
    table = allocation.compare(inst, ["ffd", "ff-start", "cpsat"], time_limit=5)
    assert table.set_index("solver").loc["ff-start", "gap"] == pytest.approx(4 / 37)
    fig = allocation.plot(inst, allocation.solutions(inst, ["ffd", "ff-start"]))
    assert len(fig.axes) == 2
    assert {"ffd", "cpsat"} <= set(allocation.solvers()["solver"])


def test_cli_rejects_unknown_solver(capsys):
    assert main(["solve", str(SEED), "--solver", "nope"]) == 2
    assert "has no solver 'nope'" in capsys.readouterr().err


def test_solve_warms_the_chosen_solver_once_per_process_when_asked(monkeypatch):
    # the API and the CLI's solve ask for it (compilation stays out of the time limit); a plain
    # run.solve (what batch workers call, after the batch's own warm-up) does not
    from tensorplan.harness import run

    calls: list[tuple[str, tuple[str, ...], bool]] = []
    monkeypatch.setattr(
        run,
        "warm_up",
        lambda p, names, hooks=False, features=None: calls.append((p, tuple(names), hooks)),
    )
    run.warm_once.cache_clear()
    inst = random_family(6, 1)
    run.solve(inst, "ffd")
    assert calls == []
    allocation.solve(inst, "ffd")
    allocation.solve(inst, "ffd")
    assert main(["solve", str(SEED), "--solver", "bfd"]) == 0
    # hooks included: the kernels a tiny solve does not reach are built before the first solve
    assert calls == [("allocation", ("ffd",), True), ("allocation", ("bfd",), True)]
    run.warm_once.cache_clear()


# --- issue 34: reports of damaged rows, the Python API on solution files ------------------------


def test_report_of_a_garbage_rows_file_names_the_file_and_the_bad_lines(
    corpus, tmp_path, capsys, caplog
):
    out = tmp_path / "out"
    out.mkdir()
    (out / "rows.jsonl").write_text('garbage\n\x00\x01\n[1, 2]\n{"key": 5}\n')
    assert main(["report", str(out), "--no-plots"]) == 2
    err = capsys.readouterr().err
    assert "rows.jsonl" in err and "line(s) 1-4 of 4 are not rows" in err
    assert not (out / "report.md").exists()
    batch.run_batch([corpus], tmp_path / "ok", solvers=["ffd"], options=Options(time_limit=5))
    with (tmp_path / "ok" / "rows.jsonl").open("a") as f:
        f.write("not a row\n")
    assert main(["report", str(tmp_path / "ok"), "--no-plots"]) == 0
    (warning,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert "ok/rows.jsonl: line(s) 4 of 4 are not rows" in warning
    assert "left out of the report" in warning


def test_api_reads_solution_files_and_takes_a_capacity(tmp_path):
    inst = allocation.load(SEED)
    path = tmp_path / "sol.json"
    assert main(["solve", str(SEED), "--solver", "ffd", "-o", str(path)]) == 0
    doc = json.loads(path.read_text())
    parsed = allocation.load_solution(path, inst)
    for shape in (doc, doc["solution"], path, str(path), parsed):  # the documented shapes
        assert allocation.check(inst, shape) == ([], 37)
    assert len(allocation.plot(inst, {"a": doc, "b": doc["solution"]}).axes) == 2
    assert len(allocation.plot(inst, path).axes) == 1
    assert allocation.solve(inst, "cpsat", capacity=20).status is Status.INFEASIBLE
    assert allocation.solve(inst, "cpsat", capacity=37).status is Status.OPTIMAL
    assert allocation.solve(inst, "cpsat", hint=doc).objective == 37
    table = allocation.compare(inst, ["ffd", "cpsat"], time_limit=5, capacity=20)
    assert table.set_index("solver").loc["cpsat", "status"] == "infeasible"
    other = allocation.load(allocation.shipped("layered-40-s3"))
    violations, objective = allocation.check(other, doc)
    assert objective is None and "another instance" in violations[0]


def test_dask_task_past_its_deadline_is_killed_on_the_worker(tmp_path, monkeypatch):
    """A hung solver on a Dask worker (threads in this process, so the test's solver table is
    the worker's) ends as an `error` row at its hard deadline, as with the process executor."""
    distributed = pytest.importorskip("distributed")
    import time

    def sleepy(inst, opts):
        time.sleep(60)

    table = dict(registry.solvers("allocation"))
    table["sleepy"] = Solver("sleepy", "heuristic", sleepy, "never returns in time")
    monkeypatch.setattr(registry, "solvers", lambda name: table)
    monkeypatch.setattr(executors, "hard_deadline", lambda task: 1.0)
    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None
    ) as cluster:
        began = time.monotonic()
        frame = batch.run_batch(
            [SEED],
            tmp_path / "out",
            solvers=["sleepy", "ffd"],
            options=Options(time_limit=0.1),
            executor="dask",
            scheduler=cluster.scheduler_address,
        )
        assert time.monotonic() - began < 30
    by = frame.set_index("solver")
    assert by.loc["sleepy", "status"] == "error" and "killed after" in by.loc["sleepy", "message"]
    assert by.loc["ffd", "objective"] == 37


def test_dask_run_whose_only_worker_dies_ends_with_error_rows(tmp_path, monkeypatch):
    """The only worker is killed while it runs a long solve: the run does not wait for a worker
    forever; the task ends as an `error` row once the cluster has had none for `NO_WORKER_S`,
    and the dead worker's solve does not outlive it."""
    distributed = pytest.importorskip("distributed")
    import os
    import signal
    import subprocess
    import sys
    import threading
    import time

    from tensorplan.problems.schedule import instance_to_json as schedule_json
    from tensorplan.problems.schedule_gen import sample

    src = tmp_path / "in"
    src.mkdir()
    (src / "big.json").write_text(json.dumps(schedule_json(sample(26, 2))))
    monkeypatch.setattr(executors, "NO_WORKER_S", 3.0)
    with distributed.LocalCluster(n_workers=0, processes=True, dashboard_address=None) as cluster:
        dask = Path(sys.executable).with_name("dask")
        address = cluster.scheduler_address
        worker = subprocess.Popen(
            [str(dask), "worker", cluster.scheduler_address, "--nthreads", "1", "--no-nanny"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        with distributed.Client(cluster.scheduler_address) as client:
            client.wait_for_workers(1, timeout=60)
        killed: list[float] = []

        def kill_when_cbc_runs() -> None:
            deadline = time.monotonic() + 90
            with distributed.Client(cluster.scheduler_address) as client:
                while time.monotonic() < deadline and not any(client.call_stack().values()):
                    time.sleep(0.2)
            time.sleep(2.0)  # the task's child is solving
            os.kill(worker.pid, signal.SIGKILL)
            killed.append(time.monotonic())

        watcher = threading.Thread(target=kill_when_cbc_runs, daemon=True)
        watcher.start()
        try:
            frame = batch.run_batch(
                [src],
                tmp_path / "out",
                solvers=["mip-cbc"],
                options=Options(time_limit=60),
                executor="dask",
                scheduler=cluster.scheduler_address,
            )
        finally:
            worker.kill()
            worker.wait()
    assert killed and time.monotonic() - killed[0] < 30
    row = frame.iloc[0]
    assert row["status"] == "error" and "Dask worker" in row["message"], row["message"]
    time.sleep(1.0)  # the task's child, forked from the worker, has the worker's command line
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert address not in ps, "the dead worker's solve outlived it"


def test_cli_solve_limit_counts_loading_and_warming_up(monkeypatch, capsys):
    """`solve --time-limit 2`: a warm-up of 1 s comes out of the 2 s, so the whole verb takes
    about 2 s (a process adds only the interpreter's and the CLI's start-up on top); a set-up
    longer than the limit still leaves the solver 10 % of it."""
    import time

    from tensorplan.harness import run

    given: list[float] = []

    def patient(inst, opts):  # uses all the time it is given
        given.append(opts.time_limit)
        time.sleep(opts.time_limit)
        return Result("patient", Status.UNKNOWN, None, None, opts.time_limit)

    table = dict(registry.solvers("allocation"))
    table["patient"] = Solver("patient", "heuristic", patient, "sleeps", {"time_limit"})
    monkeypatch.setattr(registry, "solvers", lambda name: table)
    for warm_s, limit, expected in ((1.0, 2.0, 1.0), (3.0, 2.0, 0.2)):
        monkeypatch.setattr(run, "warm_once", lambda p, s, f=None, w=warm_s: time.sleep(w))
        began = time.perf_counter()
        assert main(["solve", str(SEED), "--solver", "patient", "--time-limit", str(limit)]) == 1
        wall = time.perf_counter() - began
        assert given[-1] == pytest.approx(expected, abs=0.15)
        assert wall <= max(limit, warm_s + 0.1 * limit) + 0.3
    capsys.readouterr()


def test_api_solve_hears_the_progress_and_ends_with_the_verified_result():
    from tensorplan import fusion

    inst = fusion.load(fusion.shipped("random-30-s4"))
    heard = []
    res = fusion.solve(inst, "cpsat", time_limit=5, progress=heard.append)
    assert heard and heard[-1].final and not any(p.final for p in heard[:-1])
    assert (heard[-1].objective, heard[-1].bound) == (res.objective, res.bound)
    assert all(p.solver == "cpsat" and p.sense == "min" for p in heard)

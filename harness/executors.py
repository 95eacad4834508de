"""Executors of a batch: they run `tasks.run_task` and yield each `Done` as it finishes.

- `"process"`: each task in a forked worker of its own process group, `jobs` at a time; one past
  its hard deadline is killed with everything it started (CBC, ...) and becomes an `error` row;
- `"inline"`: in this process, one after the other (for debugging);
- `"dask"`: on a Dask cluster (`--scheduler ADDRESS`).

Ctrl-C is turned into KeyboardInterrupt between results (`interrupt_at_safe_points`), so a row
is never torn and the workers are stopped before the error propagates.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import shutil
import signal
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from multiprocessing.connection import Connection
from multiprocessing.connection import wait as mp_wait
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any, cast

from tensorplan.harness.rows import close_inherited_locks
from tensorplan.harness.run import warm_up
from tensorplan.harness.tasks import Done, Task, failed_row, run_task
from tensorplan.problems.core import Progress

News = Callable[[Task, Progress], None]
"""Hears the progress of a running task (`Options.progress`), with the task it is about."""

log = logging.getLogger("tensorplan")

POLL_S = 0.5  # the parent wakes at least this often, so Ctrl-C is acted on promptly
WARM_UP_S = 60.0  # compiling every kernel a batch uses, plus 6 s per solver run on a tiny case


class StopFlag:
    """Set by the SIGINT handler; executors raise KeyboardInterrupt at their next safe point."""

    def __init__(self) -> None:
        self.hit = False

    def check(self) -> None:
        if self.hit:
            raise KeyboardInterrupt


@contextlib.contextmanager
def interrupt_at_safe_points() -> Iterator[StopFlag]:
    """Ctrl-C during a run: finish writing the current row, stop the workers, then raise.

    The first SIGINT only sets the flag; the executors turn it into KeyboardInterrupt between
    results (the parent wakes every `POLL_S`), so the signal is never swallowed inside a
    library's cleanup code and never tears a row. A second Ctrl-C interrupts at once.
    """
    stop = StopFlag()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return
    previous = signal.getsignal(signal.SIGINT)

    def handler(signum: int, frame: Any) -> None:
        if stop.hit:
            raise KeyboardInterrupt
        stop.hit = True

    signal.signal(signal.SIGINT, handler)
    try:
        yield stop
    finally:
        signal.signal(signal.SIGINT, previous)


def execute(
    tasks: Sequence[Task],
    *,
    jobs: int = 1,
    executor: str = "process",
    scheduler: str | None = None,
    stop: StopFlag | None = None,
    news: News | None = None,
) -> Generator[Done, None, None]:
    """Yield results as tasks finish, in completion order. Closing the generator cancels the rest;
    `stop` (Ctrl-C) raises KeyboardInterrupt between results. `news` hears the running tasks'
    progress (forked workers send it up their pipe; not from Dask)."""
    stop = stop or StopFlag()
    if not tasks:
        return
    if executor == "dask":
        yield from _execute_dask(tasks, scheduler, stop)
        return
    if executor == "inline":
        for t in tasks:
            stop.check()
            yield run_task(t, None if news is None else partial(news, t))
        return
    sweep_stale_task_dirs()
    yield from _execute_forked(tasks, max(1, jobs), stop, news)


# --- forked workers ------------------------------------------------------------------------------


def hard_deadline(task: Task) -> float:
    """Seconds after which a solve is killed: its own limit plus room to build and verify."""
    return 2 * task.options.time_limit + 30


@dataclass
class _Worker:
    proc: BaseProcess
    conn: Connection
    task: Task
    deadline: float
    tmp: str

    def stop(self) -> None:
        """Kill the worker and everything it started (its process group: CBC, ...), close its
        pipe and remove its temporary directory (solver files such as PuLP's model files)."""
        _kill_group(self.proc)
        self.conn.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


def _kill_group(proc: BaseProcess) -> None:
    if proc.pid is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    proc.join()


def _execute_forked(
    tasks: Sequence[Task], jobs: int, stop: StopFlag, news: News | None = None
) -> Iterator[Done]:
    """Each task in its own forked process (and process group), at most `jobs` at once; one
    that outlives its hard deadline is killed and becomes an `error` row, one that dies becomes
    an `error` row. Closing the generator (or Ctrl-C) kills the running ones with their child
    processes; finished rows are already out. With `news`, the workers send their progress up
    the same pipe before their result."""
    queue = list(reversed(tasks))
    running: dict[Connection, _Worker] = {}
    try:
        while queue or running:
            stop.check()
            while queue and len(running) < jobs:
                worker = _start(queue.pop(), news is not None)
                running[worker.conn] = worker
            wake = min(w.deadline for w in running.values()) - time.monotonic()
            for ready in mp_wait(list(running), timeout=min(max(0.0, wake), POLL_S)):
                done = _collect(running[cast(Connection, ready)], news)
                if done is not None:
                    del running[cast(Connection, ready)]
                    yield done
            now = time.monotonic()
            for late in [w for w in running.values() if now > w.deadline]:
                del running[late.conn]
                late.stop()
                limit = late.task.options.time_limit
                message = f"killed after {hard_deadline(late.task):.0f} s (time limit {limit:g} s)"
                yield Done(failed_row(late.task, message))
    finally:
        for w in running.values():
            w.stop()


def _start(task: Task, talk: bool = False) -> _Worker:
    """Fork the worker of `task`, with a temporary directory and a pipe back of its own (its
    progress goes up it too when `talk`)."""
    ctx = multiprocessing.get_context("fork")
    tmp = tempfile.mkdtemp(prefix=TASK_PREFIX)
    _mark_owner(tmp)
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(task, send, tmp, None, talk), daemon=True)
    proc.start()
    send.close()
    return _Worker(proc, recv, task, time.monotonic() + hard_deadline(task), tmp)


def _collect(w: _Worker, news: News | None = None) -> Done | None:
    """The result a finished worker sent, or an `error` row when it died without sending one;
    None for a progress message (passed on to `news`): the worker still runs."""
    try:
        got: Done | Progress = w.conn.recv()
    except EOFError:
        w.proc.join()
        got = Done(failed_row(w.task, f"worker died (exit code {w.proc.exitcode})"))
    if isinstance(got, Progress):
        if news is not None:
            news(w.task, got)
        return None
    w.stop()
    return got


def _own_process_group(parent_pid: int | None = None) -> None:
    """In a forked child: let go of the parent's locks, lead a process group of its own that
    Ctrl-C does not reach, so the parent decides when it stops, and end with the parent, with
    everything it started (Linux): a kill -9 of the run sends the worker SIGTERM
    (PR_SET_PDEATHSIG), on which it kills its process group (CBC) and its children's."""
    close_inherited_locks()
    os.setpgrp()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _end_with_everything)
    if parent_pid is None:  # forked by multiprocessing, which knows the parent
        parent = multiprocessing.parent_process()
        parent_pid = None if parent is None else parent.pid
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    if parent_pid is not None and os.getppid() != parent_pid:
        _end_with_everything(signal.SIGTERM, None)  # the run died before the line above


def _end_with_everything(signum: int, frame: Any) -> None:
    """SIGTERM in a worker (its run has died): kill the process groups of its children (a
    guarded back-end leads one of its own) and then its own (itself and CBC)."""
    for pid in _children(os.getpid()):
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    os.killpg(os.getpgrp(), signal.SIGKILL)


def _children(parent: int) -> list[int]:
    """Process ids whose parent is `parent` (Linux /proc; none elsewhere)."""
    found = []
    for entry in _proc_pids():
        proc = _proc_stat(entry)
        if proc is not None and proc[1] == parent:
            found.append(entry)
    return found


def _proc_pids() -> list[int]:
    try:
        return [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []


def _proc_stat(pid: int) -> tuple[int, int, int] | None:
    """(uid, parent pid, start time in clock ticks since boot) of process `pid`, or None."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
        uid = os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()  # after "pid (command) "
    try:
        return uid, int(fields[1]), int(fields[19])
    except (IndexError, ValueError):
        return None


# --- temporary files of dead runs ----------------------------------------------------------------

TASK_PREFIX = "tensorplan-task-"
OWNER = ".owner"
"""In each task's temporary directory: `<pid> <start time>` of the run that made it, so that a
later run can tell the directory of a dead run (kill -9) from that of a live one."""


def _mark_owner(tmp: str) -> None:
    proc = _proc_stat(os.getpid())
    Path(tmp, OWNER).write_text(f"{os.getpid()} {proc[2] if proc else -1}\n")


def _owner_alive(tmp: Path) -> bool | None:
    """Whether the run that made task directory `tmp` still runs; None when it cannot be told
    (no readable mark: not provably ours)."""
    try:
        pid, started = map(int, (tmp / OWNER).read_text().split())
    except (OSError, ValueError):
        return None
    proc = _proc_stat(pid)
    return proc is not None and (started < 0 or proc[2] == started)


def sweep_stale_task_dirs(root: str | None = None) -> int:
    """Remove the task directories (CBC's model files, ...) that runs killed with kill -9 left
    in the temporary folder, after killing what still runs from them (an orphaned CBC). Only
    directories provably ours and dead: owned by this user, marked by a run (`OWNER`) that no
    longer exists. Returns how many were removed."""
    base = Path(root or tempfile.gettempdir())
    try:
        candidates = [p for p in base.iterdir() if p.name.startswith(TASK_PREFIX)]
    except OSError:
        return 0
    removed = 0
    for tmp in candidates:
        try:
            info = tmp.lstat()
        except OSError:
            continue
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
            continue
        if _owner_alive(tmp) is not False:
            continue
        _kill_users_of(tmp)
        shutil.rmtree(tmp, ignore_errors=True)
        removed += not tmp.exists()
    if removed:
        log.info("removed %d temporary task folder(s) of dead runs from %s", removed, base)
    return removed


def _kill_users_of(tmp: Path) -> None:
    """Kill this user's processes that run from `tmp` (named in their command line, e.g. CBC
    reading `tmp/.../model.mps`, or working in it)."""
    needle = str(tmp)
    for pid in _proc_pids():
        proc = _proc_stat(pid)
        if proc is None or proc[0] != os.getuid() or pid == os.getpid():
            continue
        try:
            args = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue
        inside = [a for a in (*args.split("\0"), cwd) if a == needle or needle + "/" in a]
        if inside:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def _child(
    task: Task, conn: Connection, tmp: str, parent_pid: int | None = None, talk: bool = False
) -> None:
    """Worker body, in a process group of its own so that stopping it stops its solvers too.
    Ctrl-C is left to the parent; temporary files go to `tmp`, which the parent removes. With
    `talk`, the solve's progress goes up `conn` before the result (the reporter serialises its
    sends and a failed one is dropped)."""
    _own_process_group(parent_pid)
    os.environ["TMPDIR"] = tmp
    tempfile.tempdir = tmp
    try:
        done = run_task(task, conn.send if talk else None)
    except BaseException as err:  # report, never hang the parent
        done = Done(failed_row(task, f"worker failed: {type(err).__name__}: {err}"))
    conn.send(done)
    conn.close()


def warm_up_in_child(solvers: Mapping[str, set[str]]) -> None:
    """Build the compiled kernels (numba's on-disk cache) once, untimed, in a child process of
    its own, so the workers load them instead of each compiling inside a timed solve; a solver
    that hangs or kills its process here only ends this child."""
    if not solvers:
        return

    def body() -> None:
        _own_process_group()
        for problem, names in sorted(solvers.items()):
            warm_up(problem, sorted(names), hooks=True)

    proc = multiprocessing.get_context("fork").Process(target=body, daemon=True)
    proc.start()
    proc.join(WARM_UP_S + 6.0 * sum(len(names) for names in solvers.values()))
    _kill_group(proc)


# --- Dask ------------------------------------------------------------------------------------


NO_WORKER_S = 30.0
"""A Dask cluster without a single worker for this long ends the tasks still to run as `error`
rows (the only worker died, or none ever came) instead of waiting for one forever."""
DASK_SLACK_S = 10.0
"""Beyond a task's hard deadline, counted from when a Dask worker started it: room for the
answer to travel back before the task is given up as lost (its worker died or hangs)."""


def run_task_guarded(task: Task) -> Done:
    """`run_task` in a forked child of its own process group, killed with everything it started
    at the task's hard deadline (an `error` row then), as the process executor runs it: what a
    Dask worker runs, so that a hung solver does not hold the worker past the deadline. (A
    plain fork: a Dask worker may be a daemonic process, which multiprocessing lets have no
    children.)"""
    tmp = tempfile.mkdtemp(prefix=TASK_PREFIX)
    _mark_owner(tmp)
    recv, send = multiprocessing.Pipe(duplex=False)
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # the child: never returns into the caller (a Dask worker's code)
        try:
            recv.close()
            _child(task, send, tmp, parent)
        finally:
            os._exit(0)
    with contextlib.suppress(OSError):  # both sides set the group: no race with the kill
        os.setpgid(pid, pid)
    send.close()
    deadline = time.monotonic() + hard_deadline(task)
    try:
        if not recv.poll(max(0.0, deadline - time.monotonic())):
            limit = task.options.time_limit
            message = f"killed after {hard_deadline(task):.0f} s (time limit {limit:g} s)"
            return Done(failed_row(task, message))
        try:
            done: Done = recv.recv()
        except EOFError:
            _, status = os.waitpid(pid, 0)
            return Done(
                failed_row(task, f"worker died (exit code {os.waitstatus_to_exitcode(status)})")
            )
        return done
    finally:
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.waitpid(pid, 0)
        recv.close()
        shutil.rmtree(tmp, ignore_errors=True)


def _execute_dask(tasks: Sequence[Task], scheduler: str | None, stop: StopFlag) -> Iterator[Done]:
    """Each task on a Dask worker, in a guarded child there (`run_task_guarded`). Watched from
    here too: a task a worker started that has not answered by its hard deadline (plus
    `DASK_SLACK_S`), or every task left when the cluster has had no worker for `NO_WORKER_S`,
    becomes an `error` row; so does one whose workers kept dying (Dask's KilledWorker)."""
    try:
        from distributed import Client, as_completed
    except ImportError:  # pragma: no cover - depends on the environment
        raise RuntimeError("the dask executor needs the extra: pip install -e '.[dask]'") from None
    if not scheduler:
        raise RuntimeError("--executor dask needs --scheduler ADDRESS (e.g. tcp://127.0.0.1:8786)")
    try:
        client = Client(scheduler, timeout=10)
    except (OSError, TimeoutError) as err:
        raise RuntimeError(f"cannot reach the Dask scheduler {scheduler}: {err}") from None
    with client:
        futures = client.map(run_task_guarded, list(tasks), pure=False)
        pending = {f.key: (f, t) for f, t in zip(futures, tasks, strict=True)}
        started: dict[Any, float] = {}
        lonely_since: float | None = None
        ready = as_completed(futures)
        try:
            while pending:
                stop.check()
                for fut in ready.next_batch(block=False) if ready.has_ready() else []:
                    if fut.key in pending:
                        yield _dask_done(fut, pending.pop(fut.key)[1])
                if not pending:
                    break
                time.sleep(POLL_S)
                now = time.monotonic()
                for keys in _dask_executing(client).values():
                    for key in keys:
                        started.setdefault(key, now)
                for key in [k for k in pending if k in started]:
                    fut, task = pending[key]
                    if now > started[key] + hard_deadline(task) + DASK_SLACK_S and not fut.done():
                        del pending[key]
                        fut.cancel()
                        message = (
                            f"no answer from its Dask worker {hard_deadline(task):.0f} s after it "
                            "started (the worker died or hangs)"
                        )
                        yield Done(failed_row(task, message))
                if _dask_workers(client):
                    lonely_since = None
                    continue
                if lonely_since is None:
                    lonely_since = now
                    log.warning("the Dask cluster has no worker; waiting %.0f s", NO_WORKER_S)
                elif now - lonely_since > NO_WORKER_S:
                    for key, (fut, task) in list(pending.items()):
                        if not fut.done():
                            del pending[key]
                            fut.cancel()
                            why = f"no Dask worker left to run it (none for {NO_WORKER_S:.0f} s)"
                            yield Done(failed_row(task, why))
        finally:
            client.cancel(futures)


def _dask_done(fut: Any, task: Task) -> Done:
    """The result of a finished Dask future, or an `error` row when it failed (its workers
    died: KilledWorker; cancelled; ...)."""
    try:
        done: Done = fut.result()
    except Exception as err:  # whatever Dask raises is this task's failure
        name = type(err).__name__
        why = "its Dask workers died running it" if name == "KilledWorker" else "Dask failed it"
        return Done(failed_row(task, f"{why}: {name}: {err}"))
    return done


def _dask_executing(client: Any) -> dict[str, list[Any]]:
    """Worker -> keys of the tasks it is executing now (not those queued)."""
    try:
        stacks = client.call_stack()
    except Exception:  # a worker that just died: next poll
        return {}
    return {w: list(keys) for w, keys in stacks.items()}


def _dask_workers(client: Any) -> int:
    """How many workers the scheduler has now."""
    try:
        return len(client.nthreads())
    except Exception:  # the scheduler is busy: as still served
        return 1

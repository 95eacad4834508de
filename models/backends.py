"""Solver back-ends shared by every exact model: one MIP builder for HiGHS and CBC, CP-SAT glue.

A formulation is written once against `LinearModel`; `solve_mip(model, backend=...)` runs it on
HiGHS (highspy) or CBC (pulp) and maps each back-end's status onto `Status` in one place.
"""

from __future__ import annotations

import contextlib
import math
import os
import pickle
import re
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, overload

import numpy as np

from tensorplan.problems.core import Number, Reporter, Result, Sense, Status, relative_gap

Backend = Literal["highs", "cbc"]
Terms = Iterable[tuple[int, float]]
Values = Sequence[float] | np.ndarray
"""One value per variable of a `LinearModel` (a MIP start)."""
INF = math.inf


@dataclass
class LinearModel:
    """A mixed-integer linear program built row by row; variables are plain integer indices."""

    sense: Literal["min", "max"] = "min"
    lower: list[float] = field(default_factory=list)
    upper: list[float] = field(default_factory=list)
    integer: list[bool] = field(default_factory=list)
    cost: list[float] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    row_lower: list[float] = field(default_factory=list)
    row_upper: list[float] = field(default_factory=list)
    row_start: list[int] = field(default_factory=lambda: [0])
    row_index: list[int] = field(default_factory=list)
    row_value: list[float] = field(default_factory=list)
    offset: float = 0.0

    @property
    def num_vars(self) -> int:
        return len(self.lower)

    @property
    def num_constraints(self) -> int:
        return len(self.row_lower)

    def var(
        self,
        lb: float = 0.0,
        ub: float = INF,
        *,
        integer: bool = False,
        cost: float = 0.0,
        name: str = "",
    ) -> int:
        self.lower.append(lb)
        self.upper.append(ub)
        self.integer.append(integer)
        self.cost.append(cost)
        self.names.append(name or f"x{len(self.names)}")
        return len(self.lower) - 1

    def binary(self, *, cost: float = 0.0, name: str = "") -> int:
        return self.var(0.0, 1.0, integer=True, cost=cost, name=name)

    def binaries(self, count: int, *, prefix: str = "b") -> np.ndarray:
        """`count` binaries of cost 0 at once (named prefix0, prefix1, ...); their indices."""
        first = self.num_vars
        self.lower += [0.0] * count
        self.upper += [1.0] * count
        self.integer += [True] * count
        self.cost += [0.0] * count
        self.names += [f"{prefix}{k}" for k in range(count)]
        return np.arange(first, first + count, dtype=np.int64)

    def add_rows(
        self, index: np.ndarray, value: np.ndarray, lo: float | np.ndarray, hi: float | np.ndarray
    ) -> None:
        """Add one row lo[r] <= sum_k value[r, k] * x[index[r, k]] <= hi[r] per row r of the
        (rows, terms) arrays at once: what `add` does row by row, for distinct indices within a
        row and nonzero values (checked)."""
        rows, terms = index.shape
        if value.shape != index.shape or not np.all(value):
            raise ValueError("add_rows takes same-shaped index and value arrays, values nonzero")
        if terms > 1 and (np.sort(index, axis=1)[:, 1:] == np.sort(index, axis=1)[:, :-1]).any():
            raise ValueError("add_rows takes distinct indices within a row")
        base = len(self.row_index)
        self.row_index += index.ravel().tolist()
        self.row_value += value.astype(float).ravel().tolist()
        self.row_start += (base + terms * np.arange(1, rows + 1)).tolist()
        self.row_lower += np.broadcast_to(np.asarray(lo, dtype=float), (rows,)).tolist()
        self.row_upper += np.broadcast_to(np.asarray(hi, dtype=float), (rows,)).tolist()

    def add(self, terms: Terms, lo: float = -INF, hi: float = INF) -> int:
        """Add the row lo <= sum(coef * x[i]) <= hi (duplicate indices are summed)."""
        merged: dict[int, float] = {}
        for i, c in terms:
            merged[i] = merged.get(i, 0.0) + c
        for i, c in merged.items():
            if c != 0.0:
                self.row_index.append(i)
                self.row_value.append(c)
        self.row_start.append(len(self.row_index))
        self.row_lower.append(lo)
        self.row_upper.append(hi)
        return len(self.row_lower) - 1

    def stats(self) -> dict[str, int]:
        return {
            "variables": self.num_vars,
            "constraints": self.num_constraints,
            "integer_variables": sum(self.integer),
        }


@dataclass(frozen=True)
class MipOutcome:
    status: Status
    objective: float | None
    bound: float | None
    values: np.ndarray | None
    message: str = ""


def solve_mip(
    model: LinearModel,
    *,
    backend: Backend = "highs",
    time_limit: float = 10.0,
    seed: int = 0,
    start: Values | None = None,
    threads: int = 1,
    gap: float = 0.0,
    report: Reporter | None = None,
) -> MipOutcome:
    """Solve `model` on the chosen back-end; a time-out keeps the incumbent and its bound.

    `time_limit` is all this call may take: handing the model over, the search and reading the
    answer back. A back-end still running at the deadline is stopped (killed if need be) and the
    answer is `unknown`; one that cannot even be handed the model in time is not started.
    `gap` > 0 stops once the incumbent is proven within that relative gap (status `feasible`
    unless the bound meets it: see `exact_result`). `report` hears of each incumbent and bound
    as the back-end finds them, in the model's own objective (with its offset).
    """
    deadline = time.perf_counter() + time_limit
    if backend == "highs":
        if model.num_vars > GUARD_VARS:
            # the child's answer comes back through a pipe, or the child is killed and reaped:
            # either way before the deadline
            out = run_guarded(
                lambda: _solve_highs(
                    model, deadline - _READ_BACK_S, seed, start, threads, gap, report
                ),
                max(time_limit - _READ_BACK_S, 0.0),
                report,
            )
            return out or MipOutcome(
                Status.UNKNOWN, None, None, None, "HiGHS killed at its deadline"
            )
        return _solve_highs(model, deadline, seed, start, threads, gap, report)
    if backend == "cbc":
        return _solve_cbc(model, deadline, seed, start, threads, gap, report)
    raise ValueError(f"unknown MIP backend {backend!r}")


_READ_BACK_S = 0.15
"""What a guarded HiGHS child needs to send its answer back and the parent to unpickle it, or
the parent to kill and reap it (tearing down a fork of a large process takes about 0.1 s)."""

MPS_S_PER_NONZERO = 1e-6
"""Handing a model to CBC: the HiGHS model plus the MPS file it writes, per nonzero (measured
0.5 us; twice that, for a loaded machine)."""

MIN_SOLVE_S = 0.2
"""The least time worth starting a back-end's search with."""

CBC_READ_S_PER_VAR = 2e-6
"""Reading CBC's solution file back, per column (measured 1 us)."""

CBC_RETRY_VARS, CBC_RETRY_SHARE = 500, 0.3
"""Models of at most this many variables get a first CBC run with this share of the time; one
that ends unproven is run again, with the next seed, for the rest."""


def highs_time_left(deadline: float) -> float:
    """Seconds before `deadline` (a `time.perf_counter()` value), for HiGHS's own limit."""
    return max(deadline - time.perf_counter(), 0.01)


def solve_deadline(time_limit: float) -> float:
    """The `time.perf_counter()` by which a solve of budget `time_limit` starting now must have
    its answer. The rest of the budget, 0.1 s + 3 %, is kept for what follows inside it: the
    harness's check of the answer (hundredths of a second at the shipped sizes), freeing the
    solver's objects, a loaded machine's jitter. (A model's own read-back of its columns comes
    before the deadline: see `wrap_up_s`.)"""
    return time.perf_counter() + time_limit - reserve_s(time_limit)


def reserve_s(time_limit: float) -> float:
    """What a solve of budget `time_limit` keeps for after its back-end (see `solve_deadline`)."""
    return 0.1 + 0.03 * time_limit


READ_S_PER_VAR = 2e-6
"""A model turning its back-end's column values into a solution and checking it, per column
read (measured about 1 us for the fusion and allocation models)."""

FREE_S_PER_NONZERO = 1e-7
"""Freeing a built `LinearModel` (its Python lists), per nonzero (measured 4e-8 s)."""


def wrap_up_s(model: LinearModel, read_vars: int) -> float:
    """Seconds a model needs after its back-end has answered: reading `read_vars` columns into
    a solution and checking it, then freeing the model. Back-ends are given that much less."""
    return READ_S_PER_VAR * read_vars + FREE_S_PER_NONZERO * len(model.row_index)


class OutOfTime(Exception):
    """Raised by a model builder that passed its deadline: the caller answers without it."""


def check_deadline(deadline: float) -> None:
    """Raise `OutOfTime` once `deadline` (a `time.perf_counter()` value) has passed."""
    if time.perf_counter() > deadline:
        raise OutOfTime


def run_guarded(fn: Callable[[], Any], timeout: float, report: Reporter | None = None) -> Any:
    """Run fn() in a forked child, killed after `timeout` seconds; its result, or None.

    The child leads its own process group and writes temporary files into a private directory,
    so a kill at the deadline (or the caller's Ctrl-C) also ends a solver process it started
    (CBC) and leaves no files behind. `report`, when fn() reports to it, is the child's copy
    there: what it sends comes back through a pipe of its own to the parent's `report`.
    """
    if not hasattr(os, "fork"):
        return fn()
    tmp = tempfile.mkdtemp(prefix="tensorplan-guard-")
    r, w = os.pipe()
    news = os.pipe() if report is not None and report.fn is not None else None
    pid = os.fork()
    if pid == 0:  # child: never returns
        code = 1
        try:
            os.setpgid(0, 0)
            os.close(r)
            if news is not None and report is not None:
                os.close(news[0])
                _report_through(report, news[1])
            os.environ["TMPDIR"] = tempfile.tempdir = tmp
            data = pickle.dumps(fn())
            with os.fdopen(w, "wb") as f:
                f.write(data)
            code = 0
        finally:
            os._exit(code)
    with contextlib.suppress(OSError):  # both sides set the group: no race with the kill
        os.setpgid(pid, pid)
    os.close(w)
    if news is not None:
        os.close(news[1])
    chunks = []
    done = False
    try:
        deadline = time.monotonic() + timeout
        beat = contextlib.nullcontext() if report is None else report.ticking()
        with os.fdopen(r, "rb", buffering=0) as f, beat:
            while True:
                left = deadline - time.monotonic()
                watch: list[Any] = [f] if news is None else [f, news[0]]
                ready = [] if left <= 0 else select.select(watch, [], [], left)[0]
                if news is not None and news[0] in ready:
                    news = _relay(news, report)
                    continue
                if not ready:
                    break
                chunk = f.read(1 << 20)
                if not chunk:
                    done = True
                    break
                chunks.append(chunk)
    finally:
        if not done:  # the child, and whatever it started
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        with contextlib.suppress(OSError):  # anything it started and left running
            os.killpg(pid, signal.SIGKILL)
        shutil.rmtree(tmp, ignore_errors=True)
        if news is not None:
            os.close(news[0])
    if not done or status != 0:
        return None
    try:
        return pickle.loads(b"".join(chunks))
    except Exception:  # a truncated message: treat as no answer
        return None


_NEWS = struct.Struct("dd")
"""One progress message from a guarded child: objective and bound, NaN for none. Each is one
write of 16 bytes, far below PIPE_BUF: never torn."""


def _report_through(report: Reporter, fd: int) -> None:
    """In a guarded child: make its copy of `report` send what it reports up the pipe `fd`."""
    nan = math.nan

    def send(p: Any) -> None:
        objective = nan if p.objective is None else p.objective
        os.write(fd, _NEWS.pack(objective, nan if p.bound is None else p.bound))

    report.fn = send
    report.shift = 0.0  # the parent's copy shifts
    report._lock = threading.Lock()  # another thread may have held the parent's at the fork


def _relay(news: tuple[int, int], report: Reporter | None) -> tuple[int, int] | None:
    """Read the progress messages waiting on a guarded child's pipe and pass them on to the
    parent's `report`; None (stop listening) once the child closed it."""
    data = os.read(news[0], _NEWS.size * 256)
    if not data:
        os.close(news[0])
        return None
    for objective, bound in _NEWS.iter_unpack(data[: len(data) // _NEWS.size * _NEWS.size]):
        if report is not None:  # the child's reporter throttled them already
            report(
                None if math.isnan(objective) else objective,
                None if math.isnan(bound) else bound,
                force=True,
            )
    return news


GUARD_VARS = 5_000
"""HiGHS models above this many variables run in a child process killed at the deadline:
HiGHS does not always stop at its own time limit (presolve or a long node) and cannot be
interrupted from another thread."""


def _solve_highs(
    model: LinearModel,
    deadline: float,
    seed: int,
    start: Values | None,
    threads: int,
    gap: float,
    report: Reporter | None = None,
) -> MipOutcome:
    import highspy

    h = _highs_model(model)
    h.setOptionValue("time_limit", highs_time_left(deadline))
    h.setOptionValue("random_seed", int(seed))
    h.setOptionValue("threads", int(threads))
    h.setOptionValue("mip_rel_gap", solver_gap(gap))
    h.setOptionValue("mip_abs_gap", 1e-6)
    highs_run(h, start, report)
    ms = h.getModelStatus()
    info = h.getInfo()
    has_sol = info.primal_solution_status == 2  # kSolutionStatusFeasible
    values = np.asarray(h.getSolution().col_value, dtype=float) if has_sol else None
    objective = float(info.objective_function_value) if has_sol else None
    is_mip = any(model.integer)
    bound = float(info.mip_dual_bound) if is_mip else objective
    if bound is not None and not math.isfinite(bound):
        bound = None
    K = highspy.HighsModelStatus
    if ms == K.kOptimal:
        return MipOutcome(Status.OPTIMAL, objective, objective if bound is None else bound, values)
    if ms == K.kInfeasible:
        return MipOutcome(Status.INFEASIBLE, None, None, None)
    status = Status.FEASIBLE if has_sol else Status.UNKNOWN
    return MipOutcome(status, objective, bound, values, f"HiGHS: {h.modelStatusToString(ms)}")


def highs_run(h: Any, start: Values | None = None, report: Reporter | None = None) -> None:
    """Run HiGHS quietly, from the start solution `start` when given (a MIP start); `report`
    hears of its incumbents and bounds (MIP callbacks) and, with `log`, passes its log on."""
    import highspy

    if report is not None:
        highs_listen(h, report)
    if start is not None:
        sol = highspy.HighsSolution()
        sol.col_value = [float(v) for v in start]
        sol.value_valid = True
        h.setSolution(sol)
    beat = contextlib.nullcontext() if report is None else report.ticking()
    with quiet_stdout(), beat:  # the heartbeat beats when HiGHS's callbacks are far apart
        h.run()


def highs_listen(h: Any, report: Reporter) -> None:
    """Subscribe `report` to HiGHS's MIP callbacks: each improving solution, and each of its
    frequent interrupt checks (the reporter throttles them into a heartbeat); with
    `report.log`, HiGHS's log goes to stderr."""
    if report.fn is not None:

        def news(event: Any) -> None:
            out = event.data_out
            primal, dual = out.mip_primal_bound, out.mip_dual_bound
            report(primal if math.isfinite(primal) else None, dual if math.isfinite(dual) else None)

        h.cbMipImprovingSolution.subscribe(news)
        h.cbMipInterrupt.subscribe(news)
    if report.log:  # the console is fd 1, silenced by `quiet_stdout`; the callback sees it all
        h.setOptionValue("output_flag", True)
        h.cbLogging.subscribe(lambda event: sys.stderr.write(event.message))


def _highs_model(model: LinearModel, sense: str | None = None) -> Any:
    """A quiet HiGHS instance holding `model` (in the given sense, default the model's own)."""
    import highspy

    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = model.num_vars, model.num_constraints
    lp.col_cost_ = np.asarray(model.cost, dtype=float)
    lp.col_lower_ = np.asarray(model.lower, dtype=float)
    lp.col_upper_ = np.asarray(model.upper, dtype=float)
    lp.row_lower_ = np.asarray(model.row_lower, dtype=float)
    lp.row_upper_ = np.asarray(model.row_upper, dtype=float)
    lp.offset_ = model.offset
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.start_ = np.asarray(model.row_start, dtype=np.int32)
    lp.a_matrix_.index_ = np.asarray(model.row_index, dtype=np.int32)
    lp.a_matrix_.value_ = np.asarray(model.row_value, dtype=float)
    if any(model.integer):
        lp.integrality_ = [
            highspy.HighsVarType.kInteger if t else highspy.HighsVarType.kContinuous
            for t in model.integer
        ]
    maximise = (sense or model.sense) == "max"
    lp.sense_ = highspy.ObjSense.kMaximize if maximise else highspy.ObjSense.kMinimize
    h.passModel(lp)
    return h


def _solve_cbc(
    model: LinearModel,
    deadline: float,
    seed: int,
    start: Values | None,
    threads: int,
    gap: float,
    report: Reporter | None = None,
) -> MipOutcome:
    """CBC (the binary bundled with PuLP) on an MPS file written by HiGHS, always minimising.

    Writing the file in C++ and running the binary ourselves keeps the whole solve inside the
    time limit: CBC is told the time left and killed at the deadline, less what reading its
    answer takes (then status unknown), instead of PuLP building the model row by row in
    Python; a model too big to write before the deadline is not written. CBC's proven bound is
    read from its closing summary (`Lower bound:`).
    """
    flip = -1.0 if model.sense == "max" else 1.0
    nonzeros = len(model.row_index)
    read_back = 0.05 + CBC_READ_S_PER_VAR * model.num_vars
    if deadline - time.perf_counter() < MPS_S_PER_NONZERO * nonzeros + read_back + MIN_SOLVE_S:
        message = f"no time to hand CBC a model of {nonzeros} nonzeros"
        return MipOutcome(Status.UNKNOWN, None, None, None, message)
    with tempfile.TemporaryDirectory(prefix="tensorplan-cbc-") as tmp:
        mps, sol_path, mst = (Path(tmp) / n for n in ("model.mps", "model.sol", "start.mst"))
        h = _highs_model(model, sense="min")
        if flip < 0:
            h.changeColsCost(
                model.num_vars,
                np.arange(model.num_vars, dtype=np.int32),
                -np.asarray(model.cost, dtype=float),
            )
        with quiet_stdout():
            h.writeModel(str(mps))
        del h
        cmd = [_cbc_binary(), str(mps)]
        if start is not None:
            mst.write_text(
                "      Stuff\n"
                + "".join(
                    f" {i} c{i} {round(v) if model.integer[i] else v}\n"
                    for i, v in enumerate(start)
                )
            )
            cmd += ["-mips", str(mst)]
        runs: list[tuple[str, np.ndarray | None, str]] = []  # (head, values, log) per run
        why = "no time left to run CBC"  # when no run ends with a log
        for attempt in range(2):
            left = deadline - time.perf_counter() - read_back
            if left < MIN_SOLVE_S:
                break
            # a first run on a small model gets a share of the time: CBC now and then stalls
            # on one for its whole limit (15 binaries, 9.6 s, twice in CI), and a run with the
            # next seed settles it at once
            retry = attempt == 0 and model.num_vars <= CBC_RETRY_VARS
            budget = CBC_RETRY_SHARE * left if retry else left
            # CBC often runs past its own limit (reading the file, presolve, a long node): it
            # is told 90 % of its time and killed when all of it is spent
            run = [
                *cmd, "-sec", f"{0.9 * budget - 0.05:.2f}", "-timeMode", "elapsed",
                "-threads", str(threads), "-randomSeed", str((seed + attempt) % 2**31 + 1),
                "-ratioGap", str(solver_gap(gap)), "-allowableGap", "1e-6", "-solve",
                "-printingOptions", "all", "-solution", str(sol_path),
            ]  # fmt: skip
            log = _run_cbc(run, budget, report, lambda v: flip * v + model.offset)
            if log is None:
                why = "CBC killed at its deadline"
            else:
                head, values = _read_cbc_solution(sol_path, model.num_vars)
                runs.append((head, values, log))
                if head.startswith(("Optimal", "Infeasible", "Integer infeasible")):
                    break
            if not retry:
                break
        if not runs:
            return MipOutcome(Status.UNKNOWN, None, None, None, why)
        head, values, log = min(runs, key=lambda r: _cbc_rank(r[0], r[1], model, flip))
    bound = _cbc_lower_bound(log)
    if bound is not None:
        bound = flip * bound + model.offset
    if head.startswith(("Infeasible", "Integer infeasible")):  # the second: proved in presolve
        return MipOutcome(Status.INFEASIBLE, None, None, None)
    has_sol = values is not None and not head.startswith(("Infeasible", "Unbounded"))
    if values is None or not has_sol or "no integer solution" in head.lower():
        return MipOutcome(Status.UNKNOWN, None, bound, None, f"CBC: no solution ({head or 'none'})")
    objective = float(np.dot(model.cost, values)) + model.offset
    if head.startswith("Optimal"):  # within `gap` when one was given: then keep CBC's bound
        proven = objective if gap == 0 or bound is None else bound
        return MipOutcome(Status.OPTIMAL, objective, proven, values)
    message = "CBC: stopped before proving optimality (time limit)"
    return MipOutcome(Status.FEASIBLE, objective, bound, values, message)


def _cbc_rank(
    head: str, values: np.ndarray | None, model: LinearModel, flip: float
) -> tuple[int, float]:
    """Which of two CBC runs to keep (least first): a proof, then the lower objective (as CBC
    minimises it), then a run with no solution."""
    if head.startswith(("Optimal", "Infeasible", "Integer infeasible")):
        return (0, 0.0)
    if values is None:
        return (2, 0.0)
    return (1, flip * float(np.dot(model.cost, values)))


def _run_cbc(
    cmd: list[str], timeout: float, report: Reporter | None, ours: Callable[[float], float]
) -> str | None:
    """Run CBC; its log, or None when it was killed at `timeout`. With `report`, the log is
    read line by line as CBC writes it: each incumbent and bound it prints (`_cbc_news`, turned
    into the model's objective by `ours`) is reported, and with `report.log` the lines go on to
    stderr."""
    if report is None or (report.fn is None and not report.log):
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout).stdout
        except subprocess.TimeoutExpired:
            return None
    lines: list[str] = []
    unbuffered = shutil.which("stdbuf")  # else CBC's lines come in 4 KB chunks through a pipe
    proc = subprocess.Popen(
        [unbuffered, "-oL", *cmd] if unbuffered else cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        errors="replace",
    )
    assert proc.stdout is not None

    def read(out: Any) -> None:
        for line in out:
            lines.append(line)
            if report.log:
                sys.stderr.write(line)
            objective, bound = _cbc_news(line)
            if objective is not None or bound is not None:
                report(
                    None if objective is None else ours(objective),
                    None if bound is None else ours(bound),
                )

    reader = threading.Thread(target=read, args=(proc.stdout,), daemon=True)
    reader.start()
    try:
        with report.ticking():
            proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return None
    finally:
        reader.join(1.0)
        proc.stdout.close()
    return "".join(lines)


_CBC_NEWS = (
    (re.compile(r"Integer solution of (\S+) found"), None),
    (re.compile(r"(\S+) best solution, best possible (\S+)"), 2),
    (re.compile(r"Search completed - best objective (\S+)"), None),
    (re.compile(r"Continuous objective value is (\S+)"), 1),
    (re.compile(r"changed objective from \S+ to (\S+)"), 1),
)
"""CBC's log lines that carry news: (pattern, which group is the bound); the others' first
group is an incumbent's objective."""


def _cbc_news(line: str) -> tuple[float | None, float | None]:
    """(objective, bound) a line of CBC's log announces (in its minimised objective)."""
    for pattern, bound_group in _CBC_NEWS:
        found = pattern.search(line)
        if found is None:
            continue
        try:
            values = [float(v) for v in found.groups()]
        except ValueError:
            return None, None
        if bound_group == 1:
            return None, values[0]
        return values[0], values[1] if bound_group == 2 else None
    return None, None


def _cbc_binary() -> str:
    import pulp

    return pulp.PULP_CBC_CMD().path


def _read_cbc_solution(path: Path, n: int) -> tuple[str, np.ndarray | None]:
    """(status line, column values) of a CBC solution file; (status, None) when it has none."""
    if not path.exists():
        return "", None
    lines = path.read_text(errors="replace").splitlines()
    if not lines:
        return "", None
    values = np.zeros(n, dtype=float)
    seen = 0
    for line in lines[1:]:
        parts = line.replace("**", " ").split()
        if len(parts) >= 3 and parts[1].startswith("c") and parts[1][1:].isdigit():
            values[int(parts[1][1:])] = float(parts[2])
            seen += 1
    return lines[0].strip(), values if seen or n == 0 else None


def _cbc_lower_bound(log_text: str) -> float | None:
    """The `Lower bound:` of CBC's closing summary (minimisation only), if it printed one."""
    found = re.findall(r"^Lower bound:\s+(-?[0-9.eE+-]+)", log_text, flags=re.MULTILINE)
    try:
        return float(found[-1]) if found else None
    except ValueError:
        return None


@contextlib.contextmanager
def quiet_stdout() -> Iterator[None]:
    """Silence what a native solver prints to file descriptor 1 (HiGHS prints some MIP
    diagnostics there even with output_flag off), so the CLI's output stays its own."""
    try:
        sys.stdout.flush()
        saved = os.dup(1)
    except (OSError, ValueError):  # no real stdout (e.g. captured): nothing to silence
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)


# --- the one wrap-up of every exact model -------------------------------------------------------


def exact_result(
    name: str,
    sense: Sense,
    status: Status,
    solution: Any,
    bound: Number | None,
    runtime: float,
    *,
    objective: Callable[[Any], Number],
    warm: Any = None,
    message: str = "",
    stats: Mapping[str, Any] | None = None,
    report: Reporter | None = None,
) -> Result:
    """The result of an exact model, built the same way for every problem and back-end (and
    told to `report`: the model's last word on its progress).

    - the solver found nothing (or something worse than the warm start): the warm start is
      returned, `feasible`, with the solver's bound;
    - `infeasible` (proven) carries no solution and no bound;
    - `optimal` stands only when the bound meets the objective (a solve stopped by `gap` is
      `feasible`); a proven optimum is its own bound.
    """
    res = _exact_result(
        name, sense, status, solution, bound, runtime, objective, warm, message, stats
    )
    return res if report is None else report.result(res)


def _exact_result(
    name: str,
    sense: Sense,
    status: Status,
    solution: Any,
    bound: Number | None,
    runtime: float,
    objective: Callable[[Any], Number],
    warm: Any,
    message: str,
    stats: Mapping[str, Any] | None,
) -> Result:
    if status is Status.INFEASIBLE:
        return Result(name, status, None, None, runtime, None, message, dict(stats or {}))
    value = None if solution is None else objective(solution)
    if warm is not None:
        start_value = objective(warm)
        worse = value is not None and (
            value > start_value if sense == "min" else value < start_value
        )
        if value is None or worse:
            solution, value = warm, start_value
            status = Status.FEASIBLE
            message = message or "no better solver solution: warm start returned"
    if solution is None:
        status = Status.UNKNOWN if status.has_solution else status
        return Result(name, status, None, bound, runtime, None, message, dict(stats or {}))
    assert value is not None  # set with every solution above
    if status is Status.OPTIMAL:
        if bound is None or relative_gap(value, bound, sense) == 0 or _noise(value, bound):
            bound = value
        else:
            status = Status.FEASIBLE
            message = message or f"stopped within the gap: bound {bound}"
    elif bound is not None and _noise(value, bound):
        bound = value
    return Result(name, status, value, bound, runtime, solution, message, dict(stats or {}))


def _noise(value: Number, bound: Number) -> bool:
    """Bound and objective differ by float rounding only."""
    return abs(value - bound) <= 1e-6 * max(1.0, abs(value))


# --- CP-SAT ---------------------------------------------------------------------------------------


def solver_gap(gap: float) -> float:
    """The back-ends' relative gap for ours: they divide by the incumbent, we by the bound
    ((objective - bound) / bound <= gap), so they are given gap / (1 + gap)."""
    return gap / (1.0 + gap)


def run_cpsat(
    model,
    *,
    time_limit: float,
    seed: int,
    workers: int = 1,
    gap: float = 0.0,
    params: Mapping[str, Any] | None = None,
    report: Reporter | None = None,
):
    """Solve a CP-SAT model; returns (solver, Status). Time-outs keep the incumbent; `gap` > 0
    stops once the incumbent is proven within it (our definition: see `solver_gap`).

    `params` sets further CpSolver parameters by name (e.g. {"linearization_level": 2}).
    `report` hears of each solution and each better bound (in the model's objective), with a
    heartbeat in between; with `report.log`, CP-SAT's search log goes to stderr.
    """
    from ortools.sat.python import cp_model

    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = float(max(time_limit, 0.01))
    solver.parameters.random_seed = int(seed) % 2**31
    solver.parameters.num_workers = int(workers)
    solver.parameters.relative_gap_limit = solver_gap(gap)
    for key, value in (params or {}).items():
        setattr(solver.parameters, key, value)
    code = solver.solve(model) if report is None else _cpsat_reporting(solver, model, report)
    status = {
        cp_model.OPTIMAL: Status.OPTIMAL,
        cp_model.FEASIBLE: Status.FEASIBLE,
        cp_model.INFEASIBLE: Status.INFEASIBLE,
        cp_model.UNKNOWN: Status.UNKNOWN,
    }.get(code, Status.ERROR)
    return solver, status


def _cpsat_reporting(solver: Any, model: Any, report: Reporter) -> Any:
    """`solver.solve(model)` telling `report` of each solution and better bound (CP-SAT calls
    back only on changes: a heartbeat thread fills the gaps)."""
    from ortools.sat.python import cp_model

    if report.log:
        solver.parameters.log_search_progress = True
        solver.parameters.log_to_stdout = False
        solver.log_callback = lambda line: print(line, file=sys.stderr, flush=True)
    if report.fn is None:
        return solver.solve(model)

    class News(cp_model.CpSolverSolutionCallback):
        def on_solution_callback(self) -> None:
            report(self.objective_value, self.best_objective_bound)

    solver.best_bound_callback = lambda bound: report(None, bound)
    with report.ticking():
        return solver.solve(model, News())


@overload
def cpsat_bound(
    solver: Any, status: Status, *, integral: Literal[True] = True, sense: Sense = "min"
) -> int | None: ...
@overload
def cpsat_bound(
    solver: Any, status: Status, *, integral: bool, sense: Sense = "min"
) -> float | None: ...
def cpsat_bound(
    solver: Any, status: Status, *, integral: bool = True, sense: Sense = "min"
) -> float | None:
    """CP-SAT's best objective bound, rounded inward for integer objectives."""
    if status is Status.INFEASIBLE:
        return None
    b: float = solver.best_objective_bound
    if not math.isfinite(b):
        return None
    if integral:
        return math.ceil(b - 1e-6) if sense == "min" else math.floor(b + 1e-6)
    return b

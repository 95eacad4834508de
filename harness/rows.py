"""The rows of a batch: one `Row` per finished (instance, solver) pair, kept in `DIR/rows.jsonl`.

A run holds the file under an exclusive lock (`RowsFile`), appends each row whole and flushed, and
repairs a torn last write, so a crash or kill loses only the running solves and a rerun resumes.
Tables and reports are always rebuilt from these rows (`harness.tables`, `harness.report`).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import IO, Any, Protocol

from tensorplan.problems.core import write_text_atomic

log = logging.getLogger("tensorplan")

ROWS = "rows.jsonl"
LOCK = ".lock"


@dataclass(frozen=True)
class Row:
    """One finished (instance, solver) pair, from the worker to rows.jsonl, CSV and reports.

    `key` identifies the question: the instance by content (its name and a hash of the file's
    bytes) with the `capacity` asked, when one replaced the file's, so a rerun from another
    directory, or through another path (a renamed copy too), recognises finished rows, and an
    edited file or another capacity is solved again. `options` are the asked options that can
    change the answer (`tasks.asked`: the time limit, and the seed, threads and gap when the
    solver honours them); a row answers a task when key, solver and options all agree (`pair`).
    `source` names the file the row was asked for (a hash of its absolute path), so a table
    shows each file's latest question only (`current`). `runtime_s` is the solver's own time;
    `wall_s` the whole task (load, solve, verification) as the harness measured it.
    """

    instance: str
    problem: str
    solver: str
    kind: str
    status: str
    file: str
    key: str
    objective: float | None = None
    bound: float | None = None
    runtime_s: float = 0.0
    wall_s: float = 0.0
    size: int | None = None
    message: str = ""
    stats: Mapping[str, Any] = field(default_factory=dict)
    capacity: int | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    source: str = ""

    @property
    def pair(self) -> tuple[str, str, str]:
        """What the row answers: (question, solver, options asked)."""
        return (self.key, self.solver, options_text(self.options))

    @property
    def origin(self) -> str:
        """The file the row was asked for (rows written before sources were kept: its name)."""
        return self.source or self.file

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)} | {
            "stats": dict(self.stats),
            "options": dict(self.options),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Row:
        """A row read back from rows.jsonl; raises KeyError/TypeError on a foreign line."""
        names = {f.name for f in fields(cls)}
        row = cls(**{k: v for k, v in data.items() if k in names})
        texts = (row.instance, row.problem, row.solver, row.kind, row.status, row.file, row.key)
        numbers = (row.runtime_s, row.wall_s)
        maybe = (row.objective, row.bound, row.size, row.capacity)
        if not (
            row.key
            and all(isinstance(t, str) for t in (*texts, row.message, row.source))
            and all(_number(x) for x in numbers)
            and all(x is None or _number(x) for x in maybe)
            and isinstance(row.options, Mapping)
            and isinstance(row.stats, Mapping)
        ):
            raise TypeError("not a row")
        return row


def _number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def options_text(options: Mapping[str, Any]) -> str:
    """Asked options as one canonical string: `time_limit=10.0 seed=0` (sorted by name)."""
    return " ".join(f"{k}={options[k]!r}" for k in sorted(options))


def current(rows: Iterable[Row]) -> list[Row]:
    """The rows a table shows: for each file, only rows of the latest question asked of it (an
    edited file's older version, or an earlier capacity, drops out); for each question and
    solver, the latest answer. Rows are in log order, so "latest" is the last one written; a
    rerun that reuses an older row writes it again (`refreshed`) so that it is the latest."""
    rows = list(rows)
    asked = {r.origin: r.key for r in rows}
    shown = {(r.key, r.solver): r for r in rows if asked[r.origin] == r.key}
    return list(shown.values())


class Asked(Protocol):
    """What `refreshed` needs of a task (or of a bad file's row): which file asked what."""

    @property
    def key(self) -> str: ...
    @property
    def solver(self) -> str: ...
    @property
    def file(self) -> str: ...
    @property
    def pair(self) -> tuple[str, str, str]: ...
    @property
    def origin(self) -> str: ...


def refreshed(rows: Sequence[Row], reused: Iterable[Asked]) -> list[Row]:
    """Copies of finished rows to write again so that `current` shows what this run asked.

    A task answered by an earlier row is not solved again; but when that row is no longer the
    one a table shows (the file was asked another question since, or the same question was
    asked with other options), a copy naming this task's file is appended to the log."""
    log = list(rows)
    done = {r.pair: r for r in log}
    asked = {r.origin: r.key for r in log}
    shown = {(r.key, r.solver): r for r in log if asked[r.origin] == r.key}
    copies: list[Row] = []
    for task in reused:
        row = shown.get((task.key, task.solver))
        if row is not None and row.pair == task.pair and asked.get(task.origin) in (None, task.key):
            continue
        copy = replace(done[task.pair], file=task.file, source=task.origin)
        copies.append(copy)
        log.append(copy)
        asked = {r.origin: r.key for r in log}
        shown = {(r.key, r.solver): r for r in log if asked[r.origin] == r.key}
    return copies


def read_rows(outdir: Path) -> list[Row]:
    """Rows recorded so far. A torn line (a kill mid-write) is skipped: its task is pending again
    and is solved anew by the next run, which also repairs the file (see `RowsFile`)."""
    return RowsFile.parse(Path(outdir) / ROWS)[0]


def scan(path: Path) -> tuple[list[Row], list[int], bool]:
    """(rows, numbers of the non-blank lines that are not rows, whether the text does not end
    with a newline) of a rows file; nothing when there is no file."""
    if not path.exists():
        return [], [], False
    rows: list[Row] = []
    bad: list[int] = []
    text = path.read_text(encoding="utf-8", errors="replace")
    for number, line in enumerate(text.splitlines(), start=1):
        try:
            rows.append(Row.from_json(json.loads(line)))
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
            if line.strip():
                bad.append(number)
    return rows, bad, bool(text) and not text.endswith("\n")


def line_ranges(numbers: Sequence[int], most: int = 8) -> str:
    """`[1, 2, 3, 7]` as "1-3, 7" (at most `most` ranges, then "...")."""
    spans: list[list[int]] = []
    for n in numbers:
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    text = [str(a) if a == b else f"{a}-{b}" for a, b in spans[:most]]
    return ", ".join(text) + (", ..." if len(spans) > most else "")


_LOCKS: set[int] = set()  # descriptors of the output-directory locks this process holds


def close_inherited_locks() -> None:
    """In a forked child: close the parent's lock descriptors. A flock belongs to the open file,
    which a child shares, so a worker outliving a killed run would keep its directory locked."""
    for fd in list(_LOCKS):
        with contextlib.suppress(OSError):
            os.close(fd)
    _LOCKS.clear()


class RowsFile:
    """rows.jsonl of one output directory, held under an exclusive lock while a run writes it.

    Opening it takes `DIR/.lock` (a second run into the same directory fails at once, naming
    the holder) and repairs the file if its last write was torn, so that the next row never
    glues onto a fragment. Each row is written whole and flushed. The file is created with its
    first row, and the lock file is removed on closing: a run that fails before it finishes
    a task leaves neither behind.
    """

    def __init__(self, outdir: Path) -> None:
        self.path = outdir / ROWS
        self._lock_path = outdir / LOCK
        self._lock = _take_lock(self._lock_path, outdir)
        _LOCKS.add(self._lock.fileno())
        self._lock.seek(0)
        self._lock.truncate()
        self._lock.write(f"pid {os.getpid()}\n")
        self._lock.flush()
        self._sink: IO[str] | None = None
        try:
            rows, damage = self.parse(self.path)
            if damage:
                log.warning("%s: repaired a torn write; unfinished tasks run again", self.path)
                self.rewrite(rows)
        except BaseException:
            self.close()
            raise

    @staticmethod
    def parse(path: Path) -> tuple[list[Row], int]:
        """(rows, damage): damage counts unreadable lines, plus one when the file does not end
        with a newline (the next append would glue onto it); either needs a repair."""
        rows, bad, unended = scan(path)
        return rows, len(bad) + unended

    def rewrite(self, rows: Iterable[Row]) -> None:
        """Replace the file's rows (atomically); appends then go to the new file."""
        write_text_atomic(self.path, "".join(json.dumps(r.to_json()) + "\n" for r in rows))
        if self._sink is not None:
            self._sink.close()
            self._sink = None

    def append(self, row: Row) -> None:
        if self._sink is None:
            self._sink = self.path.open("a", encoding="utf-8")
        self._sink.write(json.dumps(row.to_json()) + "\n")
        self._sink.flush()

    def close(self) -> None:
        if self._sink is not None:
            self._sink.close()
            self._sink = None
        if self._lock.closed:
            return
        _LOCKS.discard(self._lock.fileno())
        with contextlib.suppress(OSError):  # while still held: no other run is waiting on it
            self._lock_path.unlink()
        self._lock.close()  # releases the lock

    def __enter__(self) -> RowsFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _take_lock(path: Path, outdir: Path) -> IO[str]:
    """`path` opened and exclusively locked; RuntimeError naming the holder when another run
    has it. The lock file is removed by its holder on closing, so a lock taken on a file that
    has since been unlinked (or replaced) is let go and taken again on the new one."""
    while True:
        lock = path.open("a+", encoding="utf-8")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().strip() or "another process"
            lock.close()
            raise RuntimeError(
                f"{outdir}: another run is writing here ({holder}); wait for it or use another -o"
            ) from None
        try:
            same = os.stat(path).st_ino == os.fstat(lock.fileno()).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return lock
        lock.close()


def solution_path(out: Path, row: Row, solutions: str = "all") -> Path:
    """Where a row's solution file goes; names cannot collide across problems, files,
    questions (capacities) or asked options, and stay short whatever the instance's name.

    "all": DIR/solutions/<problem>/<instance>.<hash>.<solver>.json; "one" (the batch verb):
    DIR/<problem>/<instance>.<hash>.json, the hash being that of the row's key and options.
    """
    tag = hashlib.sha256(f"{row.key}\0{options_text(row.options)}".encode()).hexdigest()[:8]
    stem = f"{short_name(row.instance)}.{tag}"
    if solutions == "one":
        return out / _safe(row.problem) / f"{stem}.json"
    return out / "solutions" / _safe(row.problem) / f"{stem}.{short_name(row.solver)}.json"


NAME_MAX = 80
"""Longest piece of a file name taken from an instance or solver name: names of any length
then fit the file system's 255 bytes with room for the hash, the solver and a temp prefix."""


def short_name(name: str) -> str:
    """`name` made safe for a file name (other characters become `_`); a name longer than
    `NAME_MAX` is cut and ends in a hash of the whole, so distinct names stay distinct."""
    safe = _safe(name)
    if len(safe) <= NAME_MAX:
        return safe
    return f"{safe[: NAME_MAX - 9]}~{hashlib.sha256(name.encode()).hexdigest()[:8]}"


def _safe(name: str) -> str:
    return (
        "".join(c if c.isascii() and (c.isalnum() or c in "-_.") else "_" for c in name).lstrip(".")
        or "instance"
    )

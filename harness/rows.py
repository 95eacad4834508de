"""The rows of a batch: one `Row` per finished (instance, solver) pair, kept in `DIR/rows.jsonl`.

A run holds the file under an exclusive lock (`RowsFile`), appends each row whole and flushed, and
repairs a torn last write, so a crash or kill loses only the running solves and a rerun resumes.
Tables and reports are always rebuilt from these rows (`harness.tables`, `harness.report`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import IO, Any

from tensorplan.problems.core import write_text_atomic

log = logging.getLogger("tensorplan")

ROWS = "rows.jsonl"
LOCK = ".lock"


@dataclass(frozen=True)
class Row:
    """One finished (instance, solver) pair, from the worker to rows.jsonl, CSV and reports.

    `key` identifies the instance by content (its name and a hash of the file's bytes), so a
    rerun from another directory, or through another path, recognises finished pairs, and an
    edited file is solved again. `runtime_s` is the solver's own time; `wall_s` the whole task
    (load, solve, verification) as the harness measured it.
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

    @property
    def pair(self) -> tuple[str, str]:
        return (self.key, self.solver)

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)} | {"stats": dict(self.stats)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Row:
        """A row read back from rows.jsonl; raises KeyError/TypeError on a foreign line."""
        names = {f.name for f in fields(cls)}
        row = cls(**{k: v for k, v in data.items() if k in names})
        if not (isinstance(row.key, str) and isinstance(row.solver, str) and row.key):
            raise TypeError("not a row")
        return row


def read_rows(outdir: Path) -> list[Row]:
    """Rows recorded so far. A torn line (a kill mid-write) is skipped: its task is pending again
    and is solved anew by the next run, which also repairs the file (see `RowsFile`)."""
    return RowsFile.parse(Path(outdir) / ROWS)[0]


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
    glues onto a fragment. Each row is written whole and flushed.
    """

    def __init__(self, outdir: Path) -> None:
        self.path = outdir / ROWS
        self._lock = (outdir / LOCK).open("a+", encoding="utf-8")
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock.seek(0)
            holder = self._lock.read().strip() or "another process"
            self._lock.close()
            raise RuntimeError(
                f"{outdir}: another run is writing here ({holder}); wait for it or use another -o"
            ) from None
        _LOCKS.add(self._lock.fileno())
        self._lock.seek(0)
        self._lock.truncate()
        self._lock.write(f"pid {os.getpid()}\n")
        self._lock.flush()
        self._sink: IO[str] | None = None
        rows, damage = self.parse(self.path)
        if damage:
            log.warning("%s: repaired a torn write; unfinished tasks run again", self.path)
            self.rewrite(rows)
        self._sink = self.path.open("a", encoding="utf-8")

    @staticmethod
    def parse(path: Path) -> tuple[list[Row], int]:
        """(rows, damage): damage counts unreadable lines, plus one when the file does not end
        with a newline (the next append would glue onto it); either needs a repair."""
        if not path.exists():
            return [], 0
        rows, damage = [], 0
        text = path.read_text(encoding="utf-8", errors="replace")
        for line in text.splitlines():
            try:
                rows.append(Row.from_json(json.loads(line)))
            except (json.JSONDecodeError, TypeError, KeyError, AttributeError):
                damage += bool(line.strip())
        if text and not text.endswith("\n"):
            damage += 1
        return rows, damage

    def rewrite(self, rows: Iterable[Row]) -> None:
        """Replace the file's rows (atomically); appends then go to the new file."""
        write_text_atomic(self.path, "".join(json.dumps(r.to_json()) + "\n" for r in rows))
        if self._sink is not None:
            self._sink.close()
            self._sink = self.path.open("a", encoding="utf-8")

    def append(self, row: Row) -> None:
        assert self._sink is not None
        self._sink.write(json.dumps(row.to_json()) + "\n")
        self._sink.flush()

    def close(self) -> None:
        if self._sink is not None:
            self._sink.close()
        _LOCKS.discard(self._lock.fileno())
        self._lock.close()  # releases the lock

    def __enter__(self) -> RowsFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def solution_path(
    out: Path, problem: str, instance: str, key: str, solver: str, solutions: str = "all"
) -> Path:
    """Where a row's solution file goes; names cannot collide across problems or files.

    "all": DIR/solutions/<problem>/<instance>.<hash>.<solver>.json; "one" (the batch verb):
    DIR/<problem>/<instance>.<hash>.json, the hash being the instance key's.
    """
    stem = f"{_safe(instance)}.{key.rpartition('@')[2][:8]}"
    if solutions == "one":
        return out / problem / f"{stem}.json"
    return out / "solutions" / problem / f"{stem}.{_safe(solver)}.json"


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name) or "instance"

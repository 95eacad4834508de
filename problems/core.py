"""What every problem shares: result type, input error, JSON field readers, problem spec.

One mechanism for all four problems: each problem module builds a `Problem` (parse, write, evaluate,
check, bound) and each solver module lists `Solver`s; the harness only ever talks to these.
"""

from __future__ import annotations

import csv
import difflib
import errno
import io
import json
import logging
import math
import numbers
import os
import stat
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar

Number = int | float
Sense = Literal["min", "max"]
Kind = Literal["exact", "heuristic"]


class Status(StrEnum):
    """Outcome of a solve. `optimal` only when proven; `unknown` means no solution and no proof."""

    OPTIMAL = "optimal"
    FEASIBLE = "feasible"
    INFEASIBLE = "infeasible"
    UNKNOWN = "unknown"
    ERROR = "error"

    @property
    def has_solution(self) -> bool:
        return self in (Status.OPTIMAL, Status.FEASIBLE)


@dataclass(frozen=True)
class Result:
    """What every solver of every problem returns.

    `bound` is the best proven bound on the optimum (lower for minimisation, upper for
    maximisation) or None; `stats` carries solver-specific figures (model size, iterations).
    """

    solver: str
    status: Status
    objective: Number | None
    bound: Number | None
    runtime_s: float
    solution: Any = None
    message: str = ""
    stats: Mapping[str, Any] = field(default_factory=dict)

    def gap(self, sense: Sense, bound: Number | None = None) -> float | None:
        """Relative excess of the objective over `bound` (default: own bound); 0 = optimal."""
        return relative_gap(self.objective, self.bound if bound is None else bound, sense)


def relative_gap(objective: Number | None, bound: Number | None, sense: Sense) -> float | None:
    """(objective - bound) / |bound| for min, mirrored for max; None when unknown."""
    if objective is None or bound is None:
        return None
    diff = objective - bound if sense == "min" else bound - objective
    diff = max(diff, 0.0)
    if diff <= 1e-9 * max(1.0, abs(bound)):
        return 0.0
    return diff / abs(bound) if bound != 0 else math.inf


class InstanceError(ValueError):
    """Malformed or inconsistent input: says which file, which field and why, in one line."""

    def __init__(self, where: str, why: str, file: str | Path | None = None) -> None:
        self.where, self.why, self.file = where, why, None if file is None else str(file)
        super().__init__(str(self))

    def __str__(self) -> str:
        head = f"{self.file}: " if self.file else ""
        return f"{head}{self.where}: {self.why}"

    def in_file(self, file: str | Path) -> InstanceError:
        """The same error, now naming the file it came from."""
        return type(self)(self.where, self.why, file)


class MismatchError(InstanceError):
    """A well-formed solution that does not fit its instance (an unknown or missing id, a wrong
    number of labels): the solution is infeasible for that instance, the file is not malformed."""


# --- JSON field readers: every parser uses these, so every message has the same shape -----------


def obj(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise InstanceError(where, f"must be an object, got {type_name(value)}")
    return value


def req(data: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in data:
        raise InstanceError(join(where, key), "missing required field")
    return data[key]


MAX_INT = 2**62
"""Largest magnitude of any integer in an input file (sizes, times, offsets, labels): sums of a
few such numbers still fit in int64, and checkers add them in exact Python integers anyway."""

MAX_TOTAL = 2**53
"""Largest total an instance may add up to: allocation's sizes together (the trivial bound on the
peak), schedule's objective with every alloc live throughout. The MIP back-ends (HiGHS, CBC)
compute in doubles, exact for integers up to 2**53 only (beyond, they round and answer wrongly),
as are many JSON readers; and the sums, doubled offsets and products of such totals that solvers
and the omnimalloc peers form stay well inside int64. Larger inputs are refused when the instance
is built."""

MAX_EXACT_FLOAT = 2**53
"""A float written for an integer (`4.0`) is accepted only up to this magnitude: beyond it a float
no longer names one integer exactly (`1e30` is not the integer the author meant)."""


def integer(value: Any, where: str, *, minimum: int | None = None) -> int:
    """An integer field: a JSON integer, or a float that is exactly an integer up to 2**53;
    at most `MAX_INT` (2**62) in magnitude."""
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer() and abs(value) <= MAX_EXACT_FLOAT:
            value = int(value)
        elif isinstance(value, float) and math.isfinite(value) and value.is_integer():
            raise InstanceError(
                where,
                f"must be an integer, got float {value!r}: floats are exact integers only up to "
                "2**53; write the integer itself",
            )
        else:
            raise InstanceError(where, f"must be an integer, got {show(value)}")
    if abs(value) > MAX_INT:
        raise InstanceError(where, f"must be at most 2**62 = {MAX_INT} in magnitude, got {value}")
    if minimum is not None and value < minimum:
        raise InstanceError(where, f"must be >= {minimum}, got {value}")
    return value


def known_fields(data: Mapping[str, Any], where: str, allowed: Iterable[str]) -> Mapping[str, Any]:
    """Reject a field of `data` outside `allowed` (a misspelling would otherwise be ignored),
    naming it and the nearest valid field; returns `data`."""
    names = tuple(allowed)
    for key in data:
        if key not in names:
            near = difflib.get_close_matches(str(key), names, n=1, cutoff=0.6)
            hint = f" (did you mean {near[0]!r}?)" if near else f"; known: {', '.join(names)}"
            raise InstanceError(join(where, str(key)), f"unknown field {str(key)!r}{hint}")
    return data


def positive_int(value: Any, where: str) -> int:
    value = integer(value, where)
    if value <= 0:
        raise InstanceError(where, f"must be a positive integer, got {value}")
    return value


def number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InstanceError(where, f"must be a finite number, got {show(value)}")
    return float(value)


def string(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise InstanceError(where, f"must be a non-empty string, got {show(value)}")
    return value


def ident(value: Any, where: str) -> str:
    """Ids may be strings or integers in JSON; inside they are always strings."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise InstanceError(where, f"must be a string or integer id, got {show(value)}")
    return str(value)


def array(value: Any, where: str) -> Sequence[Any]:
    if not isinstance(value, list):
        raise InstanceError(where, f"must be a list, got {type_name(value)}")
    return value


def unique_ids(ids: Sequence[str], where: str, what: str = "id") -> None:
    seen: set[str] = set()
    for i, x in enumerate(ids):
        if x in seen:
            raise InstanceError(f"{where}[{i}].{what}", f"duplicate {what} {x!r}")
        seen.add(x)


def join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def type_name(value: Any) -> str:
    return {dict: "object", list: "list", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), type(value).__name__
    )


def show(value: Any) -> str:
    text = json.dumps(value) if isinstance(value, str | int | float | bool | type(None)) else None
    return f"{type_name(value)} {text}" if text is not None else type_name(value)


def check_problem_field(data: Mapping[str, Any], expected: str) -> str | None:
    """Validate the top-level `problem` field and return the optional `name`."""
    got = req(data, "problem", "")
    if got != expected:
        raise InstanceError("problem", f"expected {expected!r}, got {show(got)}")
    name = data.get("name")
    return None if name is None else string(name, "name")


def solution_field(doc: Mapping[str, Any], problem: str, instance: str | None) -> Any:
    """The `solution` field of a solution document (the shape `solve -o` writes) to be read
    against an instance of `problem` named `instance`.

    A document that says it belongs to another problem is malformed for this one
    (`InstanceError`); one that names another instance is a `MismatchError`: its numbers may well
    parse (same ids), and checking them would report a wrong packing instead of the wrong file.
    Either side without a name is taken on trust."""
    got = doc.get("problem", problem)
    if got != problem:
        raise InstanceError("problem", f"solution is for {got!r}, instance is {problem!r}")
    named = doc.get("instance")
    if named is not None and not isinstance(named, str):
        raise InstanceError("instance", f"must be the instance's name, got {show(named)}")
    if named and instance and named != instance:
        raise MismatchError(
            "instance",
            f"this solution is for instance {named!r}, not {instance!r}: the solution file of "
            "another instance",
        )
    return req(doc, "solution", "")


def load_json(path: str | Path) -> Mapping[str, Any]:
    """Read a JSON object from a file; any failure is an InstanceError naming the file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise InstanceError("<file>", f"cannot read: {err.strerror or err}", path) from None
    except UnicodeDecodeError:
        raise InstanceError("<file>", "not UTF-8 text", path) from None
    if not text.strip():
        raise InstanceError("<file>", "file is empty", path)
    repeated: list[_Repeated] = []
    try:
        data = json.loads(text, object_pairs_hook=lambda pairs: _object(pairs, repeated))
    except json.JSONDecodeError as err:
        raise InstanceError(
            "<file>", f"not valid JSON ({err.msg} at line {err.lineno})", path
        ) from None
    if repeated:
        where, key = _first_repeated(data)
        raise InstanceError(
            join(where, key),
            f"key {key!r} given twice in one object (JSON readers differ on which one counts: "
            "write it once)",
            path,
        )
    if not isinstance(data, dict):
        raise InstanceError("<file>", f"top level must be an object, got {type_name(data)}", path)
    return data


class _Repeated(dict):
    """A JSON object that named some key twice, remembered so the loader can say where."""

    key: str


def _object(pairs: list[tuple[str, Any]], repeated: list[_Repeated]) -> dict[str, Any]:
    """`json.loads`' object hook: the object as a dict, marked when a key comes twice."""
    out = dict(pairs)
    if len(out) == len(pairs):
        return out
    marked = _Repeated(out)
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            marked.key = key
            break
        seen.add(key)
    repeated.append(marked)
    return marked


def _first_repeated(data: Any) -> tuple[str, str]:
    """(path of the first object in document order that repeats a key, that key)."""
    todo: list[tuple[str, Any]] = [("", data)]
    while todo:
        where, value = todo.pop()
        if isinstance(value, _Repeated):
            return where, value.key
        if isinstance(value, dict):
            todo += reversed([(join(where, str(k)), v) for k, v in value.items()])
        elif isinstance(value, list):
            todo += reversed([(f"{where}[{i}]", v) for i, v in enumerate(value)])
    raise AssertionError("a repeated key was seen but not found")


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write `text` (UTF-8) through `write_bytes_atomic`: never a half-written file, and never
    over anything but a regular file."""
    write_bytes_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path: str | Path, data: bytes) -> None:
    """Write to a temporary file beside the target, then rename it over the target: never a
    half-written file. The target is `path`, or the file a symlink at `path` points to (written
    through, the link kept); a device, FIFO, socket or directory there is refused, never
    replaced (`output_target`). Errors name `path`, never the temporary file."""
    target = output_target(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise OSError(err.errno, err.strerror, str(path)) from None
    # the temporary name keeps a short prefix of the target's: any target name fits
    try:
        fd, tmp = tempfile.mkstemp(
            dir=target.parent, prefix=f".{target.name[:TEMP_PREFIX]}.", suffix=".tmp"
        )
    except OSError as err:
        raise OSError(err.errno, err.strerror, str(path)) from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give what open() would
        os.replace(tmp, target)
    except OSError as err:
        Path(tmp).unlink(missing_ok=True)
        if err.filename in (tmp, str(target)) or err.filename2 == str(target):
            raise OSError(err.errno, err.strerror, str(path)) from None
        raise
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


TEMP_PREFIX = 64
"""Characters of the target's name a temporary file's name starts with."""


def output_target(path: str | Path) -> Path:
    """The file an output written to `path` replaces: `path` itself, or the file a symlink there
    points to. Raises OSError naming `path` when that is anything but a regular file or nothing
    (a device such as /dev/null, a FIFO, a socket, a directory): outputs never replace those."""
    path = Path(path)
    target = path
    if path.is_symlink():
        try:
            target = path.resolve()
        except (OSError, RuntimeError) as err:  # a symlink loop
            raise OSError(errno.ELOOP, f"cannot follow the symlink: {err}", str(path)) from None
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        return target
    except OSError as err:
        raise OSError(err.errno, err.strerror, str(path)) from None
    if not stat.S_ISREG(mode):
        what = _FILE_KINDS.get(stat.S_IFMT(mode), "not a regular file")
        raise OSError(
            errno.EEXIST,
            f"{what} is there: an output replaces only a regular file, choose another path",
            str(path),
        )
    return target


_FILE_KINDS = {
    stat.S_IFDIR: "a directory",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFIFO: "a FIFO (named pipe)",
    stat.S_IFSOCK: "a socket",
}


def check_output(path: str | Path) -> Path:
    """Check, before any work, that an output can be written to `path`: what is there may be
    replaced (`output_target`), and a file can be created in its directory (or in the nearest
    existing parent, when the directories are still to be made). Returns the target; raises
    OSError naming `path`. A solve whose `-o` would fail fails before it starts."""
    target = output_target(path)
    parent = target.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    try:
        if not parent.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, "not a directory", str(parent))
        fd, probe = tempfile.mkstemp(dir=parent, prefix=".tensorplan-probe-", suffix=".tmp")
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        raise OSError(err.errno, err.strerror, str(path)) from None
    return target


def write_csv_atomic(
    path: str | Path, rows: Sequence[Mapping[str, object]], fields: Sequence[str] | None = None
) -> None:
    """Rows as CSV (columns `fields`, else the first row's keys; other keys are left out),
    written through `write_text_atomic`."""
    buf = io.StringIO()
    cols = list(fields) if fields is not None else list(rows[0]) if rows else []
    w = csv.DictWriter(buf, fieldnames=cols, extrasaction="ignore")
    w.writeheader()
    w.writerows(rows)
    write_text_atomic(path, buf.getvalue())


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_json_atomic(path: str | Path, data: Any) -> None:
    write_text_atomic(path, json.dumps(data, indent=1) + "\n")


def write_instance_files(
    outdir: str | Path,
    docs: Iterable[Mapping[str, Any]],
    dumps: Callable[[Mapping[str, Any]], str] | None = None,
) -> list[Path]:
    """Write each instance document to `outdir/<name>.json` (atomically); returns the paths.

    Every generator's shipped set goes through here, so the files look alike everywhere.
    """
    paths = []
    for doc in docs:
        path = Path(outdir) / f"{doc['name']}.json"
        write_text_atomic(path, dumps(doc) if dumps else json.dumps(doc, indent=1) + "\n")
        paths.append(path)
    return paths


# --- specs the harness dispatches on -------------------------------------------------------------


@dataclass(frozen=True)
class Problem:
    """Everything the harness needs to know about one problem; built once per problem module.

    `bound` is a cheap proven bound on the optimum (lower for min, upper for max) or None.
    `metrics`, when given, measures a verified solution (e.g. loops run, elements moved) and the
    harness reports those figures beside the objective. `check` returns named violations (empty
    when feasible) and never raises on a well-typed solution; `evaluate` assumes feasibility.
    """

    name: str
    sense: Sense
    instance_type: type
    parse_instance: Callable[[Mapping[str, Any]], Any]
    instance_to_json: Callable[[Any], dict[str, Any]]
    parse_solution: Callable[[Mapping[str, Any], Any], Any]
    solution_to_json: Callable[[Any, Any], dict[str, Any]]  # (instance, solution)
    evaluate: Callable[[Any, Any], Number]
    check: Callable[[Any, Any], list[str]]
    bound: Callable[[Any], Number | None]
    size: Callable[[Any], int]
    metrics: Callable[[Any, Any], Mapping[str, Number]] | None = None  # extra figures per solution
    features: Callable[[Any], frozenset[str]] = lambda _: frozenset()
    """What an instance asks beyond the problem's plain form (allocation: `conflicts`, concurrent
    lifetimes). A solver runs it only when its `supports` has every one; else it is `unknown`."""

    def better(self, a: Number, b: Number) -> bool:
        """True when objective `a` is strictly better than `b` for this problem's sense."""
        return a < b if self.sense == "min" else a > b

    def stronger_bound(self, a: Number | None, b: Number | None) -> Number | None:
        """The stronger of two proven bounds (larger lower bound, or smaller upper bound)."""
        return stronger_bound(self.sense, a, b)


def stronger_bound(sense: Sense, a: Number | None, b: Number | None) -> Number | None:
    """The stronger of two proven bounds for `sense`; None stands for no bound."""
    if a is None or b is None:
        return a if b is None else b
    return max(a, b) if sense == "min" else min(a, b)


OPTIONS: tuple[str, ...] = ("time_limit", "seed", "threads", "gap", "hint", "capacity")
"""What a solver may honour: the fields of `Options`, plus `capacity` (it respects the instance's
capacity, e.g. allocation's memory size, and says `infeasible` only when it proved so)."""


@dataclass(frozen=True)
class Options:
    """What a caller may ask of any solver; each `Solver` declares which of these it honours.

    `time_limit` is the budget for the whole solve (set-up, search, the caller's verification);
    `gap` lets an exact solver stop once its solution is proven within that relative gap;
    `hint` is a solution to start from (warm start / hint), ignored when infeasible;
    `progress` receives the solve's live progress (see `Reporter`), `log` shows the back-end's.
    """

    time_limit: float = 10.0
    seed: int = 0
    threads: int = 1
    gap: float = 0.0
    hint: Any = None
    progress: Callable[[Progress], None] | None = field(default=None, compare=False, repr=False)
    log: bool = field(default=False, compare=False, repr=False)
    """`progress` is called with a `Progress` while the solve runs (through a `Reporter`);
    `log` passes the back-end's own log (CP-SAT, HiGHS, CBC) through to stderr. Neither is part
    of the question: both are left out of equality, hashing and the rows' keys."""

    def __post_init__(self) -> None:
        if not (_real(self.time_limit) and math.isfinite(self.time_limit) and self.time_limit > 0):
            raise ValueError(
                f"time limit must be a positive number of seconds, got {self.time_limit!r}"
            )
        if not (_whole(self.seed) and 0 <= self.seed <= MAX_SEED):
            raise ValueError(
                f"seed must be an integer in [0, 2**31 - 1 = {MAX_SEED}] (the solvers' random "
                f"seed range), got {self.seed!r}"
            )
        if not (_whole(self.threads) and self.threads >= 1):
            raise ValueError(f"threads must be an integer >= 1, got {self.threads!r}")
        if not (_real(self.gap) and math.isfinite(self.gap) and 0 <= self.gap < 1):
            raise ValueError(f"gap must be a relative gap in [0, 1), got {self.gap!r}")


MAX_SEED = 2**31 - 1
"""The largest seed `Options` takes: CP-SAT's and HiGHS's random seeds are 32-bit signed."""


def _whole(value: Any) -> bool:
    """An integer (Python or numpy), not a bool: `True` is no seed."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _real(value: Any) -> bool:
    """A real number (integer or float, Python or numpy), not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


@dataclass(frozen=True)
class Solver:
    """One solver of one problem, declared once: name, kind, what it does, the function, and the
    options it honours. Every `run` has the same signature: run(instance, Options) -> Result."""

    name: str
    kind: Kind
    run: Callable[[Any, Options], Result]
    summary: str
    honours: frozenset[str] = frozenset()
    supports: frozenset[str] = frozenset()
    """The instance features (`Problem.features`) this solver handles, e.g. "conflicts"."""
    warm: Callable[[], object] | None = None
    """Builds (or loads from numba's cache) compiled kernels that a solve of a tiny instance
    does not reach, for `tensorplan warm` and the harness's warm-up."""

    def __post_init__(self) -> None:
        unknown = set(self.honours) - set(OPTIONS)
        if unknown:
            raise ValueError(f"solver {self.name!r} declares unknown options {sorted(unknown)}")
        object.__setattr__(self, "honours", frozenset(self.honours))


REFUSED = " does not take "
"""In a refusal's message (`refusal`): how reports tell a solver that does not take an instance
feature from one that ran and found nothing."""


def refusal(solver: str, missing: frozenset[str], others: list[str]) -> str:
    """The message of a solver's `unknown` for an instance asking features it does not take."""
    them = ", ".join(others) or "none"
    return f"{solver}{REFUSED}{', '.join(sorted(missing))} (solvers that do: {them})"


def refused(status: object, message: object) -> bool:
    """True for a result row that is a refusal (see `refusal`), not a solve that found nothing."""
    return str(status) == "unknown" and REFUSED in str(message)


EXACT = frozenset({"time_limit", "seed", "threads", "gap", "hint"})
"""What an exact model on CP-SAT / HiGHS honours (CBC adds nothing: it takes the same)."""


@contextmanager
def stopwatch() -> Iterator[Callable[[], float]]:
    """`with stopwatch() as elapsed:` ... `elapsed()` gives seconds since the block started."""
    start = time.perf_counter()
    yield lambda: time.perf_counter() - start


def heuristic_result(
    name: str,
    objective: Number,
    solution: Any,
    runtime_s: float,
    *,
    message: str = "",
    **stats: Any,
) -> Result:
    """Result of a heuristic that found a solution: feasible, no proven bound of its own."""
    return Result(name, Status.FEASIBLE, objective, None, runtime_s, solution, message, stats)


def kernel_cached(kernel: Any) -> bool:
    """Whether numba's on-disk cache holds the compiled `kernel` (a `cache=True` dispatcher),
    so that its first call loads it instead of compiling: solvers decide by it whether their
    time allows the first call. False when numba lacks these internals (assume a compile)."""
    try:
        return os.path.exists(kernel._cache._cache_file._index_path)
    except AttributeError:
        return False


def loadable(kernel: Any) -> bool:
    """Whether a first call of `kernel` (a numba dispatcher) will not compile: it is compiled in
    this process already, or in numba's on-disk cache (`kernel_cached`)."""
    return bool(kernel.signatures) or kernel_cached(kernel)


V = TypeVar("V")


class Kept(Generic[V]):
    """Values worked out from objects (instances), each kept while its object lives: solvers
    run one after another on the same instance and ask for the same arrays or bounds. Keyed by
    identity (frozen instances hash by value, which is slow and would merge equal ones); an
    entry goes when its object does."""

    def __init__(self) -> None:
        self._entries: dict[int, tuple[weakref.ref[Any], V]] = {}

    def peek(self, obj: object) -> tuple[V] | None:
        """(the value kept for `obj`,), or None when there is none."""
        hit = self._entries.get(id(obj))
        return None if hit is None or hit[0]() is not obj else (hit[1],)

    def put(self, obj: object, value: V) -> V:
        """Keep `value` for `obj` (replacing what was kept) and return it."""
        key = id(obj)
        self._entries[key] = (weakref.ref(obj, lambda _: self._entries.pop(key, None)), value)
        return value

    def get(self, obj: object, make: Callable[[Any], V]) -> V:
        """The value kept for `obj`, or `make(obj)`, kept."""
        hit = self.peek(obj)
        return self.put(obj, make(obj)) if hit is None else hit[0]

    def clear(self) -> None:
        """Forget every value (benchmarks that time the work itself)."""
        self._entries.clear()


def compiled_within(
    kernels: Sequence[Any], seconds: float, load_s: float, compile_s: float, warm: Callable[[], Any]
) -> bool:
    """Whether the compiled `kernels` can be called within `seconds`: loaded already, or `warm`
    (which loads them from numba's cache, or compiles them) fits in the time, `load_s` or
    `compile_s` as `kernel_cached` says; it is then run. Solvers ask before a first call, so that
    a compilation never eats their limit (they go without, or fall back)."""
    if all(k.signatures for k in kernels):
        return True
    if seconds < (load_s if kernel_cached(kernels[0]) else compile_s):
        return False
    warm()
    return True


# --- live progress: one callback for every solver ------------------------------------------------


@dataclass(frozen=True)
class Progress:
    """Where a running solve stands: its best objective so far (None: nothing found yet), its
    best proven bound (None: none), seconds since it started. `final` marks the report the
    harness sends once the result is verified."""

    solver: str
    elapsed_s: float
    objective: Number | None
    bound: Number | None
    sense: Sense = "min"
    final: bool = False

    @property
    def gap(self) -> float | None:
        return relative_gap(self.objective, self.bound, self.sense)

    def line(self) -> str:
        """One line for a terminal or a log: `cpsat 3.2 s: best 1234, bound 1200, gap 2.8%`."""
        best, bound, gap = _figure(self.objective), _figure(self.bound), self.gap
        shown = "-" if gap is None else "inf" if math.isinf(gap) else f"{gap:.2%}"
        return f"{self.solver} {self.elapsed_s:.1f} s: best {best}, bound {bound}, gap {shown}"


def _figure(value: Number | None) -> str:
    """A reported value in full when whole (`2387696`), else to 7 significant digits."""
    if value is None:
        return "-"
    if math.isfinite(value) and value == round(value) and abs(value) < 1e15:
        return str(round(value))
    return f"{value:.7g}"


REPORT_S = 1.0
"""A solver's latest state is sent at least this often while it keeps calling its `Reporter`
(or while `Reporter.ticking` runs): the heartbeat of a live line."""

MIN_REPORT_S = 0.2
"""Improvements are sent at most this often; the last one is never lost (sent by the next
heartbeat or the final report)."""

_log = logging.getLogger("tensorplan")


class Reporter:
    """A solver's side of `Options.progress`: call it with each new incumbent and bound.

    It keeps the best of each (by `sense`), sends a `Progress` when something improved (at most
    every `MIN_REPORT_S`) or when `REPORT_S` passed; `force=True` sends what is new at once (a
    solver's last word: `result`). Cheap when nobody listens (no callback: it returns at once),
    thread-safe, and it never raises into the solver: a failing callback is logged, dropped."""

    def __init__(
        self,
        opts: Options,
        solver: str,
        sense: Sense = "min",
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.fn = opts.progress
        self.log = opts.log
        self.solver, self.sense = solver, sense
        self.clock = clock
        self.start = clock()
        self.objective: Number | None = None
        self.bound: Number | None = None
        self.sent_at = -math.inf
        self.pending = False
        self.sent = 0
        self.shift = 0.0
        self._lock = threading.Lock()

    def __call__(
        self, objective: Number | None = None, bound: Number | None = None, *, force: bool = False
    ) -> None:
        if self.fn is None:
            return
        if self.shift:
            objective = None if objective is None else objective - self.shift
            bound = None if bound is None else bound - self.shift
        with self._lock:
            improved = self._keep(objective, bound)
            now = self.clock()
            since = now - self.sent_at
            waiting = improved or self.pending
            if (
                (force and (waiting or not self.sent))
                or since >= REPORT_S
                or (waiting and since >= MIN_REPORT_S)
            ):
                self._send(now)
            else:
                self.pending = self.pending or improved

    def result(self, res: Result) -> Result:
        """Send `res`'s objective and bound at once (unless nothing is new since a report) and
        return it: a solver's last report."""
        self(res.objective, res.bound, force=True)
        return res

    @contextmanager
    def shifted(self, constant: float) -> Iterator[Reporter]:
        """For the block, values reported are a model's objective, `constant` above ours."""
        self.shift = constant
        try:
            yield self
        finally:
            self.shift = 0.0

    def tick(self) -> None:
        """Send the latest state if an improvement waits or the heartbeat is due."""
        self(None, None)

    @contextmanager
    def ticking(self) -> Iterator[Reporter]:
        """A heartbeat thread for the block (a native solver that calls back only on changes:
        CP-SAT); none when nobody listens."""
        if self.fn is None:
            yield self
            return
        stop = threading.Event()

        def beat() -> None:
            while not stop.wait(REPORT_S / 4):
                self.tick()

        thread = threading.Thread(target=beat, name="tensorplan-progress", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            stop.set()
            thread.join()

    def _keep(self, objective: Number | None, bound: Number | None) -> bool:
        better = objective is not None and (
            self.objective is None
            or (objective < self.objective if self.sense == "min" else objective > self.objective)
        )
        if better:
            self.objective = objective
        stronger = bound is not None and stronger_bound(self.sense, self.bound, bound) != self.bound
        if stronger:
            self.bound = bound
        return better or stronger

    def _send(self, now: float) -> None:
        fn = self.fn
        if fn is None:
            return
        self.sent_at, self.pending = now, False
        self.sent += 1
        try:
            fn(Progress(self.solver, now - self.start, self.objective, self.bound, self.sense))
        except Exception as err:  # a listener's bug must not stop the solve
            _log.warning("progress callback failed, dropped: %s: %s", type(err).__name__, err)
            self.fn = None

"""The `tensorplan` command: solve, check, solvers, compare, batch, report, import, plan, generate.

Exit codes: 0 success; 1 a checked solution is infeasible (or not a solution of that instance),
a solve found nothing, or a batch row has status error (bad file, crash, killed, rejected
solution); 2 bad input (printed as one line: `error: FILE: FIELD: why`), bad arguments
included; 130 interrupted. `CODES` says it per verb, as each verb's --help does.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import re
import sys
import textwrap
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, NoReturn

from tensorplan.harness import registry
from tensorplan.harness.run import (
    check,
    load_instance,
    load_solution,
    solution_document,
    solve,
    with_capacity,
    write_json_atomic,
)
from tensorplan.problems.core import (
    MAX_INT,
    MAX_SEED,
    InstanceError,
    MismatchError,
    Options,
    Status,
    refused,
)

log = logging.getLogger("tensorplan")

EXIT = "exit codes:"
CODES = {
    "solve": "0 solved (optimal, feasible, or proven infeasible); 1 no solution (unknown, error); "
    "2 bad input; 130 interrupted",
    "check": "0 feasible; 1 infeasible, or a solution of another instance; 2 bad input",
    "solvers": "0",
    "compare": "0 every task ended (an `unknown` row included); 1 a row is an error (bad "
    "file, crash, killed, rejected solution); 2 bad input, or DIR is in use; 130 interrupted "
    "(finished rows kept)",
    "batch": "0 every task ended (an `unknown` row included); 1 a row is an error (bad "
    "file, crash, killed, rejected solution); 2 bad input, or DIR is in use; 130 interrupted "
    "(finished rows kept)",
    "report": "0 written; 2 not a compare/batch directory",
    "import": "0 written; 2 bad input",
    "plan": "0 written; 2 bad input",
    "generate": "0 written (or listed); 2 bad input",
    "warm": "0 every solver ran; 1 a solver failed on its tiny instance",
}
"""The exit codes of every verb, shown in its --help and the top-level one (README too)."""

EXAMPLES = {
    "solve": (
        "one instance, one solver (default: the problem's first exact one)",
        "tensorplan solve instances/allocation/seed-example.json --solver ffd -o s.json",
        "ffd: optimal objective=37 bound=37 gap=0.00% time=0.000s (optimal by bound)",
    ),
    "check": (
        "verify a solution file with the problem's independent checker",
        "tensorplan check instances/allocation/seed-example.json s.json",
        "feasible, peak 37",
    ),
    "solvers": (
        "every problem's solvers, their kind and the options each honours",
        "tensorplan solvers",
        "ffd  heuristic  first-fit decreasing by size (the seed's ...) [no options]",
    ),
    "compare": (
        "every solver (or --solvers) on every instance, in parallel; a report",
        "tensorplan compare instances/allocation --solvers ffd,bb --time-limit 5 -o cmp",
        "(a table per problem) report: cmp/report.md, cmp/report.html, cmp/results.csv",
    ),
    "batch": (
        "one solver on every instance, a solution file each",
        "tensorplan batch instances/schedule --solver shift --time-limit 2 -o sched",
        "19 results in sched/results.csv",
    ),
    "report": (
        "rebuild report.md and report.html of a compare or batch directory",
        "tensorplan report cmp --no-plots",
        "report: cmp/report.md, cmp/report.html",
    ),
    "import": (
        "a MiniMalloc CSV, or an ONNX model, as instance files",
        "tensorplan import onnx instances/models/resnet50.onnx --dim batch=1 -o imp",
        "imp/resnet50.schedule.json imp/resnet50.allocation.json",
    ),
    "plan": (
        "an ONNX model's memory plan: op order, offsets, pictures and report",
        "tensorplan plan instances/models/resnet50.onnx --dim batch=1 -o plan",
        "resnet50: peak 9633792 (model order 9633792) -> plan/report.md",
    ),
    "generate": (
        "an instance of a generator family at any size (--list shows them all)",
        "tensorplan generate allocation --family tight --size 500 --seed 1 -o t.json",
        "allocation/tight tight-500-s1: size 504 -> t.json",
    ),
    "warm": (
        "compile every solver's kernels now (the set-up runs it)",
        "tensorplan warm --problems allocation,schedule",
        "allocation: 17 solvers ready in 1.0 s (a line per problem)",
    ),
}
"""A three-line example per verb: what it does, a command, what it prints."""


def _example(verb: str) -> str:
    what, command, prints = EXAMPLES[verb]
    return f"{verb}: {what}\n$ {command}\n  {prints}"


def _codes(verb: str, head: str) -> str:
    """The exit codes of `verb`, wrapped to 79 columns under `head`."""
    return textwrap.fill(CODES[verb], 79, initial_indent=head, subsequent_indent="    ")


class _Parser(argparse.ArgumentParser):
    """Argument errors in one line: the verb, the argument, what it takes."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class _Help(argparse.RawDescriptionHelpFormatter):
    """Examples keep their lines; every option's help ends with its default, unless the help
    already says it in words."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if not action.option_strings or action.required or "default" in text:
            return text
        if isinstance(action, argparse._StoreTrueAction):
            return f"{text} (default: off)"
        if action.default is None or action.default is argparse.SUPPRESS:
            return text
        return f"{text} (default: %(default)s)"


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tensorplan")
    except PackageNotFoundError:
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    examples = "\n".join(_example(v) for v in EXAMPLES)
    codes = "\n".join(_codes(v, f"  {v}: ") for v in CODES)
    ap = _Parser(
        prog="tensorplan",
        description="Memory planning for tensor compilers: solve, compare and check instances.",
        formatter_class=_Help,
        epilog=f"examples (what it does, a command, what it prints):\n{examples}\n\n"
        f"{EXIT}\n{codes}\n\n`tensorplan VERB --help` tells more about each verb.",
    )
    ap.add_argument("--version", action="version", version=f"tensorplan {_version()}")
    ap.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    common = _Parser(add_help=False)  # -v after the verb too
    common.add_argument(
        "-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
        help="log progress to stderr",
    )  # fmt: skip
    sub = ap.add_subparsers(dest="verb", metavar="VERB")

    def verb(name: str, text: str) -> argparse.ArgumentParser:
        return sub.add_parser(
            name,
            help=text,
            description=f"{text}.",
            epilog=f"example:\n{_example(name)}\n\n{_codes(name, f'{EXIT} ')}",
            formatter_class=_Help,
            parents=[common],
        )

    s = verb("solve", "solve one instance and print a summary line")
    s.add_argument("instance", help="instance file (.json)")
    s.add_argument(
        "--solver",
        help="solver name, see `tensorplan solvers` (default: the problem's first exact one)",
    )
    _limits(s)
    s.add_argument(
        "-o", "--output", metavar="FILE", help="write the solution here (default: not written)"
    )
    s.add_argument(
        "--log",
        action="store_true",
        help="pass the back-end's own log (CP-SAT, HiGHS, CBC) through to stderr",
    )

    c = verb("check", "verify a solution file with the independent checker")
    c.add_argument("instance", help="instance file (.json)")
    c.add_argument("solution", help="solution file (from solve -o, batch or compare)")

    verb("solvers", "list the solvers of every problem")

    for name, text in (
        ("compare", "run every solver on every instance and report"),
        ("batch", "solve every instance with one solver, a solution file each"),
    ):
        _batch_args(verb(name, text), name)

    r = verb("report", "rebuild report.md / report.html of a batch directory")
    r.add_argument("directory", help="a compare or batch output directory (holds rows.jsonl)")
    r.add_argument("--no-plots", action="store_true", help="skip the report's pictures")

    i = verb("import", "convert a public benchmark file to an instance file")
    i.add_argument(
        "format",
        choices=["minimalloc", "omnimalloc", "onnx"],
        help="minimalloc: a MiniMalloc benchmark CSV; omnimalloc: OmniMalloc's CSV (vector "
        "clocks become conflicts); onnx: a model (.onnx)",
    )
    i.add_argument("file", help="the file to convert")
    i.add_argument(
        "-o", "--output", required=True, help="output file (CSV formats) or directory (onnx)"
    )
    _model_args(i, "onnx: ")
    i.add_argument(
        "--objective",
        choices=["peak", "sum_liveness"],
        default="peak",
        help="onnx: the schedule instance's objective",
    )

    pl = verb("plan", "ONNX model -> order + offsets + report (memory plan)")
    pl.add_argument("model", help="MODEL.onnx, or a schedule instance .json")
    pl.add_argument("-o", "--output", metavar="DIR", required=True, help="output directory")
    _model_args(pl, "")
    pl.add_argument(
        "--time-limit", type=_seconds, default=10.0, metavar="SECONDS", help="seconds per plan step"
    )
    pl.add_argument("--seed", type=_seed, default=0, help="random seed of the solvers")
    pl.add_argument("--no-plots", action="store_true", help="skip the PNG pictures")

    g = verb("generate", "write an instance of a generator family (see --list)")
    g.add_argument(
        "problem",
        nargs="?",
        choices=list(registry.PROBLEMS),
        metavar="PROBLEM",
        help=f"one of {', '.join(registry.PROBLEMS)} (with --list: default all)",
    )
    g.add_argument(
        "--family", metavar="F", help="family name (default: the problem's first, see --list)"
    )
    g.add_argument(
        "--size",
        type=_at_least_one,
        metavar="N",
        help="the family's size (default: per family, see --list)",
    )
    g.add_argument("--seed", type=_seed, default=0, help="random seed of the generator")
    g.add_argument(
        "-p",
        "--param",
        action="append",
        metavar="NAME=VALUE",
        help="set a family parameter, repeatable (default: the family's, see --list)",
    )
    g.add_argument(
        "-o", "--output", metavar="FILE", help="instance file to write (required unless --list)"
    )
    g.add_argument(
        "--list", action="store_true", help="list the families, sizes and parameters, and exit"
    )
    w = verb("warm", "compile every solver's kernels now, so no first solve pays for it")
    w.add_argument(
        "--problems",
        metavar="P,...",
        help=f"comma-separated problems (default: all, {','.join(registry.PROBLEMS)})",
    )
    return ap


def _batch_args(b: argparse.ArgumentParser, name: str) -> None:
    """The arguments of `compare` and `batch`."""
    b.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="instance files, or directories searched for *.json",
    )
    if name == "compare":
        b.add_argument(
            "--solvers", metavar="A,B", help="comma-separated solver names (default: all)"
        )
    else:
        b.add_argument("--solver", required=True, help="solver name, see `tensorplan solvers`")
    _limits(b)
    b.add_argument(
        "-o", "--output", metavar="DIR", default=f"results/{name}", help="output directory"
    )
    cores = _cores()
    b.add_argument(
        "--jobs",
        type=_jobs,
        metavar="N",
        help=f"worker processes, 1 to {JOBS_PER_CORE * cores} (default: the cores, {cores})",
    )
    b.add_argument(
        "--executor",
        choices=["process", "inline", "dask"],
        default="process",
        help="where tasks run: forked workers, this process, or a Dask cluster",
    )
    b.add_argument(
        "--scheduler",
        type=_address,
        metavar="ADDRESS",
        help="the Dask scheduler, e.g. tcp://127.0.0.1:8786, for --executor dask (default: none)",
    )
    b.add_argument("--force", action="store_true", help="re-solve pairs already in DIR")
    if name == "compare":
        b.add_argument("--no-plots", action="store_true", help="skip the report's pictures")


def _model_args(p: argparse.ArgumentParser, only: str) -> None:
    p.add_argument(
        "--dim",
        action=_Dims,
        type=_dim,
        metavar="NAME=VALUE",
        help=f"{only}bind a symbolic dimension, e.g. batch=1; repeat for more (default: none)",
    )
    p.add_argument(
        "--include-inputs", action="store_true", help=f"{only}also plan graph inputs and weights"
    )
    p.add_argument(
        "--alignment",
        type=_alignment,
        default=1,
        metavar="BYTES",
        help=f"{only}every buffer's offset a multiple of this (the allocation alignment)",
    )
    p.add_argument(
        "--constants",
        choices=["exclude", "plan"],
        default="exclude",
        help=f"{only}tensors computed from weights and constants alone: folded ahead like "
        "weights (exclude, default) or planned like activations (plan)",
    )
    p.add_argument(
        "--workspace",
        type=_workspace,
        default=None,
        metavar="table|FILE.json",
        help=f"{only}add one scratch buffer per op, live at that op only: `table` is "
        "onnx_import.WORKSPACE (an assumption, not calibrated), FILE.json your own table of "
        "op kind -> bytes per output byte (`Kind/inputs`, `Kind/weights`: per input byte) "
        "(default: none)",
    )


def _limits(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--time-limit",
        type=_seconds,
        default=10.0,
        metavar="SECONDS",
        help="seconds for each whole solve",
    )
    p.add_argument("--seed", type=_seed, default=0, help="random seed of the solvers")
    p.add_argument(
        "--threads", type=_at_least_one, default=1, metavar="N", help="threads of the exact solvers"
    )
    p.add_argument(
        "--gap",
        type=_gap,
        default=0.0,
        metavar="G",
        help="an exact solver stops once proven within this relative gap, e.g. 0.05",
    )
    p.add_argument(
        "--capacity",
        type=_at_least_one,
        metavar="BYTES",
        help="allocation: any packing within BYTES, or a proof none fits (default: min peak)",
    )


def _options(args: argparse.Namespace) -> Options:
    """The solver options of `_limits`, built once for `solve`, `compare` and `batch`."""
    try:
        return Options(
            time_limit=args.time_limit, seed=args.seed, threads=args.threads, gap=args.gap
        )
    except ValueError as err:  # the argument types check first; this is the last word
        raise InstanceError("options", str(err)) from None


JOBS_PER_CORE = 4
"""`--jobs` at most this many workers per core: more only queue for the cores."""


def _cores() -> int:
    """The cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def _integer(text: str) -> int | None:
    """`text` as a plain decimal integer (ASCII digits, an optional sign), else None."""
    body = text.strip()
    digits = body[1:] if body[:1] in "+-" else body
    return int(body) if digits.isascii() and digits.isdigit() else None


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text!r}")
    return value


def _at_least_one(text: str) -> int:
    value = _integer(text)
    if value is None or not 1 <= value <= MAX_INT:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def _seed(text: str) -> int:
    value = _integer(text)
    if value is None or not 0 <= value <= MAX_SEED:
        raise argparse.ArgumentTypeError(
            f"must be an integer from 0 to 2**31 - 1 = {MAX_SEED}, got {text!r}"
        )
    return value


def _jobs(text: str) -> int:
    cores = _cores()
    value = _integer(text)
    if value is None or not 1 <= value <= JOBS_PER_CORE * cores:
        raise argparse.ArgumentTypeError(
            f"must be from 1 to {JOBS_PER_CORE * cores} ({JOBS_PER_CORE} per core, {cores} "
            f"core(s) here), got {text!r}"
        )
    return value


def _alignment(text: str) -> int:
    value = _integer(text)
    if value is None or not 1 <= value <= 2**30:
        raise argparse.ArgumentTypeError(
            f"must be a whole number of bytes from 1 to 2**30, got {text!r}"
        )
    return value


def _workspace(text: str) -> dict[str, float]:
    """`--workspace`: "table" (`onnx_import.WORKSPACE`) or a JSON file of op kind -> factor."""
    from tensorplan.harness.onnx_import import WORKSPACE

    if text == "table":
        return dict(WORKSPACE)
    try:
        table = json.loads(Path(text).read_text())
    except OSError as err:
        raise argparse.ArgumentTypeError(
            f"expected `table` or a JSON file, cannot read {text!r}: {err.strerror}"
        ) from None
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"{text} is not JSON: {err}") from None
    if not isinstance(table, dict):
        raise argparse.ArgumentTypeError(f"{text}: expected an object of op kind -> number")
    for kind, factor in table.items():
        if isinstance(factor, bool) or not isinstance(factor, int | float) or not factor >= 0:
            raise argparse.ArgumentTypeError(
                f"{text}: {kind!r} must map to a number >= 0, got {factor!r}"
            )
    return {str(k): float(v) for k, v in table.items()}


def _gap(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 <= value < 1):
        raise argparse.ArgumentTypeError(f"must be a relative gap in [0, 1), got {text!r}")
    return value


def _dim(text: str) -> tuple[str, int]:
    name, eq, value = (x.strip() for x in text.partition("="))
    number = _integer(value) if value[:1] not in "+-" else None
    if not eq or not name or number is None or not 1 <= number <= MAX_INT:
        raise argparse.ArgumentTypeError(
            f"expected NAME=VALUE with VALUE a positive integer up to 2**62, got {text!r}"
        )
    return name, number


class _Dims(argparse.Action):
    """`--dim NAME=VALUE`, repeatable, into a dict; a name given twice is refused."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        name, value = values
        dims = dict(getattr(namespace, self.dest, None) or {})
        if name in dims:
            parser.error(f"argument --dim: {name} given twice ({dims[name]} and {value})")
        dims[name] = value
        setattr(namespace, self.dest, dims)


_ADDRESS = re.compile(r"(?:[a-z][a-z0-9+.-]*://)?(?:\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})")


def _address(text: str) -> str:
    found = _ADDRESS.fullmatch(text.strip())
    if not found or not 0 < int(found.group(1)) < 65536:
        raise argparse.ArgumentTypeError(
            f"expected a scheduler address like tcp://HOST:PORT, got {text!r}"
        )
    return text.strip()


def _refuse(args: argparse.Namespace, message: str) -> NoReturn:
    """An argument error found after parsing, said like argparse's own (one line, exit 2)."""
    prog = f"tensorplan {args.verb}"
    print(f"{prog}: error: {message} (see {prog} --help)", file=sys.stderr)
    raise SystemExit(2)


def _check_args(args: argparse.Namespace) -> None:
    """What one argument alone cannot say: combinations that would be ignored silently."""
    if args.verb in ("compare", "batch"):
        if args.scheduler is not None and args.executor != "dask":
            _refuse(args, "--scheduler is for --executor dask only")
        if args.executor == "dask" and args.scheduler is None:
            _refuse(args, "--executor dask needs --scheduler ADDRESS (e.g. tcp://127.0.0.1:8786)")
    if args.verb == "import" and args.format != "onnx":
        onnx_only = [
            flag
            for flag, given in (
                ("--dim", args.dim),
                ("--include-inputs", args.include_inputs),
                ("--alignment", args.alignment != 1),
                ("--constants", args.constants != "exclude"),
                ("--workspace", args.workspace is not None),
                ("--objective", args.objective != "peak"),
            )
            if given
        ]
        if onnx_only:
            _refuse(args, f"{onnx_only[0]} is for import onnx only")
    if args.verb == "plan" and Path(args.model).suffix == ".json":
        given = [
            f
            for f, on in (
                ("--constants", args.constants != "exclude"),
                ("--workspace", args.workspace is not None),
                ("--dim", args.dim),
                ("--include-inputs", args.include_inputs),
            )
            if on
        ]
        if given:
            _refuse(
                args,
                f"{given[0]} is for ONNX models (a schedule instance is already planned input)",
            )
    if args.verb == "generate" and not args.list:
        if args.problem is None:
            _refuse(args, "which problem? (tensorplan generate --list shows the families)")
        if not args.output:
            _refuse(args, "-o FILE is required (the instance file to write)")


def _output_file(path: str) -> Path:
    """A file path `-o` may write to: not empty, not a directory."""
    if not path:
        raise InstanceError("-o", "empty path")
    out = Path(path)
    if out.is_dir():
        raise InstanceError("-o", "is a directory, not a file", out)
    from tensorplan.problems.core import check_output  # before the work: never after a solve

    check_output(out)  # OSError (exit 2, naming `path`): a device, FIFO, socket; unwritable
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.verb is None:  # bare `tensorplan`: the verbs, with examples
        parser.print_help()
        return 0
    _check_args(args)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(message)s",
        stream=sys.stderr,
    )
    try:
        with _one_glyph_warning():
            return VERBS[args.verb](args)
    except InstanceError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except (KeyError, RuntimeError) as err:
        print(f"error: {err.args[0] if err.args else err}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # e.g. `tensorplan solvers | head`: the reader left, say nothing
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as err:  # an output path that cannot be written
        where = f"{err.filename}: " if err.filename else ""
        print(f"error: {where}cannot write: {err.strerror or err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: finished results are kept", file=sys.stderr)
        return 130


@contextlib.contextmanager
def _one_glyph_warning() -> Iterator[None]:
    """Matplotlib warns once per character its font lacks, pages of it for a CJK name: say it
    once instead. Every other warning is shown as usual."""
    with warnings.catch_warnings():
        show = warnings.showwarning
        said = False

        def once(
            message: Warning | str,
            category: type[Warning],
            filename: str,
            lineno: int,
            file: Any = None,
            line: str | None = None,
        ) -> None:
            nonlocal said
            if "missing from font" not in str(message):
                show(message, category, filename, lineno, file, line)
            elif not said:
                said = True
                print(
                    "warning: the pictures' font lacks characters of some names; they show "
                    "as boxes there (the tables show them)",
                    file=sys.stderr,
                )

        warnings.showwarning = once
        yield


def cmd_solve(args: argparse.Namespace) -> int:
    from time import perf_counter

    began = perf_counter()  # the limit counts from here: loading and warming up are in it
    inst = load_instance(args.instance)
    output = None if args.output is None else _output_file(args.output)
    if args.capacity is not None:
        inst = with_capacity(inst, args.capacity)
    spec = registry.problem_of(inst)
    # the incumbent, bound and gap as the solver goes: a live line on a terminal, log lines
    # with -v (`solve_printer`); --log adds the back-end's own
    from tensorplan.harness.progress import solve_printer

    progress = solve_printer(args.verbose)
    opts = replace(_options(args), progress=progress, log=args.log)
    res = solve(inst, args.solver, opts, spec=spec, warm=True, budget_from=began)
    gap = res.gap(spec.sense)
    print(
        f"{res.solver}: {res.status} objective={_n(res.objective)} bound={_n(res.bound)} "
        f"gap={'-' if gap is None else f'{gap:.2%}'} time={res.runtime_s:.3f}s"
        + (f" ({res.message})" if res.message else "")
    )
    if "setup_s" in res.stats:
        print(
            f"note: {res.stats['setup_s']:.1f} s of one-off set-up before the solve (compiling "
            "its kernels); `tensorplan warm` does it once for every solver",
            file=sys.stderr,
        )
    if output is not None:
        write_json_atomic(output, solution_document(inst, res, spec=spec))
    return 0 if res.status in (Status.OPTIMAL, Status.FEASIBLE, Status.INFEASIBLE) else 1


def cmd_check(args: argparse.Namespace) -> int:
    inst = load_instance(args.instance)
    try:
        _, sol = load_solution(args.solution, inst)
    except MismatchError as err:  # well-formed, but not a solution of this instance
        print(f"infeasible: {err}")
        return 1
    violations, objective = check(inst, sol)
    if violations:
        print(f"infeasible: {len(violations)} violation(s)")
        for v in violations[:10]:
            print(f"  {v}")
        return 1
    print(f"feasible, {_objective_name(inst)} {_n(objective)}")
    return 0


def _objective_name(inst: Any) -> str:
    """What the objective of `inst` measures, in a word: peak, sum_liveness, cost, value."""
    name = registry.problem_of(inst).name
    return {"allocation": "peak", "fusion": "cost", "layout": "value"}.get(
        name, str(getattr(inst, "objective", "objective"))
    )


def cmd_solvers(args: argparse.Namespace) -> int:
    from tensorplan.harness.console import show, solvers_lines

    show(solvers_lines())
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    solvers = [s.strip() for s in args.solvers.split(",")] if args.solvers else None
    return _batch(args, solvers, solutions="all", report=True)


def cmd_batch(args: argparse.Namespace) -> int:
    return _batch(args, [args.solver], solutions="one", report=False)


def _batch(
    args: argparse.Namespace, solvers: list[str] | None, *, solutions: str, report: bool
) -> int:
    from tensorplan.harness.batch import default_jobs, run_batch
    from tensorplan.harness.console import results_lines, show
    from tensorplan.harness.progress import progress_printer
    from tensorplan.harness.report import write_report

    if solvers:
        known = {s for p in registry.PROBLEMS for s in registry.solvers(p)}
        unknown = [s for s in solvers if s not in known]
        if unknown:
            raise KeyError(f"unknown solver(s): {', '.join(unknown)}")
    if not args.output:
        raise InstanceError("-o", "empty path")
    update, news, close = progress_printer()
    out = Path(args.output)
    interrupted = False
    try:
        frame = run_batch(
            args.paths,
            out,
            solvers=solvers,
            options=_options(args),
            capacity=args.capacity,
            jobs=args.jobs or default_jobs(),
            executor=args.executor,
            scheduler=args.scheduler,
            force=args.force,
            solutions=solutions,
            on_row=update,
            on_news=news,
        )
    except KeyboardInterrupt:
        interrupted = True
    finally:
        close()
    from tensorplan.harness.rows import read_rows
    from tensorplan.harness.tables import table, write_csv

    frame = table(read_rows(out))
    asked = _asked(frame, args, solvers)
    if report:
        write_report(out, pictures=not args.no_plots)
        show(results_lines(asked))
        print(f"report: {out / 'report.md'}, {out / 'report.html'}, {out / 'results.csv'}")
    else:
        write_csv(frame, out / "results.csv")
        print(f"{len(frame)} results in {out / 'results.csv'}")
    if interrupted:
        raise KeyboardInterrupt
    failed = int((asked["status"] == "error").sum())
    declined = asked.apply(lambda r: refused(r["status"], r.get("message")), axis=1)
    unsolved = int(((asked["status"] == "unknown") & ~declined).sum())
    if unsolved:
        print(f"{unsolved} task(s) ended without a solution (status unknown)", file=sys.stderr)
    if declined.any():
        print(
            f"{int(declined.sum())} task(s) not run: the solver does not take the instance "
            "(n/a; see the report)",
            file=sys.stderr,
        )
    if failed:
        print(f"{failed} task(s) failed (status error)", file=sys.stderr)
    return 1 if failed else 0


def _asked(frame: Any, args: argparse.Namespace, solvers: list[str] | None) -> Any:
    """The rows of what this run was asked (its paths x solvers, with its options). DIR may hold
    rows of earlier runs: the report keeps them, the terminal and the exit code do not."""
    from tensorplan.harness.tasks import discover, make_tasks

    tasks, bad = make_tasks(discover(args.paths), solvers, _options(args), args.capacity)
    pairs = {(t.key, t.solver) for t in tasks} | {(b.key, b.solver) for b in bad}
    return frame.loc[[pair in pairs for pair in zip(frame["key"], frame["solver"], strict=True)]]


def cmd_report(args: argparse.Namespace) -> int:
    from tensorplan.harness.report import write_report

    directory = Path(args.directory)
    if not (directory / "rows.jsonl").is_file():
        raise InstanceError("<directory>", "no rows.jsonl here: not a batch directory", directory)
    md, page = write_report(directory, pictures=not args.no_plots)
    print(f"report: {md}, {page}")
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from tensorplan.harness.importers import minimalloc_csv, omnimalloc_csv
    from tensorplan.harness.run import parse_instance

    if args.format == "onnx":
        from tensorplan.harness.onnx_import import write_onnx_instances

        paths = write_onnx_instances(
            args.file,
            args.output,
            args.dim or {},
            args.include_inputs,
            args.objective,
            alignment=args.alignment,
            constants=args.constants,
            workspace=args.workspace,
        )
        print(" ".join(str(p) for p in paths))
        return 0

    data = (omnimalloc_csv if args.format == "omnimalloc" else minimalloc_csv)(args.file)
    try:
        parse_instance(data)
    except InstanceError as err:
        raise err.in_file(args.file) from None
    write_json_atomic(args.output, data)
    print(f"{len(data['buffers'])} buffers -> {args.output}")
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    from tensorplan.harness.plan import plan_model

    plan, report = plan_model(
        args.model,
        args.output,
        dims=args.dim or {},
        include_inputs=args.include_inputs,
        alignment=args.alignment,
        constants=args.constants,
        workspace=args.workspace,
        time_limit=args.time_limit,
        seed=args.seed,
        pictures=not args.no_plots,
    )
    print(f"{plan.name}: peak {plan.planned.peak} (model order {plan.model.peak}) -> {report}")
    return 0


def cmd_generate(args: argparse.Namespace) -> int:
    from tensorplan.harness.console import show, terminal_width
    from tensorplan.harness.generate import describe, family, parse_params
    from tensorplan.harness.run import parse_instance

    if args.list:
        show(describe([args.problem] if args.problem else None, terminal_width()))
        return 0
    output = _output_file(args.output)
    chosen = family(args.problem, args.family)
    inst = chosen.generate(args.size, args.seed, parse_params(args.param or []))
    spec = registry.problem(args.problem)
    doc = spec.instance_to_json(inst)
    try:  # what solve will read: a file its loader would refuse is never written
        parse_instance(doc)
    except InstanceError as err:
        raise InstanceError(f"{args.problem}/{chosen.name}", f"refused: {err}") from None
    write_json_atomic(output, doc)
    print(f"{args.problem}/{chosen.name} {inst.name}: size {spec.size(inst)} -> {output}")
    return 0


def _n(x: float | None) -> str:
    if x is None:
        return "-"
    return str(int(x)) if float(x).is_integer() else f"{x:.6g}"


def cmd_warm(args: argparse.Namespace) -> int:
    """Run every solver once on a tiny instance: numba compiles its kernels into its on-disk
    cache (or loads them when they are there), so later processes only load them."""
    from time import perf_counter

    from tensorplan.harness.run import warm_up

    names = list(registry.PROBLEMS) if args.problems is None else args.problems.split(",")
    unknown = [p for p in names if p not in registry.PROBLEMS]
    if unknown:
        raise InstanceError("--problems", f"unknown problem {unknown[0]!r}")
    failed = 0
    for problem in names:
        began = perf_counter()
        solvers = list(registry.solvers(problem))
        failed += len(warm_up(problem, solvers, hooks=True))
        print(f"{problem}: {len(solvers)} solvers ready in {perf_counter() - began:.1f} s")
    return 1 if failed else 0


VERBS = {
    "solve": cmd_solve,
    "check": cmd_check,
    "solvers": cmd_solvers,
    "compare": cmd_compare,
    "batch": cmd_batch,
    "report": cmd_report,
    "import": cmd_import,
    "plan": cmd_plan,
    "generate": cmd_generate,
    "warm": cmd_warm,
}

if __name__ == "__main__":
    sys.exit(main())

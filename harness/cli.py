"""The `tensorplan` command: solve, check, solvers, compare, batch, report, import, plan.

Exit codes: 0 success; 1 a checked solution is infeasible (or not a solution of that instance),
a solve found nothing, or a batch row has status error (bad file, crash, killed, rejected
solution); 2 bad input (printed as one line: `error: FILE: FIELD: why`); 130 interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path

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
from tensorplan.problems.core import OPTIONS, InstanceError, MismatchError, Options, Status

log = logging.getLogger("tensorplan")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="tensorplan", description=__doc__.splitlines()[0])
    ap.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    sub = ap.add_subparsers(dest="verb", required=True)

    s = sub.add_parser("solve", help="solve one instance and print a summary line")
    s.add_argument("instance")
    s.add_argument("--solver", help="solver name (default: the problem's first exact solver)")
    _limits(s)
    s.add_argument("-o", "--output", help="write the solution file here")

    c = sub.add_parser("check", help="verify a solution file with the independent checker")
    c.add_argument("instance")
    c.add_argument("solution")

    sub.add_parser("solvers", help="list the solvers of every problem")

    for verb, text in (
        ("compare", "run every solver on every instance and report"),
        ("batch", "solve every instance with one solver, a solution file each"),
    ):
        b = sub.add_parser(verb, help=text)
        b.add_argument("paths", nargs="+", help="instance files or directories")
        if verb == "compare":
            b.add_argument("--solvers", help="comma-separated solver names (default: all)")
        else:
            b.add_argument("--solver", required=True)
        _limits(b)
        b.add_argument("-o", "--output", default=f"results/{verb}", help="output directory")
        b.add_argument("--jobs", type=int, default=None, help="worker processes (default: cores)")
        b.add_argument("--executor", choices=["process", "inline", "dask"], default="process")
        b.add_argument("--scheduler", help="Dask scheduler address for --executor dask")
        b.add_argument("--force", action="store_true", help="re-solve pairs already finished")
        if verb == "compare":
            b.add_argument("--no-plots", action="store_true", help="skip the report's plots")

    r = sub.add_parser("report", help="rebuild report.md / report.html of a batch directory")
    r.add_argument("directory")
    r.add_argument("--no-plots", action="store_true")

    i = sub.add_parser("import", help="convert a public benchmark file to an instance file")
    i.add_argument("format", choices=["minimalloc", "onnx"])
    i.add_argument("file")
    i.add_argument("-o", "--output", required=True, help="file (minimalloc) or directory (onnx)")
    _model_args(i)
    i.add_argument("--objective", choices=["peak", "sum_liveness"], default="peak")

    pl = sub.add_parser("plan", help="ONNX model -> order + offsets + report (memory plan)")
    pl.add_argument("model", help="MODEL.onnx, or a schedule instance .json")
    pl.add_argument("-o", "--output", required=True, help="output directory")
    _model_args(pl)
    pl.add_argument("--time-limit", type=_seconds, default=10.0, help="seconds per plan step")
    pl.add_argument("--seed", type=int, default=0)
    pl.add_argument("--no-plots", action="store_true", help="skip the PNG pictures")
    return ap


def _model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--dim", action="append", default=[], metavar="NAME=VALUE", help="bind a symbolic dim"
    )
    p.add_argument(
        "--include-inputs", action="store_true", help="also plan graph inputs and weights"
    )


def _limits(p: argparse.ArgumentParser) -> None:
    p.add_argument("--time-limit", type=_seconds, default=10.0, help="seconds per solve")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=_at_least_one, default=1, help="solver threads (exact)")
    p.add_argument(
        "--gap", type=_gap, default=0.0, help="stop once proven within this relative gap"
    )
    p.add_argument(
        "--capacity", type=_at_least_one, help="allocation: any packing within this many bytes"
    )


def _options(args: argparse.Namespace) -> Options:
    """The solver options of `_limits`, built once for `solve`, `compare` and `batch`."""
    return Options(time_limit=args.time_limit, seed=args.seed, threads=args.threads, gap=args.gap)


def _seconds(text: str) -> float:
    value = float(text)
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text!r}")
    return value


def _at_least_one(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def _gap(text: str) -> float:
    value = float(text)
    if not (math.isfinite(value) and 0 <= value < 1):
        raise argparse.ArgumentTypeError(f"must be a relative gap in [0, 1), got {text!r}")
    return value


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
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(message)s",
        stream=sys.stderr,
    )
    try:
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


def cmd_solve(args: argparse.Namespace) -> int:
    inst = load_instance(args.instance)
    output = None if args.output is None else _output_file(args.output)
    if args.capacity is not None:
        inst = with_capacity(inst, args.capacity)
    spec = registry.problem_of(inst)
    res = solve(inst, args.solver, _options(args), spec=spec, warm=True)
    gap = res.gap(spec.sense)
    print(
        f"{res.solver}: {res.status} objective={_n(res.objective)} bound={_n(res.bound)} "
        f"gap={'-' if gap is None else f'{gap:.2%}'} time={res.runtime_s:.3f}s"
        + (f" ({res.message})" if res.message else "")
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
    print(_n(objective))
    return 0


def cmd_solvers(args: argparse.Namespace) -> int:
    for p in registry.PROBLEMS:
        print(f"{p} ({registry.problem(p).sense}imise):")
        for s in registry.solvers(p).values():
            honours = ",".join(o for o in OPTIONS if o in s.honours) or "-"
            print(f"  {s.name:<16} {s.kind:<9} {honours:<40} {s.summary}")
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
    from tensorplan.harness.progress import progress_printer
    from tensorplan.harness.report import render_console, write_report

    if solvers:
        known = {s for p in registry.PROBLEMS for s in registry.solvers(p)}
        unknown = [s for s in solvers if s not in known]
        if unknown:
            raise KeyError(f"unknown solver(s): {', '.join(unknown)}")
    if not args.output:
        raise InstanceError("-o", "empty path")
    update, close = progress_printer()
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
        )
    except KeyboardInterrupt:
        interrupted = True
    finally:
        close()
    from tensorplan.harness.rows import read_rows
    from tensorplan.harness.tables import table, write_csv

    frame = table(read_rows(out))
    if report:
        write_report(out, pictures=not args.no_plots)
        render_console(frame)
        print(f"report: {out / 'report.md'}, {out / 'report.html'}, {out / 'results.csv'}")
    else:
        write_csv(frame, out / "results.csv")
        print(f"{len(frame)} results in {out / 'results.csv'}")
    if interrupted:
        raise KeyboardInterrupt
    failed = int((frame["status"] == "error").sum())
    unsolved = int((frame["status"] == "unknown").sum())
    if unsolved:
        print(f"{unsolved} task(s) ended without a solution (status unknown)", file=sys.stderr)
    if failed:
        print(f"{failed} task(s) failed (status error)", file=sys.stderr)
    return 1 if failed else 0


def cmd_report(args: argparse.Namespace) -> int:
    from tensorplan.harness.report import write_report

    directory = Path(args.directory)
    if not (directory / "rows.jsonl").is_file():
        raise InstanceError("<directory>", "no rows.jsonl here: not a batch directory", directory)
    md, page = write_report(directory, pictures=not args.no_plots)
    print(f"report: {md}, {page}")
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from tensorplan.harness.importers import minimalloc_csv
    from tensorplan.harness.run import parse_instance

    if args.format == "onnx":
        from tensorplan.harness.onnx_import import write_onnx_instances

        paths = write_onnx_instances(
            args.file, args.output, args.dim, args.include_inputs, args.objective
        )
        print(" ".join(str(p) for p in paths))
        return 0

    data = minimalloc_csv(args.file)
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
        dims=args.dim,
        include_inputs=args.include_inputs,
        time_limit=args.time_limit,
        seed=args.seed,
        pictures=not args.no_plots,
    )
    print(f"{plan.name}: peak {plan.planned.peak} (model order {plan.model.peak}) -> {report}")
    return 0


def _n(x: float | None) -> str:
    if x is None:
        return "-"
    return str(int(x)) if float(x).is_integer() else f"{x:.6g}"


VERBS = {
    "solve": cmd_solve,
    "check": cmd_check,
    "solvers": cmd_solvers,
    "compare": cmd_compare,
    "batch": cmd_batch,
    "report": cmd_report,
    "import": cmd_import,
    "plan": cmd_plan,
}

if __name__ == "__main__":
    sys.exit(main())

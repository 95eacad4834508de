"""Regenerate the shipped instance files: `python instances/tools/generate.py [PROBLEM ...]`.

Each problem's generator module (`problems.<p>_gen`) writes its set deterministically into
`instances/<p>/`. A maintainer script: `instances/tools/` is not part of the installed package.
"""

from __future__ import annotations

import argparse
import sys
from importlib import import_module
from pathlib import Path

from tensorplan.harness.registry import PROBLEMS

HERE = Path(__file__).resolve().parents[1]  # instances/


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(
        prog="python instances/tools/generate.py",
        description="Rewrite the shipped instance files of instances/<problem>/ from the "
        "problems' generators (deterministic; files of other sources are left alone).",
        epilog="To make a new instance of a family at any size: tensorplan generate --list.",
    )
    ap.add_argument(
        "problems",
        nargs="*",
        metavar="PROBLEM",
        help=f"problems to regenerate: {', '.join(PROBLEMS)} (default: all)",
    )
    asked = ap.parse_args(argv).problems
    unknown = [p for p in asked if p not in PROBLEMS]
    if unknown:
        ap.error(f"unknown problem {unknown[0]!r}; known: {', '.join(PROBLEMS)}")
    for p in asked or list(PROBLEMS):
        paths = import_module(f"tensorplan.problems.{p}_gen").write_shipped(HERE / p)
        print(f"{p}: {len(paths)} files in {HERE / p}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

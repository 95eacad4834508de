"""Regenerate the shipped instance files: `python instances/tools/generate.py [PROBLEM ...]`.

Each problem's generator module (`problems.<p>_gen`) writes its set deterministically into
`instances/<p>/`. A maintainer script: `instances/tools/` is not part of the installed package.
"""

from __future__ import annotations

import sys
from importlib import import_module
from pathlib import Path

from tensorplan.harness.registry import PROBLEMS

HERE = Path(__file__).resolve().parents[1]  # instances/


def main(argv: list[str]) -> int:
    for p in argv or list(PROBLEMS):
        paths = import_module(f"tensorplan.problems.{p}_gen").write_shipped(HERE / p)
        print(f"{p}: {len(paths)} files in {HERE / p}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

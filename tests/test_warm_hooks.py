"""A solver's warm hook builds every kernel its solves use, whatever the time limit.

A hook exists for the kernels a solve of a tiny instance does not reach (`Solver.warm`); the
harness runs it before a process's first solve and `tensorplan warm` at set-up. A kernel it
misses is compiled inside some later solve's limit, but only in a fresh install: on a warm
numba cache it is merely loaded, so no timing shows it. (Found that way: in a fresh clone the
first `shift` solve after `tensorplan warm` spent 6.4 s compiling the seed descent's ladder.)
So each check runs in a process of its own: the hooks of a problem's solvers only, then real
solves, counting every kernel loaded or compiled during them.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

CHECK = """
import importlib, json, sys
from numba.core.registry import CPUDispatcher
from tensorplan.harness import registry
from tensorplan.problems.core import Options

problem, size, limit = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])

def uses():
    return {
        f"{name}.{key}": sum(v._cache_hits.values()) + sum(v._cache_misses.values())
        + len(v.overloads)
        for name, mod in list(sys.modules.items()) if name.startswith("tensorplan.")
        for key, v in vars(mod).items()
        if isinstance(v, CPUDispatcher) and v.__module__ == name
    }

gen = importlib.import_module(f"tensorplan.problems.{problem}_gen")
hooked = {n: s for n, s in registry.solvers(problem).items() if s.warm is not None}
for s in hooked.values():  # what a first solve's warm-up does when compiling ate its time
    s.warm()
    s.run(gen.sample(4, 0), Options(time_limit=1e-9))
late = {}
for name, s in hooked.items():
    before = uses()
    for seed in (0, 1):
        s.run(gen.sample(size, seed), Options(time_limit=limit))
    late[name] = sorted(k for k, n in uses().items() if n != before.get(k, 0))
print(json.dumps(late))
"""


@pytest.mark.parametrize(
    ("problem", "size", "limit"), [("schedule", 200, 3.0), ("allocation", 300, 2.0)]
)
def test_warm_hooks_leave_no_kernel_for_a_solve(problem, size, limit):
    # sizes and limits at which the later phases run (shift's second descent, its iterated
    # search, its bounds; bb's search); `sample` seeds 0 and 1 give both objectives
    done = subprocess.run(
        [sys.executable, "-c", CHECK, problem, str(size), str(limit)],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    late = json.loads(done.stdout.strip().splitlines()[-1])
    assert late, "no solver of the problem has a warm hook"
    assert {name: kernels for name, kernels in late.items() if kernels} == {}

"""poprithms' C++ shift scheduler as a peer: built from a poprithms checkout, run on our graphs.

poprithms (Graphcore) is the seed's own implementation (`../shared/seeds/000_*.txt`); it is not
on the package registries, so the benchmarks build the part they need from a checkout the user
points at (`--poprithms PATH`, the repository's root):

    git clone <poprithms repository> /path/poprithms     # any machine with the network
    apt-get install g++ libboost-dev libboost-filesystem-dev
    .venv/bin/python -m benchmarks.schedule_seed --poprithms /path/poprithms

`build` compiles the scheduler's sources (schedule/shift and what it links: error, logging,
util, and the transitive-closure, vanilla, dfs, scc and connected-components schedulers; -O3,
no stack traces) with `poprithms_shift.cpp` into build/poprithms/ (ignored by git), once per
checkout (the binary is reused while the sources are unchanged). `run` feeds it one graph and
returns its order and the seconds it took, as it measures them (its ScheduledGraph alone:
greedy Kahn start and shift search with default settings; the process start and the parsing of
the graph are not counted, as `shift`'s runtime does not count loading the instance). It runs on
the cores the calling process may use: pin the benchmark (taskset) for one-thread figures.
"""

from __future__ import annotations

import hashlib
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tensorplan.problems.schedule import Graph

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "build" / "poprithms"
DRIVER = Path(__file__).resolve().parent / "poprithms_shift.cpp"
PARTS = (
    "schedule/shift",
    "schedule/transitiveclosure",
    "schedule/vanilla",
    "schedule/dfs",
    "schedule/scc",
    "schedule/connectedcomponents",
    "error",
    "logging",
    "util",
)
LEFT_OUT = {"solutioncache.cpp"}  # includes a header the checkout does not have; not needed
FLAGS = ["-O3", "-DNDEBUG", "-std=c++17"]
LIBS = ["-lboost_filesystem", "-lpthread"]


class PeerError(RuntimeError):
    """poprithms could not be built or run (what failed and the compiler's or its message)."""


def _sources(src: Path) -> list[Path]:
    base = src / "poprithms" / "poprithms" / "src" / "poprithms"
    if not base.is_dir():
        raise PeerError(f"{src}: not a poprithms checkout (no poprithms/poprithms/src/poprithms)")
    return sorted(
        f for part in PARTS for f in (base / part).glob("*.cpp") if f.name not in LEFT_OUT
    )


def build(src: Path, jobs: int = 2) -> Path:
    """The driver binary for the poprithms checkout at `src`, compiled when missing or when the
    sources changed (their contents' hash names the binary)."""
    sources = _sources(src)
    digest = hashlib.sha256()
    for f in [*sources, DRIVER]:
        digest.update(f.read_bytes())
    binary = BUILD / f"poprithms_shift-{digest.hexdigest()[:12]}"
    if binary.exists():
        return binary
    inner = src / "poprithms" / "poprithms"
    includes = [f"-I{inner / 'include'}", f"-I{inner / 'src' / 'poprithms'}"]
    objects = BUILD / "obj"
    objects.mkdir(parents=True, exist_ok=True)

    def compile_one(f: Path) -> Path:
        out = objects / (f.parent.name + "_" + f.stem + ".o")
        done = subprocess.run(
            ["g++", *FLAGS, *includes, "-c", str(f), "-o", str(out)],
            capture_output=True,
            text=True,
        )
        if done.returncode:
            raise PeerError(f"compiling {f.name} failed: {done.stderr.strip()[-2000:]}")
        return out

    with ThreadPoolExecutor(jobs) as pool:
        compiled = list(pool.map(compile_one, sources))
    partial = binary.with_suffix(".tmp")
    done = subprocess.run(
        ["g++", *FLAGS, *includes, str(DRIVER), *map(str, compiled), *LIBS, "-o", str(partial)],
        capture_output=True,
        text=True,
    )
    if done.returncode:
        raise PeerError(f"linking poprithms_shift failed: {done.stderr.strip()[-2000:]}")
    partial.rename(binary)
    return binary


def graph_text(g: Graph) -> str:
    """`g` in the driver's input format (see poprithms_shift.cpp)."""
    lines = [f"{g.n} {len(g.sizes)}"]
    lines += [" ".join(map(str, (len(ps), *ps))) for ps in g.preds]
    allocs = zip(g.sizes, g.alloc_ops, strict=True)
    lines += [" ".join(map(str, (s, len(vs), *vs))) for s, vs in allocs]
    return "\n".join(lines) + "\n"


def run(binary: Path, g: Graph, timeout: float = 3600.0) -> tuple[list[int], float]:
    """poprithms' schedule of `g` and the seconds it took (see the module's docstring)."""
    done = subprocess.run(
        [str(binary)], input=graph_text(g), capture_output=True, text=True, timeout=timeout
    )
    if done.returncode:
        raise PeerError(f"poprithms_shift exited with {done.returncode}: {done.stderr.strip()}")
    seconds, order = done.stdout.split("\n")[:2]
    return [int(x) for x in order.split()], float(seconds)

"""OmniMalloc's allocators as tensorplan solvers (`omnimalloc-*`), for side-by-side reports.

Declared only when the optional `omnimalloc` package is installed (`pip install -e .[peers]`); each
runs on one thread, its packing is re-checked by the harness like any other solver's. OmniMalloc
lifetimes are half-open [start, end), so a buffer live over [start, end] becomes [start, end + 1).
It has no alignment: with alignment a, sizes are rounded up to whole units of a, packed in those
units and the offsets scaled back, which keeps every offset aligned and every pair apart.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from tensorplan.problems.allocation import AllocationInstance
from tensorplan.problems.core import Options, Result, Solver, stopwatch

INSTALL = "pip install -e '.[peers]'  (installs omnimalloc)"


def available() -> bool:
    """True when the optional `omnimalloc` package is installed. Found, not imported: importing
    it takes over a second (it loads matplotlib), which every CLI start would pay."""
    return importlib.util.find_spec("omnimalloc") is not None


def to_omnimalloc(inst: AllocationInstance) -> list[Any]:
    """The buffers as OmniMalloc allocations (id = position), in units of the alignment."""
    import omnimalloc as om

    from tensorplan.heuristics.allocation import buffer_arrays

    a = buffer_arrays(inst)
    units = -(-a.size // a.alignment)
    rows = zip(units.tolist(), a.start.tolist(), (a.end + 1).tolist(), strict=True)
    return [om.Allocation(i, s, t, e) for i, (s, t, e) in enumerate(rows)]


def from_omnimalloc(inst: AllocationInstance, placed: Any) -> np.ndarray:
    """Offsets in the order of `inst.buffers`, scaled back from alignment units."""
    offsets = np.full(len(inst.buffers), -1, dtype=np.int64)
    for x in placed:
        offsets[x.id] = x.offset * inst.alignment
    return offsets


def _run(
    inst: AllocationInstance,
    opts: Options,
    *,
    name: str,
    make: Callable[[Options, float], Any],
) -> Result:
    """Convert, run one OmniMalloc allocator on one thread, convert back."""
    import omnimalloc as om

    from tensorplan.heuristics.allocation import _result, buffer_arrays

    threads = om.max_threads()
    om.set_max_threads(1)
    stats: dict[str, Any] = {}
    try:
        with stopwatch() as elapsed:
            allocs = tuple(to_omnimalloc(inst))
            allocator = make(opts, elapsed())
            if hasattr(allocator, "solve"):  # supermalloc also says whether it proved the peak
                out = allocator.solve(allocs)
                placed = out.allocations
                stats = {"proved_optimal": out.proved_optimal}
            else:
                placed = om.allocate(allocs, allocator) if allocs else ()
            offsets = from_omnimalloc(inst, placed)
    finally:
        om.set_max_threads(threads)
    a = buffer_arrays(inst)
    top = int((offsets + a.size).max()) if len(offsets) else 0
    return _result(inst, name, offsets, top, elapsed(), **stats)


def _remaining(opts: Options, used: float) -> float:
    """What is left of the time limit for the allocator's own search (at least 10 ms)."""
    return max(0.01, 0.9 * opts.time_limit - used)


def _greedy(opts: Options, used: float) -> Any:
    from omnimalloc.allocators import GreedyBySizeAllocator

    return GreedyBySizeAllocator()


def _best_fit(opts: Options, used: float) -> Any:
    from omnimalloc.allocators import BestFitAllocator

    return BestFitAllocator()


def _omni(opts: Options, used: float) -> Any:
    from omnimalloc.allocators import OmniAllocator

    return OmniAllocator()


def _tela(opts: Options, used: float) -> Any:
    from omnimalloc.allocators import TelamallocAllocator

    return TelamallocAllocator(seed=opts.seed, timeout=_remaining(opts, used))


def _super(opts: Options, used: float) -> Any:
    from omnimalloc.allocators import SupermallocAllocator

    return SupermallocAllocator(timeout=_remaining(opts, used), num_threads=1)


PEERS: tuple[tuple[str, Callable[[Options, float], Any], frozenset[str], str], ...] = (
    ("omnimalloc-greedy", _greedy, frozenset(), "OmniMalloc greedy_by_size (C++ first fit)"),
    ("omnimalloc-best", _best_fit, frozenset(), "OmniMalloc best_fit (C++, input order)"),
    ("omnimalloc-omni", _omni, frozenset(), "OmniMalloc omni: its C++ greedy portfolio"),
    (
        "omnimalloc-tela",
        _tela,
        frozenset({"time_limit", "seed"}),
        "OmniMalloc telamalloc (TelaMalloc-style search, C++)",
    ),
    (
        "omnimalloc-super",
        _super,
        frozenset({"time_limit"}),
        "OmniMalloc supermalloc (portfolio branch-and-bound, C++)",
    ),
)


def peer_solvers() -> list[Solver]:
    """The omnimalloc-* solvers, or none when `omnimalloc` is not installed."""
    if not available():
        return []
    return [
        Solver(name, "heuristic", partial(_run, name=name, make=make), summary, honours)
        for name, make, honours, summary in PEERS
    ]


SOLVERS = peer_solvers()  # empty unless the optional `peers` extra is installed

"""Shared helpers of `problems.core` that every problem leans on: `Kept` (values kept per live
instance) and `compiled_within` (a compiled kernel's first call only when the time allows)."""

from __future__ import annotations

import gc
from dataclasses import dataclass

from tensorplan.problems.core import Kept, compiled_within, loadable


@dataclass(frozen=True)
class Thing:
    value: int


def test_kept_values_live_as_long_as_their_object() -> None:
    kept: Kept[int | None] = Kept()
    a, b = Thing(1), Thing(1)  # equal, but two objects: two entries
    made: list[Thing] = []

    def make(t: Thing) -> int:
        made.append(t)
        return t.value * 10

    assert kept.get(a, make) == 10
    assert kept.get(a, make) == 10
    assert kept.get(b, make) == 10
    assert made == [a, b]  # one call per object, none for the second ask
    kept.put(a, None)
    assert kept.peek(a) == (None,)  # a kept None is not a miss
    made.clear()
    del a
    gc.collect()
    assert len(kept._entries) == 1  # a's entry went with it
    kept.clear()
    assert kept.peek(b) is None


class FakeKernel:
    """A numba dispatcher's two traits `compiled_within` reads: loaded signatures, and (absent
    here) an on-disk cache."""

    def __init__(self, loaded: bool) -> None:
        self.signatures = ["sig"] if loaded else []


def test_compiled_within_warms_only_when_the_time_allows() -> None:
    warmed: list[int] = []
    cold = FakeKernel(loaded=False)  # no cache: compile_s applies
    assert not compiled_within([cold], 5.0, 1.0, 10.0, lambda: warmed.append(1))
    assert warmed == []
    assert compiled_within([cold], 20.0, 1.0, 10.0, lambda: warmed.append(1))
    assert warmed == [1]
    loaded = FakeKernel(loaded=True)
    assert compiled_within([loaded], 0.0, 1.0, 10.0, lambda: warmed.append(2))
    assert warmed == [1]  # loaded already: nothing to run, whatever the time
    assert not compiled_within([loaded, cold], 0.5, 1.0, 10.0, lambda: warmed.append(3))


def test_loadable_means_compiled_here_or_cached_on_disk(tmp_path) -> None:
    assert loadable(FakeKernel(loaded=True))
    assert not loadable(FakeKernel(loaded=False))  # no cache either: a first call compiles
    index = tmp_path / "kernel.nbi"
    index.write_text("")
    cache_file = type("F", (), {"_index_path": str(index)})
    cached = type("K", (), {"signatures": [], "_cache": type("C", (), {"_cache_file": cache_file})})
    assert loadable(cached())

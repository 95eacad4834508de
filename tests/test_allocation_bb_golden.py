"""The bb kernel against a record of what it did before the refactor into grouped arrays.

tests/data/allocation/bb_golden.json was written by `record` below, run on the kernel of commit
8c2aa26 (one flat `_search` of 49 parameters). For 624 decision runs (six instance families,
two caps, four point rules, with and without the failure memory and a discrepancy limit) it holds
each slice's outcome, every `reg` counter (nodes, jumps, dominance, staircase, memo hits, ...)
and a digest of the offsets: the kernel must search the very same nodes and find the very same
packings. Regenerate only for a deliberate change of the search: `python -m
tensorplan.tests.test_allocation_bb_golden`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tensorplan.models import allocation_bb_kernels as K
from tensorplan.problems.allocation import AllocationInstance, lower_bound
from tensorplan.problems.allocation_gen import (
    aligned_family,
    layered_family,
    mixed_family,
    pow2_family,
    random_family,
    tight_family,
)

GOLDEN = Path(__file__).parent / "data" / "allocation" / "bb_golden.json"
SLICES = 3  # each run: up to three budget slices or packings in a row
BUDGET = 3000


def cases() -> Iterator[tuple[str, AllocationInstance]]:
    """The recorded instances, by name."""
    for seed in range(4):
        yield f"tight-30-s{seed}", tight_family(30, seed)[0]
        yield f"tight-60-s{seed}", tight_family(60, seed)[0]
        yield f"random-25-s{seed}", random_family(25, seed)
        yield f"aligned-s{seed}", aligned_family(seed)
        yield f"mixed-40-s{seed}", mixed_family(40, seed)
        yield f"pow2-30-s{seed}", pow2_family(30, seed)
    for seed in range(2):
        yield f"layered-6-s{seed}", layered_family(6, seed)


def digest(offsets: Any) -> str:
    """A short digest of a packing's offsets."""
    text = ",".join(str(int(o)) for o in offsets)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def slices(inst: AllocationInstance, cap: int, mode: int, disc: int, memo: int) -> list[Any]:
    """[outcome, reg..., offsets digest] after each slice of one decision run."""
    bs = inst.buffers
    p = K.build([b.size for b in bs], [b.start for b in bs], [b.end for b in bs], inst.alignment)
    st = K.new_state(p, cap, disc, K.new_memo(memo) if memo else None)
    out: list[Any] = []
    for _ in range(SLICES):
        got = K.run(p, st, BUDGET, mode=mode)
        out.append([got, *(int(x) for x in st.reg), digest(st.pack.off)])
        if got == K.EXHAUSTED:
            break
    return out


def record() -> list[dict[str, Any]]:
    """Every recorded run with what the kernel does on it."""
    rows = []
    for name, inst in cases():
        lb = lower_bound(inst)
        for cap in (lb, lb + max(1, lb // 50)):
            for mode in (0, 2, 3, 2 | K.NO_STAIR):
                for disc, memo in ((-1, 0), (-1, 1 << 12), (2, 0)):
                    runs = slices(inst, cap, mode, disc, memo)
                    rows.append(
                        dict(case=name, cap=cap, mode=mode, disc=disc, memo=memo, runs=runs)
                    )
    return rows


def test_the_kernel_searches_the_recorded_nodes_and_finds_the_recorded_packings() -> None:
    golden = json.loads(GOLDEN.read_text())
    now = record()
    assert len(now) == len(golden) == 624
    assert sum(r["runs"][-1][1 + K.R_NODES] for r in golden) > 100_000  # long searches
    for was, is_ in zip(golden, now, strict=True):
        assert was == is_, (was["case"], was["cap"], was["mode"], was["disc"], was["memo"])


if __name__ == "__main__":
    GOLDEN.write_text(json.dumps(record(), separators=(",", ":")) + "\n")

"""Rectangle composition: rebuild the blocks a tight interval instance was cut from.

In the (time x address) plane a buffer is a rectangle whose time extent is fixed and whose
address is free. When a few buffers can sit together as one exact rectangle, that rectangle is
a block: packing the blocks and keeping each member at its place inside its block is a packing
of the buffers. Three rules build blocks from buffers or blocks, bottom-up, until none applies:

- *stack*: items with the same lifetime sit on top of one another;
- *chain*: an item ending where another of the same height starts (each the only one to do so)
  is continued by it at the same address;
- *pinwheel*: five items tile a rectangle as a centre ringed by four blades (both chiralities),
  the smallest rectangle tiling that no straight cut splits.

Stack and chain are the two guillotine cuts; a rectangle tiling with no guillotine cut contains
a pinwheel, so the three rebuild every tiling made by recursive guillotine and pinwheel cuts
(OmniMalloc's `TilingSource` and `PinwheelSource` collapse to one block, whose packing is then
optimal). On other instances the blocks are a heuristic's choice: the portfolio packs them and
keeps the result only when it is lower (`heuristics.allocation.PortfolioSearch`).
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from tensorplan.problems.allocation import AllocationInstance, Buffer
from tensorplan.problems.core import Kept


@dataclass(frozen=True)
class Block:
    """A rectangle of items: lifetime [start, end) (half-open), height `size`, and each member
    buffer's index with its offset inside the block."""

    start: int
    end: int
    size: int
    members: tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class Composition:
    """The blocks of an instance, as an instance of their own (`blocks`, one buffer per block,
    inclusive ends like every instance) and the blocks themselves (`parts`, in that order)."""

    blocks: AllocationInstance
    parts: tuple[Block, ...]

    def expand(self, offsets: np.ndarray, n: int) -> np.ndarray:
        """The buffers' offsets from the blocks' `offsets` (`n` buffers)."""
        out = np.zeros(n, dtype=np.int64)
        for block, base in zip(self.parts, offsets.tolist(), strict=True):
            for k, rel in block.members:
                out[k] = base + rel
        return out


_COMPOSED: Kept[Composition | None] = Kept()
"""`compose`'s finished answers per live instance: the portfolio's start and `bb`'s blocks
search both ask for the same instance's."""


def compose(inst: AllocationInstance, deadline: float) -> Composition | None:
    """The blocks the three rules build (see the module docstring), or None when they build
    none, the instance has concurrent lifetimes or sizes off its alignment (an offset inside a
    block must stay aligned), or `deadline` (a perf_counter time) passes first. Answers that
    did not run out of time are kept for the instance."""
    hit = _COMPOSED.peek(inst)
    if hit is not None:
        return hit[0]
    found = _compose(inst, deadline)
    if found is not None or time.perf_counter() <= deadline:
        _COMPOSED.put(inst, found)
    return found


def _compose(inst: AllocationInstance, deadline: float) -> Composition | None:
    a = inst.alignment
    if inst.conflicts is not None or len(inst.buffers) < 2:
        return None
    if a > 1 and any(b.size % a for b in inst.buffers):
        return None
    items = [Block(b.start, b.end + 1, b.size, ((k, 0),)) for k, b in enumerate(inst.buffers)]
    changed = True
    while changed:
        found = _pinwheels(items, deadline)  # (it checks the clock first)
        if found is None:
            return None
        items, changed = found
        if not changed:
            items, changed = _stack(items)
        if not changed:
            items, changed = _chain(items)
        if time.perf_counter() > deadline:
            return None
    if len(items) == len(inst.buffers):
        return None
    blocks = tuple(Buffer(f"block{k}", b.size, b.start, b.end - 1) for k, b in enumerate(items))
    return Composition(AllocationInstance(blocks, a), tuple(items))


def _merge(start: int, end: int, size: int, placed: list[tuple[Block, int]]) -> Block:
    """One block of `placed` items (item, its offset), members shifted to their place."""
    members = tuple((k, at + rel) for item, at in placed for k, rel in item.members)
    return Block(start, end, size, members)


def _stack(items: list[Block]) -> tuple[list[Block], bool]:
    """Items with the same lifetime stacked, in their order."""
    groups: dict[tuple[int, int], list[Block]] = defaultdict(list)
    for item in items:
        groups[item.start, item.end].append(item)
    if len(groups) == len(items):
        return items, False
    out = []
    for (start, end), group in groups.items():
        placed, at = [], 0
        for item in group:
            placed.append((item, at))
            at += item.size
        out.append(group[0] if len(group) == 1 else _merge(start, end, at, placed))
    return out, True


def _chain(items: list[Block]) -> tuple[list[Block], bool]:
    """Each item continued by the only item of its height that starts where it ends, when it
    is also the only one of that height to end there."""
    starting: dict[tuple[int, int], list[Block]] = defaultdict(list)
    ending: dict[tuple[int, int], list[Block]] = defaultdict(list)
    for item in items:
        starting[item.start, item.size].append(item)
        ending[item.end, item.size].append(item)
    used: set[int] = set()
    out = []
    for item in items:
        nxt = starting.get((item.end, item.size), [])
        if id(item) in used or len(nxt) != 1 or len(ending[item.end, item.size]) != 1:
            continue
        follow = nxt[0]
        if id(follow) in used or follow is item:
            continue
        used.update((id(item), id(follow)))
        out.append(_merge(item.start, follow.end, item.size, [(item, 0), (follow, 0)]))
    if not out:
        return items, False
    return [item for item in items if id(item) not in used] + out, True


def _pinwheels(items: list[Block], deadline: float) -> tuple[list[Block], bool] | None:
    """Five items around each centre `c` that tile a rectangle: a left blade ending where c
    starts and a right blade starting where it ends, both taller than c; a bottom blade from the
    left blade's start to c's end, as tall as the right blade's excess over c; a top blade from
    c's start to the right blade's end, as tall as the left blade's excess. Packed: bottom and
    right at 0, c and left on the bottom blade, top on the right blade. (The other chirality
    is the same five buffers upside down, so one rule finds both.) None: out of time."""
    by_end: dict[int, list[Block]] = defaultdict(list)
    by_start: dict[int, list[Block]] = defaultdict(list)
    exact: dict[tuple[int, int, int], list[Block]] = defaultdict(list)
    for item in items:
        by_end[item.end].append(item)
        by_start[item.start].append(item)
        exact[item.start, item.end, item.size].append(item)
    used: set[int] = set()
    out = []

    def free(key: tuple[int, int, int], *taken: Block) -> Block | None:
        return next(
            (x for x in exact.get(key, ()) if id(x) not in used and all(x is not t for t in taken)),
            None,
        )

    def around(c: Block) -> Block | None:
        """The block of the first pinwheel found around `c`, its five items marked used."""
        for left in by_end.get(c.start, ()):
            if id(left) in used or left.size <= c.size:
                continue
            for right in by_start.get(c.end, ()):
                if id(right) in used or right.size <= c.size:
                    continue
                bottom = free((left.start, c.end, right.size - c.size), c, left, right)
                if bottom is None:
                    continue
                top = free((c.start, right.end, left.size - c.size), c, left, right, bottom)
                if top is None:
                    continue
                b = bottom.size
                used.update(map(id, (c, left, right, bottom, top)))
                places = [(bottom, 0), (right, 0), (c, b), (left, b), (top, right.size)]
                return _merge(left.start, right.end, right.size + top.size, places)
        return None

    for n, c in enumerate(items):
        if n % 1024 == 0 and time.perf_counter() > deadline:
            return None
        if id(c) not in used and (block := around(c)) is not None:
            out.append(block)
    if not out:
        return items, False
    return [item for item in items if id(item) not in used] + out, True

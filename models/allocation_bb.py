"""`bb` and `bb-lds`: branch and bound over canonical placements, for allocation packing.

The kernel (`allocation_bb_kernels`) answers "does it fit under capacity C?"; around it this module
decomposes the instance at time cuts, raises a target from the max-load bound with restarts, dives
and a failure memory, and searches slot-reuse restrictions and tight windows beside the full search.

Design notes (how and why): docs/design/allocation_bb.md.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass, field, replace

import numpy as np

from tensorplan.heuristics.allocation_compose import compose
from tensorplan.models import allocation_bb_kernels as K
from tensorplan.models import allocation_conflict_bb as conflict_bb
from tensorplan.models.allocation_window import Window, extend, tight_windows, widened, window
from tensorplan.problems.allocation import (
    AllocationInstance,
    AllocationSolution,
    Buffer,
    check,
    grain,
    live_profile,
    lower_bound,
    peak,
    stacked,
)
from tensorplan.problems.core import (
    Options,
    Reporter,
    Result,
    Solver,
    Status,
    compiled_within,
)

RESERVE_SHARE, RESERVE_S = 0.03, 0.05
"""The search stops this share of the time limit plus this many seconds before it: the last
kernel call (20-50 ms), assembling the packing and the harness's check (about 1 us per buffer)
must fit in what is left."""
SLICE = 20_000  # at most this many nodes per kernel call between clock checks
STEPS_PER_CALL = 30_000_000  # about 20-50 ms of kernel work per call
LDS_STEP = 32  # discrepancies allowed per attempt of the anytime form: 8, 16, 24, ...
FIRST_BUDGET = 4_000  # nodes per leaf and attempt, times the Luby sequence 1 1 2 1 1 2 4 ...
COMPILE_S = 60.0  # what a first compilation may take (no cache yet; measured 35 s, 2026-11-27)
LOAD_S = 0.3  # time loading the compiled kernel from numba's cache may take (measured 0.15 s)
DECOMPOSE_S_PER_BUFFER = 3e-5  # rough time `decompose` takes per buffer
POLISH_MIN_S = 0.05
"""A refused search hands the time left to the portfolio heuristic when at least this much is
left (`polish`)."""
FINAL_POLISH = 0.2
"""The share of the time left after the decomposition that goes to the portfolio heuristic
(from the best packing) when a part has `POLISH_FROM` buffers or more and the search has not
closed the gap. 10 s, one thread: om-random-5000-s42 93.97 M -> 91.95 M, om-random-5000-s1
93.18 M -> 93.12 M; MiniMalloc J, om-pow2-1000-s1 and the tight set within their noise."""

POLISH_FROM = 1000
"""Parts smaller than this keep the whole time for the search: it proves tight ones late."""
MAX_PAIRS = 5_000_000  # a part with more overlapping pairs is not searched (graph memory)
BUILD_S_PER_ITEM = 2e-6  # rough set-up time per buffer or overlapping pair of a part
MEMO_FROM = 24  # leaves with fewer buffers get no failure memory (their searches are short)
MEMO_ROWS_PER_BUFFER = 4096  # failure memory of a leaf: this many entries per buffer (32 B each)
MEMO_ROWS = (1 << 12, 1 << 20)  # at least, at most per leaf (a power of two)
MEMO_TOTAL_ROWS = 1 << 22  # over all leaves of a search (128 MB); later leaves get none


@dataclass
class Leaf:
    """An irreducible part: buffer indices (into the instance), the base below it."""

    members: list[int]
    base: int
    lb: int = 0
    best: tuple[int, list[int]] | None = None  # (own peak, offsets of members)
    proven_lo: int = 0  # the leaf does not fit under proven_lo - 1
    pairs: int | None = None  # lifetime-overlapping pairs, once counted
    live: dict[int, int] | None = None  # `_live_max` of the members, once computed
    built: dict[bool, K.Problem] = field(default_factory=dict)  # members in order, by direction
    memo: np.ndarray | None = None  # the kernel's failure memory, shared by all its searches


@dataclass
class Plan:
    """The decomposition: bottom-stacked buffers (fixed offsets) and the leaves."""

    fixed: dict[int, int] = field(default_factory=dict)
    leaves: list[Leaf] = field(default_factory=list)
    cuts: int = 0  # components found by time cuts (beyond the first)
    stacked: int = 0  # buffers stacked at the bottom of their component


def decompose(inst: AllocationInstance) -> Plan:
    """Time cuts (= overlap-graph components for intervals) and full-span bottom stacking,
    alternated until nothing more splits."""
    plan = Plan()
    bs, a = inst.buffers, inst.alignment
    work: list[tuple[list[int], int]] = [(list(range(len(bs))), 0)]
    while work:
        members, base = work.pop()
        comps = _components(bs, members)
        plan.cuts += len(comps) - 1
        for comp in comps:
            t0 = min(bs[i].start for i in comp)
            t1 = max(bs[i].end for i in comp)
            full = [i for i in comp if bs[i].start <= t0 and bs[i].end >= t1]
            if full and len(comp) > 1 and all(bs[i].size % a == 0 for i in full):
                full.sort(key=lambda i: (-bs[i].size, i))
                top = base
                for i in full:
                    plan.fixed[i] = top
                    top += bs[i].size
                plan.stacked += len(full)
                gone = set(full)
                rest = [i for i in comp if i not in gone]
                if rest:
                    work.append((rest, top))
            else:
                plan.leaves.append(Leaf(comp, base))
    for leaf in plan.leaves:
        leaf.lb = _max_load([bs[i] for i in leaf.members])
        leaf.proven_lo = leaf.lb
    return plan


@dataclass(frozen=True)
class Restriction:
    """The slot-reuse restriction of an instance: `groups[k]` are the buffers that the merged
    instance's buffer k stands for (one after another in time, all at its offset)."""

    inst: AllocationInstance
    groups: tuple[tuple[int, ...], ...]

    def expand(self, sol: AllocationSolution) -> AllocationSolution:
        """A packing of the merged instance as one of the original (each member at its offset)."""
        offs = [0] * sum(len(g) for g in self.groups)
        for g, o in zip(self.groups, sol.offsets, strict=True):
            for i in g:
                offs[i] = o
        return AllocationSolution(tuple(offs))


def slot_reuse(inst: AllocationInstance) -> Restriction | None:
    """Chains of buffers where each starts the step after the previous one ends, with the same
    size, merged into one buffer over their joint lifetime (None when there is no such pair).

    A packing of the merged instance is one of the original where each chain reuses one slot,
    as a caching allocator reuses a freed block of the exact size. That is a restriction: it can
    miss the optimum, so only its packings are used, never its proofs. On the tight set a chain
    at one offset is what perfect packings mostly look like, and the merged search, with fewer
    and longer buffers, finds them where the full one does not (see `solve`).
    """
    bs = inst.buffers
    # successors by (size, start), each list in index order, taken from the front
    after: dict[tuple[int, int], list[int]] = {}
    for i, b in enumerate(bs):
        after.setdefault((b.size, b.start), []).append(i)
    taken = dict.fromkeys(after, 0)
    used = [False] * len(bs)
    groups: list[tuple[int, ...]] = []
    merged: list[Buffer] = []
    for i in sorted(range(len(bs)), key=lambda k: (bs[k].start, k)):
        if used[i]:
            continue
        chain, b = [i], bs[i]
        used[i] = True
        while (key := (b.size, bs[chain[-1]].end + 1)) in after and taken[key] < len(after[key]):
            nxt = after[key][taken[key]]
            taken[key] += 1
            used[nxt] = True
            chain.append(nxt)
        groups.append(tuple(chain))
        merged.append(Buffer(str(len(merged)), b.size, b.start, bs[chain[-1]].end))
    if len(merged) == len(bs):
        return None
    return Restriction(AllocationInstance(tuple(merged), inst.alignment), tuple(groups))


def _components(bs: tuple[Buffer, ...], members: list[int]) -> list[list[int]]:
    """Groups of `members` between time cuts, by a sweep over start times."""
    order = sorted(members, key=lambda i: (bs[i].start, bs[i].end, i))
    out: list[list[int]] = []
    reach = None
    for i in order:
        if reach is None or bs[i].start > reach:
            out.append([])
            reach = bs[i].end
        out[-1].append(i)
        reach = max(reach, bs[i].end)
    return out


def _max_load(bs: list[Buffer]) -> int:
    events = sorted([(b.start, b.size) for b in bs] + [(b.end + 1, -b.size) for b in bs])
    best = total = 0
    for _, delta in events:
        total += delta
        best = max(best, total)
    return best


ORDERS: list[Callable[[Buffer, int], tuple]] = [
    lambda b, t: (-b.duration, -b.size),
    lambda b, t: (-b.size * b.duration, -b.size),
    lambda b, t: (-b.size, -b.duration),
    lambda b, t: (-t, -b.size * b.duration, -b.duration),
]
"""Buffer orders (a buffer, the largest live total over its lifetime): duration, area, size,
and the busiest sections first."""


def luby(i: int) -> int:
    """The i-th term (from 0) of the Luby restart sequence 1 1 2 1 1 2 4 1 1 2 ...: many short
    restarts, each length used as often as all shorter ones, so runs grow without bound."""
    k = 1
    while (1 << k) - 1 < i + 1:
        k += 1
    while True:
        if i + 1 == (1 << k) - 1:
            return 1 << (k - 1)
        i -= (1 << (k - 1)) - 1
        k = 1
        while (1 << k) - 1 < i + 1:
            k += 1


MODES = (2, 0, 3)
"""Which point the kernel decides first, alternating between attempts: the tightest ready
section (2), the lowest-leftmost point (0), or the ready point nearest the tightest section of
all (3); their run times differ by orders of magnitude from instance to instance, so the
portfolio takes the best of them."""

DIRECTIONS = 2
"""Attempts also alternate the direction of time: a packing of the instance with time reversed
is a packing of the instance, but the canonical search over it is another tree (on some tight
instances one direction finds the packing in a few hundred nodes and the other never)."""


DIVE = 1 << 40
"""Variants from DIVE on are dives: short attempts (`dive_nodes`) that cycle over the point
rules and directions with a fresh perturbation of the busiest-sections-first order each. On
tight instances the packing is found by a nearly backtrack-free descent in the right order far
more often than by a long search in a wrong one (the winning attempts of the tight set took
400-5,000 nodes, every one with that order), so the search gives dives as many nodes as its
regular attempts."""


def _variant(variant: int) -> tuple[int, bool, int]:
    """Attempt `variant` as (kernel mode, time reversed, order index)."""
    if variant >= DIVE:
        k = variant - DIVE
        rest, mode = divmod(k, len(MODES))
        return MODES[mode], rest % DIRECTIONS == 1, 3 + len(ORDERS) * (1 + k)
    rest, mode = divmod(variant, len(MODES))
    order, rev = divmod(rest, DIRECTIONS)
    return MODES[mode], rev == 1, order


def dive_nodes(leaf: Leaf) -> int:
    """A dive's node budget on a leaf: a descent with a little backtracking (at least enough
    nodes to outweigh setting an attempt up)."""
    return max(4 * len(leaf.members) + 100, 1_000)


DIVES_FROM = 100
"""Dives get as many nodes as the regular attempts when the largest leaf has this many buffers,
an eighth of that below: on small parts a long search proves what dives cannot (on 20-buffer
aligned instances an equal share made proofs 2.8 times slower), on large tight ones a long
search rarely finds what a dive does."""


def _live_max(p: K.Problem, members: list[int]) -> dict[int, int]:
    """For each member, the largest total size live at one step of its lifetime (among members;
    `p` holds them in that order)."""
    load = K.section_load(p, p.size)
    return {i: int(load[p.lo[k] : p.hi[k] + 1].max()) for k, i in enumerate(members)}


def _priority(
    bs: tuple[Buffer, ...], members: list[int], variant: int, seed: int, live: dict[int, int]
) -> list[int]:
    """The branching order of attempt `variant`: a fixed order, or a seeded perturbation
    (`live`: `_live_max` of the members, read by the busiest-sections-first order)."""
    index = _variant(variant)[2]
    if index < len(ORDERS):
        key = ORDERS[index]
        return sorted(members, key=lambda i: (*key(bs[i], live[i]), i))
    rng = random.Random(seed * 1_000_003 + index)
    # one draw per kind of buffer: identical buffers stay in member order, as in the fixed
    # orders (the kernel's failure memory, shared by every order, needs that)
    draw: dict[tuple[int, int, int], float] = {}
    noise = {}
    for i in members:
        b = bs[i]
        noise[i] = draw.setdefault((b.size, b.start, b.end), rng.random())
    base = ORDERS[index % len(ORDERS)]
    return sorted(members, key=lambda i: (base(bs[i], live[i])[0] * (1 + 0.6 * noise[i]), i))


@dataclass
class Search:
    """One bb run over the leaves of a plan, with its clock, node budget and statistics."""

    inst: AllocationInstance
    plan: Plan
    seed: int
    deadline: float
    max_nodes: int | None = None
    lds: bool = False
    nodes: int = 0
    attempts: int = 0
    dived: int = 0  # dives made (each a fresh order)
    refused: bool = False  # a part was too big to search: no complete packing will come
    memo_rows: int = 0  # failure-memory entries handed out to leaves so far
    memo_total: int = MEMO_TOTAL_ROWS  # at most this many over all leaves

    def out_of_time(self) -> bool:
        if self.refused:
            return True
        if self.max_nodes is not None and self.nodes >= self.max_nodes:
            return True
        return time.perf_counter() >= self.deadline

    def fit(self, leaf: Leaf, cap: int, budget: int, variant: int) -> int:
        """Search "leaf fits under cap?" for `budget` nodes; FOUND stores the packing."""
        bs = self.inst.buffers
        if leaf.best is not None and leaf.best[0] <= cap:
            return K.FOUND
        if cap < leaf.proven_lo:
            return K.EXHAUSTED
        if len(leaf.members) > 1 and leaf.pairs is None:
            leaf.pairs = K.overlap_pairs(
                [bs[i].start for i in leaf.members], [bs[i].end for i in leaf.members]
            )
        pairs = leaf.pairs or 0
        left = self.deadline - time.perf_counter()
        mode, rev, _ = _variant(variant)
        unbuilt = len({False, rev} - leaf.built.keys())  # problems this fit has to build
        if pairs > MAX_PAIRS or left < unbuilt * BUILD_S_PER_ITEM * (len(leaf.members) + pairs):
            self.refused = True  # too big to build in the time (or memory) left: not searched
            return K.BUDGET
        if leaf.live is None:
            leaf.live = _live_max(self.built(leaf, False), leaf.members)
        order = _priority(bs, leaf.members, variant, self.seed, leaf.live)
        where = {i: k for k, i in enumerate(leaf.members)}
        p = K.reorder(self.built(leaf, rev), [where[i] for i in order])
        if self.lds:
            st = K.new_state(p, cap, max_disc=LDS_STEP * (variant + 1))
        else:
            st = K.new_state(p, cap, memo=self.memo(leaf))
        used = 0
        out = K.BUDGET
        # nodes per kernel call: a node costs about (buffers + section spans) steps
        work = len(p.size) + p.sections + int((p.hi - p.lo + 1).sum())
        chunk = max(16, min(SLICE, STEPS_PER_CALL // max(1, work)))
        while used < budget and not self.out_of_time():
            step = min(chunk, budget - used)
            if self.max_nodes is not None:
                step = max(1, min(step, self.max_nodes - self.nodes))
            before = int(st.reg[K.R_NODES])
            out = K.run(p, st, step, mode=mode)
            spent = int(st.reg[K.R_NODES]) - before
            used += max(spent, 1)
            self.nodes += spent
            if out != K.BUDGET:
                break
        if out == K.FOUND:
            where = {i: k for k, i in enumerate(order)}
            offs = [int(st.pack.off[where[i]]) for i in leaf.members]
            top = max((o + bs[i].size for o, i in zip(offs, leaf.members, strict=True)), default=0)
            if leaf.best is None or top < leaf.best[0]:
                leaf.best = (top, offs)
            return K.FOUND
        if out == K.EXHAUSTED and st.reg[K.R_CUT] == 0:
            leaf.proven_lo = max(leaf.proven_lo, cap + 1)
            return K.EXHAUSTED
        return K.BUDGET

    def memo(self, leaf: Leaf) -> np.ndarray | None:
        """The leaf's failure memory (made on first use, within MEMO_TOTAL_ROWS for all)."""
        if leaf.memo is None:
            if len(leaf.members) < MEMO_FROM:
                return None
            want = MEMO_ROWS_PER_BUFFER * len(leaf.members)
            rows = min(MEMO_ROWS[1], max(MEMO_ROWS[0], 1 << (want - 1).bit_length()))
            if self.memo_rows + rows > self.memo_total:
                return None
            self.memo_rows += rows
            leaf.memo = K.new_memo(rows)
        return leaf.memo

    def built(self, leaf: Leaf, rev: bool) -> K.Problem:
        """The leaf's Problem, members in order, time reversed or not (built once each)."""
        if rev not in leaf.built:
            bs = self.inst.buffers
            sign = -1 if rev else 1  # reversed: step t becomes -t, a lifetime [s, e] is [-e, -s]
            leaf.built[rev] = K.build(
                [bs[i].size for i in leaf.members],
                [sign * (bs[i].end if rev else bs[i].start) for i in leaf.members],
                [sign * (bs[i].start if rev else bs[i].end) for i in leaf.members],
                self.inst.alignment,
            )
        return leaf.built[rev]

    def attempt(self, target: int, budget: int, variant: int) -> int:
        """Every leaf under target - base: FOUND (all fit), EXHAUSTED (one proven not to). A
        dive (`variant` >= DIVE) gives each leaf `dive_nodes` instead of `budget`."""
        self.attempts += 1
        out = K.FOUND
        hardest = sorted(self.plan.leaves, key=lambda lf: -(lf.base + lf.lb))
        for leaf in hardest:
            if self.out_of_time():
                return K.BUDGET
            nodes = dive_nodes(leaf) if variant >= DIVE else budget
            r = self.fit(leaf, target - leaf.base, nodes, variant)
            if r == K.EXHAUSTED:
                return K.EXHAUSTED
            if r == K.BUDGET:
                out = K.BUDGET
        return out

    def dives(self, target: int, nodes: int) -> int:
        """Dives under `target` until they have spent `nodes` nodes (an eighth on small
        instances, see DIVES_FROM): FOUND, EXHAUSTED (a leaf small enough for a dive to refute)
        or BUDGET."""
        if max((len(lf.members) for lf in self.plan.leaves), default=0) < DIVES_FROM:
            nodes //= 8
        spent = 0
        while spent < nodes and not self.out_of_time():
            before = self.nodes
            r = self.attempt(target, 0, DIVE + self.dived)
            self.dived += 1
            spent += max(self.nodes - before, 1)
            if r != K.BUDGET:
                return r
        return K.BUDGET

    def lower(self) -> int:
        return max((lf.base + lf.proven_lo for lf in self.plan.leaves), default=0)

    def share(self, other: Search, target: int, budget: int, variant: int) -> int:
        """An attempt and dives of `other` (a search of a restriction or a relaxation) under
        `target`, within this search's node budget: `max_nodes` is one budget for both."""
        before = other.nodes
        if self.max_nodes is not None:
            other.max_nodes = other.nodes + self.max_nodes - self.nodes
        r = other.attempt(target, budget, variant)
        if r == K.BUDGET:
            r = other.dives(target, budget)
        if self.max_nodes is not None:
            self.max_nodes -= other.nodes - before
        return r

    def assembled(self) -> tuple[int, AllocationSolution] | None:
        """The packing made of the fixed offsets and every leaf's best, or None."""
        offs = [0] * len(self.inst.buffers)
        for i, o in self.plan.fixed.items():
            offs[i] = o
        for leaf in self.plan.leaves:
            if leaf.best is None:
                return None
            for i, o in zip(leaf.members, leaf.best[1], strict=True):
                offs[i] = leaf.base + o
        sol = AllocationSolution(tuple(offs))
        return peak(self.inst, sol), sol


@dataclass
class Restricted:
    """A search of an instance's slot-reuse restriction, its packings expanded to the instance."""

    restriction: Restriction
    search: Search

    @classmethod
    def of(cls, inst: AllocationInstance, main: Search, memo_total: int) -> Restricted | None:
        """The restriction's search on `main`'s terms (seed, clock), or None without chains."""
        reuse = slot_reuse(inst)
        if reuse is None:
            return None
        merged = reuse.inst
        return cls(
            reuse,
            Search(merged, decompose(merged), main.seed, main.deadline, memo_total=memo_total),
        )

    def packing(
        self, main: Search, target: int, budget: int, variant: int
    ) -> AllocationSolution | None:
        """A packing under `target` from an attempt and dives within `main`'s node budget."""
        if main.out_of_time() or main.share(self.search, target, budget, variant) != K.FOUND:
            return None
        got = self.search.assembled()
        assert got is not None
        return self.restriction.expand(got[1])


WINDOW_MAX_BUFFERS = 5_000
"""Larger instances get no tight-window search: its extension is a CP-SAT model of each gap."""
EXTEND_S = 2.0  # wall clock an extension may take, at most (all gaps)
EXTEND_WORK = 0.01
"""CP-SAT's deterministic time per gap of an extension: on the tight set the extensions found
took 0.001 or less (up to 0.07 s), those that ran out took 0.05 in 2 s."""


@dataclass
class Windowed:
    """The tight-window relaxation's search (`allocation_window`): the core of the current
    windows, searched like a restriction, its packings extended by CP-SAT; where a gap between
    windows cannot be filled, the windows beside it grow into it (each side that faces it,
    counted from the window's busiest step, doubles), so each failure is followed by a wider
    core, until the windows are the whole and this search stops. The cores' proofs hold for the
    instance."""

    inst: AllocationInstance
    main: Search  # the full search: its clock and seed
    profile: list[tuple[int, int]]
    forced: frozenset[int] = frozenset()  # profile entries the windows hold after widening
    runs: list[tuple[int, int]] | None = None  # the windows as runs of profile entries
    win: Window | None = None
    search: Search | None = None  # the search of the current core
    restricted: Restricted | None = None  # and of its slot-reuse restriction
    target: int | None = None  # the target the windows were chosen for
    finished: bool = False  # the windows grew to the whole instance: nothing left to relax
    windows: int = 0  # cores searched
    spent: int = 0  # nodes of the earlier cores' searches
    proven: int = 0  # the best lower bound any core proved

    def nodes(self) -> int:
        here = 0 if self.search is None else self.search.nodes
        if self.restricted is not None:
            here += self.restricted.search.nodes
        return self.spent + here

    def drop(self) -> None:
        """Forget the current core's searches (their nodes stay counted)."""
        self.spent = self.nodes()
        self.search = self.restricted = None

    def current(self, target: int) -> Search | None:
        """The search of the core for `target` (a new one when the windows changed)."""
        if self.finished:
            return None
        if self.search is not None and target == self.target:
            return self.search
        self.target = target
        runs = tight_windows(self.profile, target, self.forced)
        if runs is None:
            self.finished = True
            return None
        p = self.profile
        steps = [(p[i][0], p[j + 1][0] - 1) for i, j in runs]
        if self.search is None or self.win is None or list(self.win.runs) != steps:
            self.drop()
            self.runs = runs
            self.win = window(self.inst, steps)
            core = self.win.core
            self.search = Search(
                core, decompose(core), self.main.seed, self.main.deadline, memo_total=MEMO_WINDOW
            )
            if max((len(lf.members) for lf in self.search.plan.leaves), default=0) >= DIVES_FROM:
                self.restricted = Restricted.of(core, self.main, MEMO_WINDOW // 2)
            self.windows += 1
        return self.search

    def run(self, target: int, budget: int, variant: int) -> tuple[int, AllocationSolution | None]:
        """The core's attempt and dives under `target`; its packing extended: (FOUND, the
        packing), (EXHAUSTED, None) when the core does not fit, else (BUDGET, None)."""
        x = self.current(target)
        if x is None:
            return K.BUDGET, None
        r = self.main.share(x, target, budget, variant)
        self.proven = max(self.proven, x.lower())
        if r == K.EXHAUSTED:
            return r, None
        core: AllocationSolution | None = None
        if r == K.FOUND:
            got = x.assembled()
            assert got is not None
            core = got[1]
        elif self.restricted is not None:
            core = self.restricted.packing(self.main, target, budget, variant)
        if core is None:
            return K.BUDGET, None
        assert self.win is not None and self.runs is not None
        left = self.main.deadline - time.perf_counter()
        ext = extend(
            self.inst,
            self.win,
            core.offsets,
            target,
            seed=self.main.seed,
            time_s=min(EXTEND_S, left),
            work=EXTEND_WORK,
        )
        if ext.solution is not None and not check(self.inst, ext.solution):
            return K.FOUND, ext.solution
        # the windows beside each failed gap grow into it (all gaps, should a packing fail)
        gaps = ext.failed if ext.solution is None else range(len(self.runs) + 1)
        self.forced = widened(self.profile, self.runs, gaps, self.forced)
        self.drop()  # wider windows next round
        return K.BUDGET, None


MEMO_WINDOW = MEMO_TOTAL_ROWS // 4  # failure memory of a core's search (its parts are small)


def kernel_ready(deadline: float) -> bool:
    """Load or compile the kernel if the time left allows it (else the caller falls back)."""
    left = deadline - time.perf_counter()
    return compiled_within([K.search], left, LOAD_S, COMPILE_S, _first_run)


def _first_run() -> None:
    """Run the search kernel once, on two buffers: numba loads or compiles it."""
    p = K.build([1, 2], [0, 1], [1, 2])
    K.run(p, K.new_state(p, 3), 10)


def warm_kernel() -> None:
    """Load or compile the search kernels whatever the time (`tensorplan warm`): the interval
    search's and the conflict-graph search's."""
    kernel_ready(time.perf_counter() + 3600.0)
    conflict_bb.warm()


def incumbent(inst: AllocationInstance, opts: Options, budget_s: float) -> AllocationSolution:
    """The start: the hint when it is a valid packing, else the portfolio heuristic's best."""
    from tensorplan.heuristics.allocation import multistart

    hint = opts.hint
    if isinstance(hint, AllocationSolution) and not check(inst.uncapped(), hint):
        return hint
    free = inst.uncapped()
    res = multistart(free, Options(time_limit=max(budget_s, 0.01), seed=opts.seed))
    if res.solution is not None:
        return res.solution
    return stacked(inst)


def polish(
    inst: AllocationInstance,
    opts: Options,
    best: tuple[int, AllocationSolution],
    deadline: float,
) -> tuple[int, AllocationSolution]:
    """The better of `best` and what the portfolio heuristic (`multistart`, from `best`) finds
    by `deadline`: the time a search refused for its size leaves, or the final turn on a large
    part (`FINAL_POLISH`), where ruin and recreate gains more than the search."""
    from tensorplan.heuristics.allocation import multistart

    left = deadline - time.perf_counter()
    if left < POLISH_MIN_S:
        return best
    free = inst.uncapped()
    res = multistart(free, Options(time_limit=left, seed=opts.seed, hint=best[1]))
    if res.solution is not None and not check(free, res.solution):
        got = peak(inst, res.solution)
        if got < best[0]:
            return got, res.solution
    return best


BLOCKS_SHARE = 0.25
"""Of the time left after the start, what the search of the composed blocks may take."""


def from_blocks(
    inst: AllocationInstance,
    opts: Options,
    deadline: float,
    lds: bool,
    max_nodes: int | None,
) -> AllocationSolution | None:
    """The packing this search finds for the blocks rectangle composition rebuilds
    (`heuristics.allocation_compose`), expanded to the buffers, in `BLOCKS_SHARE` of the time
    left; None when nothing composes. A block packing is a packing, so it can only serve as a
    start or meet the bound; it proves nothing else. A compiler's trace has many equal
    lifetimes and same-size successions: MiniMalloc's A-K compose into 11-166 blocks, and the
    blocks of all but J pack at the max-load bound in at most 0.11 s (D took 8 s unaided)."""
    began = time.perf_counter()
    share = BLOCKS_SHARE * (deadline - began)
    comp = compose(inst, began + share / 4)
    if comp is None:
        return None
    limit = share - (time.perf_counter() - began)
    if limit <= MIN_BLOCKS_S:
        return None
    inner = replace(opts, time_limit=limit, hint=None, progress=None)
    blocks = replace(comp.blocks, capacity=inst.capacity)
    res = solve(blocks, inner, name="bb-blocks", lds=lds, max_nodes=max_nodes, blocks=False)
    if res.solution is None:
        return None
    offsets = comp.expand(np.asarray(res.solution.offsets, dtype=np.int64), len(inst.buffers))
    return AllocationSolution(tuple(offsets.tolist()))


MIN_BLOCKS_S = 0.05
"""The blocks are not searched with less time than this."""


def solve(
    inst: AllocationInstance,
    opts: Options,
    *,
    name: str = "bb",
    lds: bool = False,
    max_nodes: int | None = None,
    blocks: bool = True,
) -> Result:
    """Branch and bound (`lds=False`, exact) or its limited-discrepancy anytime form; it
    reports its best peak and lower bound after each round (`Reporter`). Concurrent lifetimes
    (a conflict graph) go to the search on the graph (`allocation_conflict_bb`). `blocks`: the
    composed blocks are searched first (`from_blocks`; tests of the other mechanisms turn it
    off)."""
    if inst.conflicts is not None:
        return conflict_bb.solve(inst, opts, name=name, lds=lds, max_nodes=max_nodes)
    t0 = time.perf_counter()
    report = Reporter(opts, name)
    deadline = t0 + opts.time_limit * (1 - RESERVE_SHARE) - RESERVE_S
    lb = lower_bound(inst)
    cap = inst.capacity

    def done(
        status: Status, sol: AllocationSolution | None, bound: int | None, msg: str, **stats: object
    ) -> Result:
        obj = None if sol is None else peak(inst, sol)
        res = Result(name, status, obj, bound, time.perf_counter() - t0, sol, msg, stats)
        return report.result(res)

    if cap is not None and lb > cap:
        return done(Status.INFEASIBLE, None, None, f"live sizes reach {lb} > capacity {cap}")

    def settled(sol: AllocationSolution, top: int, what: str) -> Result | None:
        """The answer when packing `sol` (peak `top`) settles the question, else None."""
        if top <= lb:
            return done(Status.OPTIMAL, sol, lb, f"{what} meets the max-load bound")
        if cap is not None and top <= cap:
            return done(Status.FEASIBLE, sol, lb, f"fits within capacity {cap}")
        return None

    start = incumbent(inst, opts, min(0.5, opts.time_limit * 0.1))
    best_peak = peak(inst, start)
    report(best_peak, lb)
    if (answer := settled(start, best_peak, "the start")) is not None:
        return answer
    if not kernel_ready(deadline):
        status = Status.FEASIBLE if cap is None else Status.UNKNOWN
        return done(
            status,
            start if cap is None else None,
            lb,
            "no time to compile the search kernel: the start is returned",
        )
    if deadline - time.perf_counter() < DECOMPOSE_S_PER_BUFFER * len(inst.buffers):
        status = Status.FEASIBLE if cap is None else Status.UNKNOWN
        return done(
            status,
            start if cap is None else None,
            lb,
            "no time left to decompose the instance: the start is returned",
        )
    with report.ticking():  # the blocks' search reports to nobody: the heartbeat goes on
        composed = from_blocks(inst, opts, deadline, lds, max_nodes) if blocks else None
    if composed is not None and (top := peak(inst, composed)) < best_peak:
        start, best_peak = composed, top
        report(best_peak, lb)
        if (answer := settled(start, best_peak, "the composed blocks' packing")) is not None:
            return answer
    plan = decompose(inst)
    # on a large part the last FINAL_POLISH of the time goes to the portfolio heuristic when
    # the search has not closed the gap by then (not with a node budget: that run reproduces)
    largest = max((len(lf.members) for lf in plan.leaves), default=0)
    polishes = cap is None and max_nodes is None and not lds and largest >= POLISH_FROM
    final = FINAL_POLISH if polishes else 0.0
    search_end = deadline - final * (deadline - time.perf_counter())
    run = Portfolio.of(inst, plan, opts, search_end, max_nodes, lds)
    if cap is not None:
        with report.ticking():
            status, sol, bound, msg = run.within(cap, report)
        return done(status, sol, bound, msg, **run.stats())
    with report.ticking():  # the kernel releases the GIL: the heartbeat beats during a round
        best, lo = run.minimise((best_peak, start), opts.gap, report)
        if best[0] > lo and not (opts.gap > 0 and best[0] - lo <= opts.gap * lo):
            best = polish(inst, opts, best, deadline)
            report(best[0])
    status = Status.OPTIMAL if best[0] <= lo and not lds else Status.FEASIBLE
    if status is Status.OPTIMAL:
        msg = "proven optimal"
    elif run.s.refused:
        msg = "a part is too big to search: the portfolio heuristic had the time left"
    elif run.s.out_of_time():
        msg = "time limit"
    else:
        msg = "gap reached" if opts.gap > 0 else "stopped"
    return done(status, best[1], lo, msg, **run.stats())


@dataclass
class Portfolio:
    """The full search `s` with, on large parts, the slot-reuse restriction `m` and the
    tight-window relaxation `win` beside it, round by round (Luby budgets)."""

    inst: AllocationInstance
    plan: Plan
    s: Search
    m: Restricted | None
    win: Windowed | None
    two_threads: bool
    lb: int
    step: int  # `grain`: bounds round up to it, descent targets down

    @classmethod
    def of(
        cls,
        inst: AllocationInstance,
        plan: Plan,
        opts: Options,
        deadline: float,
        max_nodes: int | None,
        lds: bool,
    ) -> Portfolio:
        """The searches for `inst`: the restriction and the windows only on large parts (as
        dives: on small ones a long search proves what a restriction cannot, and half its nodes
        would go there), when there is time to build them (about a decomposition's)."""
        s = Search(inst, plan, opts.seed, deadline, max_nodes, lds)
        largest = max((len(lf.members) for lf in plan.leaves), default=0)
        reuse_ok = (
            not lds
            and largest >= DIVES_FROM
            and deadline - time.perf_counter() > DECOMPOSE_S_PER_BUFFER * len(inst.buffers)
        )
        m = Restricted.of(inst, s, MEMO_TOTAL_ROWS // 2) if reuse_ok else None
        win = (
            Windowed(inst, s, live_profile(inst))
            if reuse_ok and len(inst.buffers) <= WINDOW_MAX_BUFFERS
            else None
        )
        # with two threads the restriction's and the windows' searches run beside the full
        # one, round by round; the outcome is the same as one after the other (each round is
        # joined and the full search's outcome comes first), only sooner. Not with a node
        # budget: they share it
        two = opts.threads >= 2 and (m is not None or win is not None) and max_nodes is None
        return cls(inst, plan, s, m, win, two, lower_bound(inst), grain(inst))

    def others(
        self, target: int, budget: int, variant: int
    ) -> tuple[int, AllocationSolution | None]:
        """The restriction's attempt and dives under `target`, then the windows': FOUND and
        the first packing found, EXHAUSTED when the windows' relaxation proved there is none,
        else BUDGET."""
        m, s = self.m, self.s
        if m is not None and (found := m.packing(s, target, budget, variant)) is not None:
            return K.FOUND, found
        if self.win is None or s.out_of_time():
            return K.BUDGET, None
        return self.win.run(target, budget, variant)

    def round_(
        self, target: int, budget: int, variant: int
    ) -> tuple[int, AllocationSolution | None]:
        """The full search's attempt and dives under `target`, then the others' (with two
        threads, meanwhile): the full search's outcome if it has one, else the others'
        (a packing, or the window's proof), else BUDGET."""
        # the kernel and CP-SAT release the GIL, so the searches do run at once
        with ThreadPoolExecutor(1) if self.two_threads else nullcontext() as pool:
            fut = None if pool is None else pool.submit(self.others, target, budget, variant)
            r = self.s.attempt(target, budget, variant)
            if r == K.BUDGET:
                r = self.s.dives(target, budget)
            if fut is not None:
                r2, found = fut.result()
            else:
                r2, found = self.others(target, budget, variant) if r == K.BUDGET else (r, None)
        return (r, None) if r != K.BUDGET else (r2, found)

    def lower(self) -> int:
        """The best lower bound: max load, the full search's proofs, the windows', rounded up
        to the grain."""
        lo = max(self.lb, self.s.lower(), 0 if self.win is None else self.win.proven)
        return -(-lo // self.step) * self.step

    def stats(self) -> dict[str, object]:
        """The searches' counters, for the result's stats."""
        s, m, win, plan = self.s, self.m, self.win, self.plan
        return {
            "nodes": s.nodes,
            "reuse_nodes": 0 if m is None else m.search.nodes,
            "window_nodes": 0 if win is None else win.nodes(),
            "windows": 0 if win is None else win.windows,
            "attempts": s.attempts,
            "dives": s.dived,
            "leaves": len(plan.leaves),
            "cuts": plan.cuts,
            "stacked": plan.stacked,
        }

    def within(
        self, cap: int, report: Reporter | None = None
    ) -> tuple[Status, AllocationSolution | None, int | None, str]:
        """Capacity mode: rounds under `cap` until a packing, a proof there is none, or the
        time limit; (status, packing, bound, message). `report` hears the bound each round."""
        s = self.s
        budget, variant = FIRST_BUDGET, 0
        while not s.out_of_time():
            if report is not None:
                report(None, self.lower())
            r, found = self.round_(cap, budget, variant)
            if r == K.FOUND or found is not None:
                got = s.assembled() if found is None else (peak(self.inst, found), found)
                assert got is not None
                return Status.FEASIBLE, got[1], self.lower(), f"fits within capacity {cap}"
            if r == K.EXHAUSTED:
                msg = f"no packing within capacity {cap} (search exhausted)"
                return Status.INFEASIBLE, None, None, msg
            variant += 1
            budget = FIRST_BUDGET * luby(variant)
        msg = f"time limit: no packing within capacity {cap} found, none ruled out"
        return Status.UNKNOWN, None, self.lower(), msg

    def minimise(
        self, best: tuple[int, AllocationSolution], gap: float, report: Reporter | None = None
    ) -> tuple[tuple[int, AllocationSolution], int]:
        """Rounds at the lower bound (a packing there ends it, a proof raises it), each
        followed by a descent below the best peak, until they meet, the relative `gap` is
        reached or time runs out; (best (peak, packing), lower bound). `report` hears both
        after each round. The descent is a whole round (the restriction's and the windows'
        searches too) with the same budget: on MiniMalloc's J, which nobody proves, the time
        at the bound is lost, and the windows pack under targets the full search misses
        (60 s: 1.0321 of the max load before, 1.0135 and 1.0176 with seeds 0 and 1)."""
        s, inst = self.s, self.inst
        budget, variant = FIRST_BUDGET, 0
        frac = 0.5  # the descent aims this share of the gap below the best peak; halves on failure
        while not s.out_of_time():
            lo = self.lower()
            if report is not None:
                report(best[0], lo)
            if lo >= best[0] or (gap > 0 and best[0] - lo <= gap * lo):
                break
            r, found = self.round_(lo, budget, variant)
            if found is not None and peak(inst, found) <= lo:
                best = (peak(inst, found), found)
                continue  # a packing at the bound
            got = s.assembled()
            if got is not None and got[0] < best[0]:
                best = got
            if r != K.BUDGET:
                continue  # a packing at the bound, or a proof that raised it
            # the descent: a round (the windows included) under a target this share of the gap
            # below the best peak, on the grain; the share halves on failure, doubles on success
            target = (best[0] - max(1, int((best[0] - lo) * frac))) // self.step * self.step
            if target > lo and not s.out_of_time():
                r, found = self.round_(target, budget, variant)
                got = s.assembled()
                if found is not None and (got is None or peak(inst, found) < got[0]):
                    got = (peak(inst, found), found)
                if got is not None and got[0] < best[0]:
                    best = got
                    frac = min(0.5, frac * 2)
                elif r == K.BUDGET:
                    frac /= 2
            variant += 1
            budget = FIRST_BUDGET * luby(variant)
        return best, self.lower()


def solve_bb(inst: AllocationInstance, opts: Options) -> Result:
    """The exact search (see the module docstring)."""
    return solve(inst, opts)


LDS_NODES = 1_000_000  # the anytime form's default node budget (about a second or less)


def solve_lds(inst: AllocationInstance, opts: Options) -> Result:
    """The same search with discrepancies limited per attempt (0, 1, 2, ...), the same dives and
    a small node budget: an anytime heuristic, `feasible` unless its packing meets the bound."""
    res = solve(inst, opts, name="bb-lds", lds=True, max_nodes=LDS_NODES)
    if res.status is Status.OPTIMAL:
        return res
    return Result(
        res.solver,
        res.status,
        res.objective,
        None,
        res.runtime_s,
        res.solution,
        res.message,
        res.stats,
    )


# `bb-lds` is the same search run as an anytime heuristic (kind "heuristic"): it lives beside the
# exact search whose kernel it drives; the kind is declared, not implied by the folder.
SOLVERS = [
    Solver(
        "bb",
        "exact",
        solve_bb,
        "branch and bound over canonical placements (time sections, decomposition), numba",
        frozenset({"time_limit", "seed", "threads", "gap", "hint", "capacity"}),
        supports=frozenset({"conflicts"}),
        warm=warm_kernel,
    ),
    Solver(
        "bb-lds",
        "heuristic",
        solve_lds,
        "bb as an anytime heuristic: limited discrepancy, restarts, small node budget",
        frozenset({"time_limit", "seed", "hint", "capacity"}),
        supports=frozenset({"conflicts"}),
        warm=warm_kernel,
    ),
]

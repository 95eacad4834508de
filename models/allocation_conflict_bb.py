"""`bb` and `bb-lds` on concurrent lifetimes: branch and bound over canonical placements of a
conflict graph (`AllocationInstance.conflicts`).

The compiled search (`allocation_conflict_bb_kernels`) answers "does this part fit under cap C?"
and goes on below each packing it finds. Around it:

- reductions: a buffer whose conflicts are all conflicts of a larger buffer it does not conflict
  with goes at that one's offset (`absorb`); the graph splits into connected parts (the peak is
  the highest part's, each on its base); a buffer conflicting with every other of its part goes
  to the bottom of it (which may split it again: `decompose`);
- bounds: the clique family of each part (every maximal clique when there are few enough, else
  heavy ones: `family`), whose heaviest is the lower bound (exact when all were enumerated, else
  the exact clique search of `problems.allocation_conflicts`), and what the searches prove;
- the start: first fit in a few orders (the instance's first), a short descent of the search
  itself and the hint;
- rounds with Luby node budgets, each a search at the lower bound (a packing there is optimal;
  running out of nodes to visit raises the bound to the smallest bound it pruned, with the
  failure memory shared by all rounds) and a descent below the best packing (half the gap,
  halving on failure; limited discrepancy: it looks for packings, not proofs), each round in
  another branching order (fixed orders, then seeded perturbations);
- the portfolio heuristic of concurrent instances (`Polish`) once during the rounds, and again
  for the second half of the limit when nothing is proven: on large parts far from their bound
  it gains more per second than the search.

`bb-lds` runs the same with discrepancies limited in every round and a node budget.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field

import numpy as np

from tensorplan.heuristics import allocation_conflicts as hc
from tensorplan.models import allocation_conflict_bb_kernels as K
from tensorplan.problems import allocation_conflicts as ac
from tensorplan.problems.allocation import (
    AllocationInstance,
    AllocationSolution,
    Buffer,
    check,
    clique_bound,
    conflict_graph,
    grain,
    peak,
    sizes,
    solve_reserve,
    stacked,
)
from tensorplan.problems.core import Options, Reporter, Result, Status, compiled_within

RESERVE_SHARE, RESERVE_S = 0.03, 0.05  # as `allocation_bb`: time kept for assembling, checking
FIRST_BUDGET = 2_000  # nodes of a round, times the Luby sequence
DESCENT_LDS = True  # descents below the best packing limit discrepancies (packings, not proofs)
DESCENT_SHARE = 1.0  # a descent below the best packing gets this share of its round's budget
STEPS_PER_CALL = 20_000_000  # about 20-50 ms of kernel work per call between clock checks
SLICE = 50_000  # at most this many nodes per kernel call
FIRST_CALL_NODES, CALL_S = 64, 0.03
"""A part's first kernel call runs at most this many nodes; later calls as many as took
`CALL_S` at the last call's pace, and never more than the time left holds. The step estimate
alone was off by 7x on dense 2,000-buffer graphs: a call of 774 nodes took 0.22 s, and `bb`
at 1 s ended at 1.12 s."""
LDS_STEP = 4  # `bb-lds`: discrepancies allowed in round k: 4 (k + 1)
CLIQUE_SHARE = 0.1  # of the time limit, at most, for the exact clique bounds
POLISH_AT, POLISH_SHARE = 0.3, 0.35
"""When the search has not closed the gap by this share of the time limit, the portfolio
heuristic gets this share of the time left from the best packing (`Polish`)."""
FINAL_AT = 0.5
"""Not proven by this share of the time limit: the portfolio heuristic gets the rest, from the
best packing. Measured at 10 s on OmniMalloc's 500-buffer clock sources
(`benchmarks/allocation_concurrent.py`): every proof there came within 1.4 s; against a last
turn at 0.8, a turn at 0.5 was as good or better on all six instances left open, and with none
the portfolio alone (`fast`) beat `bb` on half of them."""
BIG_PART, BIG_POLISH_AT, BIG_POLISH_SHARE = 1_000, 0.1, 0.85
"""From this many buffers in a part on, the portfolio heuristic comes sooner, gets more and
starts from its own greedy passes: there the search seldom closes the gap, and ruin and
recreate gains more per second (measured on the concurrent family at 10 s: 2,000 buffers 1,730
against the search's 1,748; 5,000 buffers 1,868 from our start, 1,845 from its own)."""
START_SHARE = 0.1  # of the time limit, at most, for the start (first fit, a descent, heuristics)
COMPILE_S = 30.0  # what compiling the kernels may take (no numba cache yet; measured 19 s)
LOAD_S = 0.5  # what loading them from the cache may take
MAX_SEEDS = 3_000  # clique family: at most this many seeds (the heaviest buffers) per part
CLIQUE_WORK = 300_000_000  # clique family: the greedy cliques' work budget (about 0.25 s)
ABSORB_MAX = 4_000  # `absorb` works on instances up to this many buffers
MAX_MEMBERSHIP = 100_000  # clique family: at most this many members in all, per part
HEAVY = 0.85  # clique family: the cliques at least this share of the heaviest one's weight ...
MIN_FAMILY = 64  # ... and at least this many
RANKS = 4  # fixed branching orders before the seeded ones
MEMO_FROM = 16  # parts with fewer buffers get no failure memory (their searches are short)
MEMO_ROWS_PER_BUFFER = 4096  # failure memory of a part: this many entries per buffer (24 B each)
MEMO_ROWS = (1 << 12, 1 << 20)  # at least, at most per part (a power of two)
MEMO_TOTAL_ROWS = 1 << 22  # over all parts (96 MB); later parts get none


@dataclass
class Part:
    """A connected part: its buffers (instance indices, in kernel numbering), the base it sits
    on, the kernel's arrays, the best own packing (peak, offsets in kernel numbering) and the
    proven lower bound of its own peak."""

    members: np.ndarray
    base: int
    arrays: K.Part
    lb: int
    proven_lo: int
    best: tuple[int, np.ndarray] | None = None
    ranks: dict[int, np.ndarray] = field(default_factory=dict)
    memo: np.ndarray | None = None  # the failure memory, shared by all its searches
    node_s: float | None = None  # seconds a node took in its last kernel call

    def rank(self, variant: int, seed: int) -> np.ndarray:
        """The order children are tried in at equal offset, for round `variant`."""
        if variant not in self.ranks:
            p = self.arrays
            n = len(p.size)
            size = p.size.astype(np.float64)  # (products of sizes and degrees may pass int64)
            deg = np.diff(p.ptr).astype(np.float64)
            weight = clique_weight(p).astype(np.float64)
            keys = [  # the kernel numbering, size x degree, heaviest clique, degree (then size)
                np.arange(n, dtype=np.float64),
                -size * (deg + 1),
                -(weight * 4 + size),
                -deg * (size.max(initial=1) + 1) - size,
            ]
            key = keys[variant % RANKS]
            if variant >= RANKS:
                rng = np.random.default_rng(seed * 1_000_003 + variant)
                key = key * (1 + 0.5 * rng.random(n)) if variant % RANKS else rng.random(n)
            order = np.lexsort((np.arange(n), key))
            rank = np.empty(n, np.int64)
            rank[order] = np.arange(n)
            self.ranks[variant] = rank
        return self.ranks[variant]


def clique_weight(p: K.Part) -> np.ndarray:
    """Per buffer, the heaviest clique of the family it belongs to (plain sizes)."""
    w = np.add.reduceat(p.size[p.cmem], p.cptr[:-1]) if len(p.cmem) else np.zeros(0, np.int64)
    out = p.size.copy()
    for c, (lo, hi) in enumerate(zip(p.cptr[:-1].tolist(), p.cptr[1:].tolist(), strict=True)):
        m = p.cmem[lo:hi]
        out[m] = np.maximum(out[m], w[c])
    return out


def _rows(ptr: np.ndarray) -> np.ndarray:
    """The row (buffer) of each entry of a CSR array."""
    return np.repeat(np.arange(len(ptr) - 1, dtype=np.int64), np.diff(ptr))


def absorb(g: ac.Graph, size: np.ndarray) -> np.ndarray:
    """For each buffer, the buffer it goes at the offset of, or -1 (searched itself). v goes
    with u when they do not conflict, u is at least as large and conflicts with all that v
    does: v inside u's addresses meets none of its own conflicts, so v can leave the search.
    Hosts are never absorbed themselves, and neighbourhoods are the whole graph's, so the
    buffers that remain packed pass for all: a neighbour x of v is one of u, and when x went
    with a host h, v is one of h's, h one of u's, so h and u, holding x and v, do not meet.
    Smaller buffers are tried first; up to ABSORB_MAX buffers (an adjacency matrix)."""
    n = g.n
    host = np.full(n, -1, np.int64)
    if n > ABSORB_MAX or n < 2:
        return host
    adj = np.zeros((n, n), np.bool_)
    adj[_rows(g.indptr), g.indices] = True
    deg = g.degree()
    is_host = np.zeros(n, np.bool_)
    for v in np.lexsort((-np.arange(n), size)).tolist():
        if is_host[v] or deg[v] == 0:
            continue
        nb = g.neighbours(v)
        w = nb[np.argmin(deg[nb])]
        cand = np.flatnonzero(adj[w] & ~adj[v] & (size >= size[v]) & (host < 0))
        cand = cand[cand != v]
        if not len(cand):
            continue
        ok = adj[cand][:, nb].all(axis=1)
        if ok.any():
            u = int(cand[np.flatnonzero(ok)[0]])
            host[v] = u
            is_host[u] = True
    return host


def decompose(
    g: ac.Graph, size: np.ndarray, align: int, present: np.ndarray
) -> tuple[dict[int, int], list[tuple[np.ndarray, int]]]:
    """Connected parts, and buffers conflicting with all others of their part stacked at its
    bottom (aligned sizes only), alternated until nothing more splits: (fixed offsets, parts as
    (members, base)). A buffer live against every other can go to the bottom of any packing:
    what was below it moves up by its size, what was above stays."""
    n = g.n
    fixed: dict[int, int] = {}
    parts: list[tuple[np.ndarray, int]] = []
    work = [(np.flatnonzero(present).astype(np.int64), 0)]
    alive = np.zeros(n, np.bool_)
    rows = _rows(g.indptr)
    while work:
        members, base = work.pop()
        alive[:] = False
        alive[members] = True
        label = K.components(g.indptr, g.indices, alive)[members]
        for comp in (members[label == k] for k in range(int(label.max(initial=-1)) + 1)):
            if len(comp) > 1:
                alive[:] = False
                alive[comp] = True
                inside = alive[g.indices] & alive[rows]
                deg = np.bincount(rows[inside], minlength=n)
                full = comp[(deg[comp] == len(comp) - 1) & (size[comp] % align == 0)]
                if len(full):
                    top = base
                    for v in sorted(full.tolist(), key=lambda v: (-int(size[v]), v)):
                        fixed[v] = top
                        top += int(size[v])
                    rest = np.setdiff1d(comp, full)
                    if len(rest):
                        work.append((rest, top))
                    continue
            parts.append((comp, base))
    return fixed, parts


def build(
    g: ac.Graph, size: np.ndarray, members: np.ndarray, align: int, until: float
) -> tuple[np.ndarray, K.Part, int | None]:
    """The members in kernel numbering (larger size, then degree, first), the kernel's arrays
    of their part (the conflict graph among them, twins, stacks, the clique family: `family`,
    enumerated until `until` at most) and the exact clique bound when it is known."""
    n = len(members)
    loc = np.full(g.n, -1, np.int64)
    loc[members] = np.arange(n)
    rows = [loc[g.neighbours(v)] for v in members.tolist()]
    rows = [r[r >= 0] for r in rows]
    deg = np.array([len(r) for r in rows], dtype=np.int64)
    order = np.lexsort((np.arange(n), -deg, -size[members]))
    inv = np.empty(n, np.int64)
    inv[order] = np.arange(n)
    sz = size[members][order].astype(np.int64)
    nbrs = [np.sort(inv[rows[k]]) for k in order.tolist()]
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum([len(r) for r in nbrs], out=ptr[1:])
    nbr = np.concatenate(nbrs).astype(np.int64) if nbrs else np.zeros(0, np.int64)
    twin = twins(sz, nbrs)
    rsz = -(-sz // align) * align
    kept, exact = family(ptr, nbr, sz, align, until)
    cptr = np.zeros(len(kept) + 1, np.int64)
    np.cumsum([len(c) for c in kept], out=cptr[1:])
    cmem = np.concatenate(kept).astype(np.int64) if kept else np.zeros(0, np.int64)
    owner = np.repeat(np.arange(len(kept), dtype=np.int64), np.diff(cptr))
    by = np.lexsort((owner, cmem))
    vptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(cmem, minlength=n), out=vptr[1:])
    corr = np.zeros(len(kept), np.int64)
    if len(kept):
        corr = np.maximum.reduceat(rsz[cmem] - sz[cmem], cptr[:-1]).astype(np.int64)
    tc, tptr, tmem = stacks(sz, nbrs, align)
    arrays = K.Part(
        sz,
        rsz,
        ptr,
        nbr,
        twin,
        np.arange(n, dtype=np.int64),
        cptr,
        cmem,
        vptr,
        owner[by],
        corr,
        tc,
        tptr,
        tmem,
    )
    return members[order], arrays, exact


def stacks(
    size: np.ndarray, nbrs: list[np.ndarray], align: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Classes of buffers with the same closed neighbourhood and sizes not all equal, sizes
    multiples of the alignment (`K.Part.tc`): (class of each buffer or -1, CSR members)."""
    groups: dict[bytes, list[int]] = {}
    for v, r in enumerate(nbrs):
        if size[v] % align == 0:
            groups.setdefault(_closed(r, v).tobytes(), []).append(v)
    kept = [g for g in groups.values() if len(g) > 1 and len({int(size[v]) for v in g}) > 1]
    tc = np.full(len(nbrs), -1, np.int64)
    tptr = np.zeros(len(kept) + 1, np.int64)
    np.cumsum([len(g) for g in kept], out=tptr[1:])
    for c, g in enumerate(kept):
        tc[g] = c
    tmem = np.array([v for g in kept for v in g], dtype=np.int64)
    return tc, tptr, tmem


def family(
    ptr: np.ndarray, nbr: np.ndarray, size: np.ndarray, align: int, until: float
) -> tuple[list[np.ndarray], int | None]:
    """The cliques the search bounds with (every maximal clique when there are few enough:
    Bron-Kerbosch, stopped at MAX_MEMBERSHIP members in all or at `until`, else those found
    and a greedy maximal clique from each of the heaviest buffers; of those the ones within
    HEAVY of the heaviest, at least MIN_FAMILY), and the exact clique bound when the search of
    maximal cliques ended. A clique is a column of the packing: its members stack, and a gap
    left in it is lost."""
    n = len(size)
    reach = size + np.bincount(_rows(ptr), weights=size[nbr], minlength=n).astype(np.int64)
    seeds = np.argsort(-reach, kind="stable")[:MAX_SEEDS].astype(np.int64)
    cptr, cmem = K.greedy_cliques(ptr, nbr, size, seeds, CLIQUE_WORK)
    found = {cmem[a:b].tobytes(): cmem[a:b] for a, b in itertools.pairwise(cptr.tolist())}
    cliques, complete = maximal_cliques(ptr, nbr, MAX_MEMBERSHIP, until)
    for c in cliques:
        found.setdefault(c.tobytes(), c)
    kept = sorted((c for c in found.values() if len(c) > 1), key=lambda c: -int(size[c].sum()))
    lb = max((ac.rounded_clique_bound(size, c.tolist(), align) for c in kept), default=0)
    if kept:  # light cliques cannot fill up before heavier ones: they seldom prune
        heavy = HEAVY * float(size[kept[0]].sum())
        keep = max(MIN_FAMILY, sum(1 for c in kept if size[c].sum() >= heavy))
        kept = kept[:keep]
    total = np.cumsum([len(c) for c in kept])
    kept = kept[: int(np.searchsorted(total, MAX_MEMBERSHIP, side="right"))]
    return kept, lb if complete else None


def maximal_cliques(
    ptr: np.ndarray, nbr: np.ndarray, budget: int, until: float
) -> tuple[list[np.ndarray], bool]:
    """Maximal cliques (sorted members) by Bron-Kerbosch with Tomita's pivot, and whether that
    is all of them: it stops when their members add up to `budget` or the clock passes
    `until`."""
    if time.perf_counter() > until:  # the sets alone take seconds on dense graphs
        return [], False
    adj = [set(nbr[ptr[v] : ptr[v + 1]].tolist()) for v in range(len(ptr) - 1)]
    out: list[np.ndarray] = []
    state = {"members": 0, "calls": 0}

    def expand(chosen: list[int], cand: set[int], done: set[int]) -> bool:
        state["calls"] += 1  # the clock at every call: on dense graphs of thousands of
        if time.perf_counter() > until:  # buffers one pivot choice takes a quarter second
            return False
        if not cand and not done:
            out.append(np.array(sorted(chosen), dtype=np.int64))
            state["members"] += len(chosen)
            return state["members"] <= budget
        pivot = max(cand | done, key=lambda u: len(cand & adj[u]))
        for v in list(cand - adj[pivot]):
            chosen.append(v)
            if not expand(chosen, cand & adj[v], done & adj[v]):
                return False
            chosen.pop()
            cand.discard(v)
            done.add(v)
        return True

    return out, expand([], set(range(len(adj))), set())


def _closed(row: np.ndarray, v: int) -> np.ndarray:
    """The closed neighbourhood of v from its sorted row (v is not in it): a linear insert,
    where `np.union1d` sorts again (7 s for 5,000 dense rows against 0.1 s)."""
    return np.insert(row, int(np.searchsorted(row, v)), v).astype(np.int64)


def twins(size: np.ndarray, nbrs: list[np.ndarray]) -> np.ndarray:
    """For each buffer, the previous one of its twin class, or -1. A class: the same size and
    the same neighbours (not conflicting with each other), else the same size and the same
    neighbours besides each other (all conflicting); each buffer in one class at most, so that
    sorting each class by offset, as the search asks, is a symmetry of any packing."""
    opened = [(int(size[v]), r.tobytes()) for v, r in enumerate(nbrs)]
    count: dict[tuple[int, bytes], int] = {}
    for pair in opened:
        count[pair] = count.get(pair, 0) + 1
    twin = np.full(len(nbrs), -1, np.int64)
    seen: dict[tuple[bool, int, bytes], int] = {}
    for v, r in enumerate(nbrs):
        if count[opened[v]] >= 2:
            key = (False, *opened[v])
        else:
            key = (True, int(size[v]), _closed(r, v).tobytes())
        twin[v] = seen.get(key, -1)
        seen[key] = v
    return twin


def luby(i: int) -> int:
    """The i-th term (from 0) of the Luby sequence 1 1 2 1 1 2 4 1 1 2 ..."""
    k = 1
    while (1 << k) - 1 < i + 1:
        k += 1
    while i + 1 != (1 << k) - 1:
        i -= (1 << (k - 1)) - 1
        k = 1
        while (1 << k) - 1 < i + 1:
            k += 1
    return 1 << (k - 1)


@dataclass
class Search:
    """The parts of one instance, searched round by round, with the clock and node budget."""

    inst: AllocationInstance
    fixed: dict[int, int]
    parts: list[Part]
    seed: int
    deadline: float
    host: np.ndarray  # `absorb`: the buffer each one goes with, or -1
    max_nodes: int | None = None
    lds: bool = False
    nodes: int = 0
    attempts: int = 0
    memo_rows: int = 0  # failure-memory entries handed out to parts so far
    step: int = 1  # `grain`: the bound rounds up to it, descent targets down

    def memo(self, part: Part) -> np.ndarray | None:
        """The part's failure memory (made on first use, within MEMO_TOTAL_ROWS for all)."""
        if part.memo is None and len(part.members) >= MEMO_FROM and not self.lds:
            want = MEMO_ROWS_PER_BUFFER * len(part.members)
            rows = min(MEMO_ROWS[1], max(MEMO_ROWS[0], 1 << (want - 1).bit_length()))
            if self.memo_rows + rows <= MEMO_TOTAL_ROWS:
                self.memo_rows += rows
                part.memo = K.new_memo(rows)
        return part.memo

    def out_of_time(self) -> bool:
        if self.max_nodes is not None and self.nodes >= self.max_nodes:
            return True
        return time.perf_counter() >= self.deadline

    def fit(
        self,
        part: Part,
        cap: int,
        budget: int,
        variant: int,
        improve: bool = True,
        lds: bool = False,
    ) -> int:
        """Search "part fits under cap?" for `budget` nodes in round `variant`'s order, and
        with `improve` on below each packing found, with `lds` (or in `bb-lds`) within a
        discrepancy limit: FOUND (the best kept in `part.best`), EXHAUSTED (proven not to:
        `part.proven_lo` rises) or BUDGET."""
        if part.best is not None and part.best[0] <= cap:
            return K.FOUND
        if cap < part.proven_lo:
            return K.EXHAUSTED
        p = part.arrays._replace(rank=part.rank(variant, self.seed))
        st = K.new_state(p, cap)
        a = self.inst.alignment
        max_disc = LDS_STEP * (variant + 1) if self.lds or lds else -1
        work = 2 * len(p.size) + len(p.cmem) + len(p.corr) + 1  # steps of a node, about

        def paced() -> int:  # nodes per call: `CALL_S` at the last pace, else a first call's
            if part.node_s is None:
                return max(16, min(SLICE, STEPS_PER_CALL // work, FIRST_CALL_NODES))
            return max(16, min(SLICE, int(CALL_S / part.node_s)))

        chunk = paced()
        used, found, out = 0, False, K.BUDGET
        while used < budget and not self.out_of_time():
            step = min(chunk, budget - used)
            if part.node_s is not None:  # not past the deadline by more than a node or so
                left = self.deadline - time.perf_counter()
                step = max(1, min(step, int(left / part.node_s)))
            if self.max_nodes is not None:
                step = max(1, min(step, self.max_nodes - self.nodes))
            before = int(st.reg[K.R_NODES])
            began = time.perf_counter()
            out = K.run(p, st, step, a, max_disc, self.memo(part))
            spent = int(st.reg[K.R_NODES]) - before
            if spent > 0:
                part.node_s = (time.perf_counter() - began) / spent
                chunk = paced()
            used += max(spent, 1)
            self.nodes += spent
            if out == K.FOUND:
                top = int(st.reg[K.R_BEST])
                if part.best is None or top < part.best[0]:
                    part.best = (top, st.best.copy())
                found = True
                if not improve or top - 1 < part.proven_lo:
                    break
                st.reg[K.R_CAP] = top - 1
            elif out == K.EXHAUSTED:
                break
        if out == K.EXHAUSTED and st.reg[K.R_CUT] == 0:
            minp = int(st.reg[K.R_MINP])
            lo = int(st.reg[K.R_CAP]) + 1 if minp >= K.INF else minp
            if part.best is not None:
                lo = min(lo, part.best[0])
            part.proven_lo = max(part.proven_lo, lo)
        if found:
            return K.FOUND
        return K.EXHAUSTED if cap < part.proven_lo else K.BUDGET

    def attempt(
        self, target: int, budget: int, variant: int, improve: bool = True, lds: bool = False
    ) -> int:
        """Every part under target - base: FOUND (all fit), EXHAUSTED (one proven not to)."""
        self.attempts += 1
        out = K.FOUND
        for part in sorted(self.parts, key=lambda p: -(p.base + p.proven_lo)):
            if self.out_of_time():
                return K.BUDGET
            r = self.fit(part, target - part.base, budget, variant, improve, lds)
            if r == K.EXHAUSTED:
                return K.EXHAUSTED
            if r == K.BUDGET:
                out = K.BUDGET
        return out

    def lower(self) -> int:
        """The proven lower bound: the parts' (on their bases) and the stacked buffers' tops."""
        bs = self.inst.buffers
        top = max((o + bs[i].size for i, o in self.fixed.items()), default=0)
        lo = max(top, max((p.base + p.proven_lo for p in self.parts), default=0))
        return -(-lo // self.step) * self.step

    def assembled(self) -> tuple[int, AllocationSolution] | None:
        """The packing made of the fixed offsets and every part's best, or None."""
        offs = np.zeros(len(self.inst.buffers), np.int64)
        for i, o in self.fixed.items():
            offs[i] = o
        for part in self.parts:
            if part.best is None:
                return None
            offs[part.members] = part.base + part.best[1]
        gone = np.flatnonzero(self.host >= 0)
        offs[gone] = offs[self.host[gone]]
        sol = AllocationSolution(tuple(offs.tolist()))
        return peak(self.inst, sol), sol

    def adopt(self, sol: AllocationSolution) -> None:
        """Each part's own packing from `sol` (a packing of the instance), where it is better."""
        offs = np.asarray(sol.offsets, dtype=np.int64)
        for part in self.parts:
            own = offs[part.members]
            own = own - own.min(initial=0)
            top = int((own + part.arrays.size).max(initial=0))
            if part.best is None or top < part.best[0]:
                part.best = (top, own)

    def within(
        self,
        cap: int,
        report: Reporter,
        best: tuple[int, AllocationSolution],
        polish: Polish | None = None,
    ) -> tuple[Status, AllocationSolution | None, str]:
        """Capacity mode: rounds under `cap` until a packing, a proof there is none, or the
        time limit; `polish` (from `best`) has its turn once its time comes."""
        budget, variant = FIRST_BUDGET, 0
        while not self.out_of_time():
            report(None, self.lower())
            if polish is not None and polish.due():
                best = polish(best)
                polish = None
                if best[0] <= cap:
                    return Status.FEASIBLE, best[1], f"fits within capacity {cap}"
                continue
            r = self.attempt(cap, budget, variant, improve=False)
            if r == K.FOUND:
                got = self.assembled()
                assert got is not None
                return Status.FEASIBLE, got[1], f"fits within capacity {cap}"
            if r == K.EXHAUSTED:
                return (
                    Status.INFEASIBLE,
                    None,
                    f"no packing within capacity {cap} (search exhausted)",
                )
            variant += 1
            budget = FIRST_BUDGET * luby(variant)
        return (
            Status.UNKNOWN,
            None,
            f"time limit: no packing within capacity {cap} found, none ruled out",
        )

    def minimise(
        self,
        best: tuple[int, AllocationSolution],
        gap: float,
        report: Reporter,
        polish: Polish | None = None,
    ) -> tuple[tuple[int, AllocationSolution], int]:
        """Rounds at the lower bound, each followed by a descent below the best packing, until
        they meet, the relative `gap` is reached or time runs out; `polish` has its turn once
        its time comes."""
        budget, variant = FIRST_BUDGET, 0
        frac = 0.5
        while not self.out_of_time():
            lo = self.lower()
            report(best[0], lo)
            if lo >= best[0] or (gap > 0 and best[0] - lo <= gap * lo):
                break
            if polish is not None and polish.due():
                best = polish(best)
                self.adopt(best[1])
                polish = polish.then(self.deadline)
                continue
            r = self.attempt(lo, budget, variant)
            best = self._better(best)
            if r != K.BUDGET:
                continue
            target = (best[0] - max(1, int((best[0] - lo) * frac))) // self.step * self.step
            if target > lo and not self.out_of_time():
                nodes = max(FIRST_BUDGET, int(budget * DESCENT_SHARE))
                self.attempt(target, nodes, variant, lds=DESCENT_LDS)
                before = best[0]
                best = self._better(best)
                if best[0] == before:
                    frac /= 2  # (doubling it back on success: worse on 4 of 17 at 500 buffers)
            variant += 1
            budget = FIRST_BUDGET * luby(variant)
        return best, self.lower()

    def _better(self, best: tuple[int, AllocationSolution]) -> tuple[int, AllocationSolution]:
        got = self.assembled()
        return got if got is not None and got[0] < best[0] else best


@dataclass
class Polish:
    """The portfolio heuristic of concurrent instances (`heuristics.allocation_conflicts`) from
    the best packing, for `share` of the time limit once `at` (a clock time) has passed: on
    large parts far from their bound its ruin and recreate gains where the search does not."""

    inst: AllocationInstance
    opts: Options
    at: float
    seconds: float
    from_best: bool = True  # start it from the best packing (else from its own greedy passes)
    final_at: float | None = None  # when a last turn comes, for the time left then
    until: float | None = None  # this turn ends then (instead of after `seconds`)

    def due(self) -> bool:
        return time.perf_counter() >= self.at

    def then(self, deadline: float) -> Polish | None:
        """The last turn, due at `final_at`, until `deadline`; None when there is none."""
        if self.final_at is None or self.final_at >= deadline:
            return None
        return Polish(self.inst, self.opts, self.final_at, 0.0, True, None, deadline)

    def __call__(self, best: tuple[int, AllocationSolution]) -> tuple[int, AllocationSolution]:
        free = self.inst.uncapped()
        hint = best[1] if self.from_best else None
        seconds = self.seconds if self.until is None else self.until - time.perf_counter()
        opts = Options(time_limit=max(seconds, 0.05), seed=self.opts.seed, hint=hint)
        res = hc.portfolio(free, opts)
        if res.solution is not None and not check(free, res.solution):
            got = peak(free, res.solution)
            if got < best[0]:
                return got, res.solution
        return best


def family_bound(p: K.Part, align: int) -> int:
    """The heaviest clique of a part's family, rounded as `rounded_clique_bound` does, or its
    largest buffer."""
    best = int(p.size.max(initial=0))
    for a, b in zip(p.cptr[:-1].tolist(), p.cptr[1:].tolist(), strict=True):
        best = max(best, ac.rounded_clique_bound(p.size, p.cmem[a:b].tolist(), align))
    return best


def prepare(inst: AllocationInstance, seed: int, deadline: float, clique_s: float) -> Search:
    """The decomposition, each part's arrays and lower bound (the exact heaviest clique of the
    parts that bound the peak, heaviest first, while `clique_s` lasts)."""
    g = conflict_graph(inst)
    size = sizes(inst).astype(np.int64)
    a = inst.alignment
    host = absorb(g, size)
    fixed, pieces = decompose(g, size, a, host < 0)
    until = time.perf_counter() + clique_s
    parts, exact = [], []
    for members, base in sorted(pieces, key=lambda mb: -len(mb[0])):
        ordered, arrays, known = build(g, size, members, a, until)
        lb = max(family_bound(arrays, a), known or 0)
        parts.append(Part(ordered, base, arrays, lb, lb))
        exact.append(known is not None)
    # parts whose maximal cliques were not all enumerated: the exact heaviest clique, for the
    # parts that bound the peak first, while the time lasts
    until = time.perf_counter() + clique_s
    for part, done in sorted(zip(parts, exact, strict=True), key=lambda x: -(x[0].base + x[0].lb)):
        left = until - time.perf_counter()
        if left <= 0:
            break
        p = part.arrays
        if not done and len(p.size) > 2 and len(p.cmem):
            clique, _ = ac.max_clique(ac.Graph(p.ptr, p.nbr), p.size, left)
            part.lb = max(part.lb, ac.rounded_clique_bound(p.size, clique, a))
            part.proven_lo = part.lb
    return Search(inst, fixed, parts, seed, deadline, host, step=grain(inst))


def first_fits(search: Search) -> None:
    """Each part's best first-fit packing over a few orders (the instance's, the kernel
    numbering, by size times degree, by the heaviest clique, by degree)."""
    a = search.inst.alignment
    for part in search.parts:
        p = part.arrays
        orders = [np.argsort(part.members, kind="stable")]  # as the instance lists them
        orders += [np.argsort(part.rank(v, search.seed), kind="stable") for v in range(RANKS)]
        bits = hc.dense_bits(len(p.size), p.ptr, p.nbr)
        for order in orders:
            pos, top = hc.pack(p.size, p.ptr, p.nbr, order, a, bits=bits)
            if part.best is None or top < part.best[0]:
                part.best = (top, pos)


def descend(search: Search, until: float) -> None:
    """The search itself below each part's best, a few nodes per buffer, as a start."""
    for part in sorted(search.parts, key=lambda p: -(p.base + p.lb)):
        if time.perf_counter() >= until or search.out_of_time():
            break
        if part.best is not None and part.best[0] > part.proven_lo:
            saved, search.deadline = search.deadline, min(search.deadline, until)
            search.fit(part, part.best[0] - 1, 20 * len(part.members) + 1_000, 0)
            search.deadline = saved


def kernels_ready(deadline: float) -> bool:
    """Load or compile the kernels if the time left allows it (else the caller falls back)."""
    left = deadline - time.perf_counter()
    return compiled_within([K.search, *hc.KERNELS], left, LOAD_S, COMPILE_S, warm)


def warm() -> None:
    """Compile (or load from numba's cache) every kernel on a tiny instance (a 5-cycle)."""
    inst = AllocationInstance(
        tuple(Buffer(str(i), s, 0, 0) for i, s in enumerate((3, 2, 2, 1, 2))),
        alignment=2,
        conflicts=ac.Pairs.of(((0, 1), (1, 2), (2, 3), (3, 4), (0, 4))),
    )
    hc.warm()
    search = prepare(inst, 0, time.perf_counter() + 3600.0, 1.0)
    first_fits(search)
    for part in search.parts:
        part.best = None
        search.fit(part, 100, 100, 0)


def hint_of(inst: AllocationInstance, opts: Options) -> AllocationSolution | None:
    """The hint when it is a packing of the instance (capacity aside)."""
    hint = opts.hint
    free = inst.uncapped()
    if isinstance(hint, AllocationSolution) and not check(free, hint):
        return hint
    return None


PREPARE_S, PREPARE_S_PER_PAIR = 0.1, 6e-7
"""What `prepare` may take (its parts, families, twins and cliques, not bounded by the clock):
0.15-0.26 s at 1,000 OmniMalloc buffers, 0.45-0.82 s at 2,000 and 0.86-2.84 s at 5,000
(3-9e-7 s a pair); with less time left the portfolio heuristic has it (at 1 s, 5,000-buffer
concurrent tiling took 2.8 s before)."""


def solve(
    inst: AllocationInstance,
    opts: Options,
    *,
    name: str = "bb",
    lds: bool = False,
    max_nodes: int | None = None,
) -> Result:
    """Branch and bound on the conflict graph (`lds=False`, exact) or its limited-discrepancy
    anytime form; it reports its best peak and lower bound after each round (`Reporter`)."""
    t0 = time.perf_counter()
    report = Reporter(opts, name)
    reserve = solve_reserve(inst, t0, opts.time_limit)
    deadline = t0 + opts.time_limit * (1 - RESERVE_SHARE) - RESERVE_S - reserve
    cap = inst.capacity

    def done(
        status: Status, sol: AllocationSolution | None, bound: int | None, msg: str, **stats: object
    ) -> Result:
        obj = None if sol is None else peak(inst, sol)
        res = Result(name, status, obj, bound, time.perf_counter() - t0, sol, msg, stats)
        return report.result(res)

    hint = hint_of(inst, opts)

    def heuristic(why: str) -> Result:
        """The portfolio heuristic instead of the search, for the time left."""
        lb = clique_bound(inst, min(0.2, opts.time_limit * CLIQUE_SHARE))[0]
        if cap is not None and lb > cap:
            return done(Status.INFEASIBLE, None, None, f"a clique's sizes reach {lb} > {cap}")
        # the heuristic keeps its own reserve for the check: it gets what is left of the limit
        left = opts.time_limit - (time.perf_counter() - t0)
        inner = Options(time_limit=max(left, 0.01), seed=opts.seed, hint=hint)
        res = hc.portfolio(inst.uncapped(), inner)
        sol = res.solution if res.solution is not None else hint or stacked(inst)
        top = peak(inst, sol)
        msg = f"{why}: the portfolio heuristic's packing"
        if cap is not None and top > cap:
            return done(Status.UNKNOWN, None, lb, msg)
        return done(Status.OPTIMAL if top <= lb else Status.FEASIBLE, sol, lb, msg)

    if not kernels_ready(deadline):
        return heuristic("no time to compile the search kernels")
    pairs = len(inst.conflicts or ())
    if deadline - time.perf_counter() < PREPARE_S + PREPARE_S_PER_PAIR * pairs:
        return heuristic(f"no time to prepare the search of {pairs} conflicting pairs")
    search = prepare(inst, opts.seed, deadline, CLIQUE_SHARE * opts.time_limit)
    search.max_nodes, search.lds = max_nodes, lds
    lo = search.lower()
    if cap is not None and lo > cap:
        return done(Status.INFEASIBLE, None, None, f"a clique's sizes reach {lo} > capacity {cap}")
    first_fits(search)
    if hint is not None:
        search.adopt(hint)
    descend(search, t0 + START_SHARE * opts.time_limit)
    got = search.assembled()
    assert got is not None
    best = got if hint is None or got[0] <= peak(inst, hint) else (peak(inst, hint), hint)
    report(best[0], lo)

    def stats() -> dict[str, object]:
        largest = max((len(p.members) for p in search.parts), default=0)
        return {
            "nodes": search.nodes,
            "attempts": search.attempts,
            "parts": len(search.parts),
            "largest_part": largest,
            "stacked": len(search.fixed),
        }

    if best[0] <= lo:
        return done(Status.OPTIMAL, best[1], lo, "the start meets the clique bound", **stats())
    left = deadline - time.perf_counter()
    at, share, big = POLISH_AT, POLISH_SHARE, False
    if max((len(p.members) for p in search.parts), default=0) >= BIG_PART:
        at, share, big = BIG_POLISH_AT, BIG_POLISH_SHARE, True
    polish = Polish(
        inst,
        opts,
        t0 + at * opts.time_limit,
        share * left,
        from_best=not big,
        final_at=t0 + FINAL_AT * opts.time_limit,
    )
    if cap is not None:
        if best[0] <= cap:
            return done(Status.FEASIBLE, best[1], lo, f"fits within capacity {cap}", **stats())
        with report.ticking():
            status, packed, msg = search.within(cap, report, best, polish)
        bound = None if status is Status.INFEASIBLE else search.lower()
        return done(status, packed, bound, msg, **stats())
    with report.ticking():
        best, lo = search.minimise(best, opts.gap, report, polish)
    if best[0] <= lo:
        return done(Status.OPTIMAL, best[1], lo, "proven optimal", **stats())
    msg = "time limit" if search.out_of_time() else "gap reached" if opts.gap > 0 else "stopped"
    return done(Status.FEASIBLE, best[1], lo, msg, **stats())

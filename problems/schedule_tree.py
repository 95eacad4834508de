"""Exact sum-liveness on out-trees: the least, over each op's order of its children, of Horn's
optimum, with the orders' partial results kept as Pareto sets.

On an out-forest (each op after one op at most) whose allocs are each used by one op v and some
of v's children S, an alloc of size s costs s (1 + max over S of pos - pos(v)). Put each op's
children in an order (a chain: each after the one before): then max over S is the position of
S's last member in that order, and sum-liveness is a constant plus sum_j w_j pos(j), linear,
over an out-forest again (each child's one predecessor is the child before it, or v). Each
order's forest is series-parallel, so Lawler's composition gives its optimum (for unit times,
weights of either sign): a part's optimal sequence is a list of Sidney blocks (weight W,
length L, ratio W / L non-increasing); a parallel part merges its parts' blocks by ratio, and
an op before a part takes the part's leading blocks whose ratio beats its own into its block.
Every schedule is optimal for its own children's orders at best, so the optimum is the least
over all orders.

The orders are not enumerated. For a part with cost c (sum_j w_j pos(j) from position 1) and
blocks B, let phi_B(r) = sum over B of min(r L, W): the part's cost with any block of ratio r
beside it in parallel is c + L_r phi_B(r) (the merge puts the block after the part's blocks of
higher ratio), an op before it gives min(W_u + W_B, r + phi_B(r)), and a parallel part adds its
phi. So every larger part's cost, and hence the whole schedule's, is non-decreasing in (c,
phi_B): of two alternatives for the same ops (same total weight and length), one with no higher
cost and no higher phi at every ratio (the functions are piecewise linear: compared at every
block ratio of both) dominates, and the other is dropped. Per op, the chains of its children
are built from the front over subsets of them (2^m x m steps for m children, `MAX_CHILDREN`).
Measured: one alternative survives at every step on random trees (tree-1000: 0.3 s, tree-5000:
1.1 s), and the optima equal `dp`'s proven ones (docs/design/schedule_tree.md).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tensorplan.problems.schedule_cut import kahn_order

if TYPE_CHECKING:
    from tensorplan.problems.schedule import Graph

MAX_CHILDREN = 14
"""Ops with more children are not solved (2^m x m chain steps for m children): None."""

Block = tuple[int, int, list[int]]
"""A Sidney block: total weight, length (ops), and its ops in order."""


@dataclass(frozen=True)
class Part:
    """An optimal sequence of a series-parallel part: its cost (sum of weight x position, from
    position 1) and its blocks, ratio non-increasing."""

    cost: int
    blocks: tuple[Block, ...]


@dataclass(frozen=True)
class TreeForm:
    """A graph as an out-forest with linear costs: `const` plus each op's own weight (minus
    the sizes of the allocs it produces for children) times its position, plus, per alloc with
    users among its producer's children, its size times the position of the last of them."""

    parent: tuple[int, ...]  # -1 for roots
    children: tuple[tuple[int, ...], ...]
    own: tuple[int, ...]  # each op's weight whatever its children's orders
    last: tuple[
        tuple[tuple[int, frozenset[int]], ...], ...
    ]  # per op: (size, users) among its children
    const: int


def tree_form(g: Graph) -> TreeForm | None:
    """The graph's `TreeForm`, or None if it is not an out-forest whose every alloc is used by
    one op and some of that op's children."""
    n = g.n
    if any(len(p) > 1 for p in g.preds):
        return None
    parent = tuple(p[0] if p else -1 for p in g.preds)
    own = [0] * n
    last: list[list[tuple[int, frozenset[int]]]] = [[] for _ in range(n)]
    const = 0
    for size, users in zip(g.sizes, g.alloc_ops, strict=True):
        if not users:
            continue
        members = set(users)
        heads = [u for u in users if parent[u] not in members]
        if len(heads) != 1:
            return None
        v = heads[0]
        rest = frozenset(members - {v})
        if any(parent[u] != v for u in rest):
            return None
        const += size
        if rest:
            own[v] -= size
            last[v].append((size, rest))
    return TreeForm(parent, g.succs, tuple(own), tuple(tuple(x) for x in last), const)


def tree_optimum(g: Graph, seconds: float) -> tuple[int, list[int]] | None:
    """The least sum-liveness of an out-forest graph and an order that has it; None if the
    graph has no `TreeForm`, an op has more than `MAX_CHILDREN` children, or `seconds` run
    out."""
    deadline = time.perf_counter() + seconds
    form = tree_form(g)
    if form is None or any(len(c) > MAX_CHILDREN for c in form.children):
        return None
    n = g.n
    subs: dict[int, list[Part]] = {}  # per op: its children's chains, the alternatives kept
    if time.perf_counter() > deadline:
        return None
    for v in reversed(kahn_order(g.preds)):  # every op after its children
        if time.perf_counter() > deadline:
            return None
        subs[v] = _chains(form, v, subs)
        for c in form.children[v]:
            del subs[c]
    roots = [v for v in range(n) if form.parent[v] < 0]
    whole = [Part(0, ())]
    for r in roots:
        tops = [_series(r, form.own[r], s) for s in subs.pop(r)]
        whole = _pareto([_parallel(a, b) for a in whole for b in tops])
    best = min(whole, key=lambda p: p.cost)
    sequence = [v for block in best.blocks for v in block[2]]
    return form.const + best.cost, sequence


def _chains(form: TreeForm, v: int, subs: dict[int, list[Part]]) -> list[Part]:
    """The alternatives for `v`'s children put in a chain, in every order: built from the
    front, a child d first and the chain of the others (a subset U) in parallel with d's own
    children's chains; d gains the size of each alloc of `v` whose users in U are d alone."""
    kids = form.children[v]
    if not kids:
        return [Part(0, ())]
    memo: dict[frozenset[int], list[Part]] = {}

    def chain(rest: frozenset[int]) -> list[Part]:
        if rest in memo:
            return memo[rest]
        found: list[Part] = []
        for d in sorted(rest):
            others = rest - {d}
            weight = form.own[d] + sum(
                s for s, users in form.last[v] if d in users and not users & others
            )
            tails = chain(others) if others else [Part(0, ())]
            for sub in subs[d]:
                for tail in tails:
                    found.append(_series(d, weight, _parallel(sub, tail)))
        memo[rest] = _pareto(found)
        return memo[rest]

    return chain(frozenset(kids))


def _series(u: int, weight: int, part: Part) -> Part:
    """Op `u` (one position) then `part`: the part's ops move one place later; `u`'s block
    takes the part's leading blocks of higher ratio."""
    total = sum(b[0] for b in part.blocks)
    w, length, ops = weight, 1, [u]
    i = 0
    blocks = part.blocks
    while i < len(blocks) and blocks[i][0] * length > w * blocks[i][1]:
        w += blocks[i][0]
        length += blocks[i][1]
        ops.extend(blocks[i][2])
        i += 1
    return Part(weight + part.cost + total, ((w, length, ops), *blocks[i:]))


def _parallel(a: Part, b: Part) -> Part:
    """Two independent parts, their blocks merged by ratio: each block waits for the other
    part's blocks of higher ratio."""
    i = j = 0
    done_a = done_b = extra = 0
    merged: list[Block] = []
    xs, ys = a.blocks, b.blocks
    while i < len(xs) or j < len(ys):
        if j >= len(ys) or (i < len(xs) and xs[i][0] * ys[j][1] >= ys[j][0] * xs[i][1]):
            extra += done_b * xs[i][0]
            done_a += xs[i][1]
            merged.append(xs[i])
            i += 1
        else:
            extra += done_a * ys[j][0]
            done_b += ys[j][1]
            merged.append(ys[j])
            j += 1
    return Part(a.cost + b.cost + extra, tuple(merged))


def _phi_times(blocks: Sequence[Block], w: int, length: int) -> int:
    """length x phi(w / length): sum over the blocks of min(w L, length W)."""
    return sum(min(w * b[1], length * b[0]) for b in blocks)


def _dominates(a: Part, b: Part) -> bool:
    """Whether `a` is no worse than `b` in every larger part: no higher cost, and no higher
    phi at any block ratio of either (exact, in integers)."""
    if a.cost > b.cost:
        return False
    for w, length, _ in (*a.blocks, *b.blocks):
        if _phi_times(a.blocks, w, length) > _phi_times(b.blocks, w, length):
            return False
    return True


def _pareto(parts: list[Part]) -> list[Part]:
    """The parts no other dominates (of equal ones, the first)."""
    kept: list[Part] = []
    for p in sorted(parts, key=lambda x: x.cost):
        if not any(_dominates(k, p) for k in kept):
            kept.append(p)
    return kept

"""Schedule liveness (poprithms schedule::shift): order the ops of a DAG to keep memory small.

A graph has ops with precedence constraints (`after`: ops that must come earlier) and allocs; each
alloc has a size and the set of ops that use it. A schedule is a topological order of the ops. An
alloc is live from the position of the first op that uses it to the position of the last,
inclusive. Two objectives, both minimised, chosen by the instance's `objective` field:

- `sum_liveness` = sum over allocs of size * (last - first + 1)  (the seed's objective);
- `peak` = max over positions of the total size of the allocs live there.

An alloc that no op uses is accepted and is never live (liveness 0): it cannot affect any
schedule, so rejecting it would only make generated graphs harder to write.

Both objectives decompose over prefixes: with S the set of ops already scheduled and v the op
placed next, the memory live at v's position is size(open(S) | allocs(v)), where open(S) are the
allocs used both inside and outside S. `step_cost` exposes this; the DP and greedy build on it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal

import numpy as np

from tensorplan.problems.core import (
    MAX_TOTAL,
    InstanceError,
    Problem,
    array,
    check_problem_field,
    ident,
    known_fields,
    obj,
    positive_int,
    req,
    show,
    unique_ids,
)
from tensorplan.problems.schedule_pebble import pebble_bound

Objective = Literal["sum_liveness", "peak"]
OBJECTIVES: tuple[str, ...] = ("sum_liveness", "peak")


@dataclass(frozen=True)
class Op:
    id: str
    after: tuple[str, ...] = ()


@dataclass(frozen=True)
class Alloc:
    id: str
    size: int
    ops: tuple[str, ...]


@dataclass(frozen=True)
class Graph:
    """Integer-indexed view of an instance, built once: what every solver works on."""

    preds: tuple[tuple[int, ...], ...]
    succs: tuple[tuple[int, ...], ...]
    alloc_ops: tuple[tuple[int, ...], ...]  # distinct op indices per alloc
    op_allocs: tuple[tuple[int, ...], ...]  # alloc indices per op
    sizes: tuple[int, ...]

    @property
    def n(self) -> int:
        return len(self.preds)


@dataclass(frozen=True)
class ScheduleInstance:
    ops: tuple[Op, ...]
    allocs: tuple[Alloc, ...]
    objective: Objective = "sum_liveness"
    name: str | None = None

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise InstanceError(
                "objective", f"must be one of {', '.join(OBJECTIVES)}, got {show(self.objective)}"
            )
        unique_ids([o.id for o in self.ops], "ops")
        unique_ids([a.id for a in self.allocs], "allocs")
        known = {o.id for o in self.ops}
        for i, o in enumerate(self.ops):
            _distinct_known(o.after, known, f"ops[{i}].after")
        for i, a in enumerate(self.allocs):
            if a.size <= 0:
                raise InstanceError(
                    f"allocs[{i}].size", f"must be a positive integer, got {a.size}"
                )
            _distinct_known(a.ops, known, f"allocs[{i}].ops")
        total = sum(a.size for a in self.allocs)
        reach = total * len(self.ops) if self.objective == "sum_liveness" else total
        if reach > MAX_TOTAL:
            how = (
                f"x {len(self.ops)} ops = {reach} (an alloc can be live at every position)"
                if self.objective == "sum_liveness"
                else "(all can be live at once)"
            )
            raise InstanceError(
                "allocs",
                f"the sizes add up to {total}, and the {self.objective} objective can reach "
                f"{total} {how}: more than 2**53 = {MAX_TOTAL}; solvers compute with that "
                "bound (the MIP back-ends in doubles, exact to 2**53 only)",
            )
        cycle = find_cycle(self)
        if cycle:
            ring = " -> ".join([*cycle, cycle[0]])
            raise InstanceError("ops", f"precedence cycle through {len(cycle)} op(s): {ring}")

    def index(self) -> dict[str, int]:
        return {o.id: i for i, o in enumerate(self.ops)}

    @cached_property
    def lower_bound(self) -> int:
        """`problems.schedule.lower_bound`, computed once: the harness, the solvers and the
        reports all ask for it."""
        return _lower_bound(self)

    @cached_property
    def graph(self) -> Graph:
        index = self.index()
        preds = tuple(tuple(index[p] for p in o.after) for o in self.ops)
        succs: list[list[int]] = [[] for _ in self.ops]
        for v, ps in enumerate(preds):
            for u in ps:
                succs[u].append(v)
        alloc_ops = tuple(tuple(index[x] for x in a.ops) for a in self.allocs)
        op_allocs: list[list[int]] = [[] for _ in self.ops]
        for a, vs in enumerate(alloc_ops):
            for v in vs:
                op_allocs[v].append(a)
        return Graph(
            preds,
            tuple(map(tuple, succs)),
            alloc_ops,
            tuple(map(tuple, op_allocs)),
            tuple(a.size for a in self.allocs),
        )


def _distinct_known(ids: Sequence[str], known: set[str], where: str) -> None:
    seen: set[str] = set()
    for j, x in enumerate(ids):
        if x not in known:
            raise InstanceError(f"{where}[{j}]", f"unknown op id {x!r}")
        if x in seen:
            raise InstanceError(f"{where}[{j}]", f"op {x!r} listed twice")
        seen.add(x)


def find_cycle(inst: ScheduleInstance) -> list[str]:
    """The op ids along one precedence cycle, in order, or [] when the graph is acyclic."""
    index = {o.id: i for i, o in enumerate(inst.ops)}
    preds = [[index[p] for p in o.after if p in index] for o in inst.ops]
    colour = [0] * len(preds)  # 0 new, 1 on the stack, 2 done
    for root in range(len(preds)):
        if colour[root]:
            continue
        stack: list[tuple[int, int]] = [(root, 0)]
        path: list[int] = [root]
        colour[root] = 1
        while stack:
            v, k = stack[-1]
            if k < len(preds[v]):
                stack[-1] = (v, k + 1)
                u = preds[v][k]
                if colour[u] == 1:
                    cyc = path[path.index(u) :][::-1]  # in precedence order
                    k = cyc.index(min(cyc))  # start at the op listed first in the instance
                    return [inst.ops[x].id for x in cyc[k:] + cyc[:k]]
                if colour[u] == 0:
                    colour[u] = 1
                    stack.append((u, 0))
                    path.append(u)
            else:
                colour[v] = 2
                stack.pop()
                path.pop()
    return []


@dataclass(frozen=True)
class ScheduleSolution:
    """The ops in schedule order, by id. May be anything the checker then rejects."""

    order: tuple[str, ...]


# --- JSON -----------------------------------------------------------------------------------------


def parse_instance(data: Mapping[str, Any]) -> ScheduleInstance:
    name = check_problem_field(data, "schedule")
    known_fields(data, "", ("problem", "name", "objective", "ops", "allocs"))
    objective = data.get("objective", "sum_liveness")
    if objective not in OBJECTIVES:
        raise InstanceError(
            "objective", f"must be one of {', '.join(OBJECTIVES)}, got {show(objective)}"
        )
    ops = []
    for i, item in enumerate(array(req(data, "ops", ""), "ops")):
        w = f"ops[{i}]"
        item = known_fields(obj(item, w), w, ("id", "after"))
        after = array(item.get("after", []), f"{w}.after")
        ops.append(
            Op(
                ident(req(item, "id", w), f"{w}.id"),
                tuple(ident(x, f"{w}.after[{j}]") for j, x in enumerate(after)),
            )
        )
    allocs = []
    for i, item in enumerate(array(req(data, "allocs", ""), "allocs")):
        w = f"allocs[{i}]"
        item = known_fields(obj(item, w), w, ("id", "size", "ops"))
        users = array(req(item, "ops", w), f"{w}.ops")
        allocs.append(
            Alloc(
                ident(req(item, "id", w), f"{w}.id"),
                positive_int(req(item, "size", w), f"{w}.size"),
                tuple(ident(x, f"{w}.ops[{j}]") for j, x in enumerate(users)),
            )
        )
    return ScheduleInstance(tuple(ops), tuple(allocs), objective, name)


def instance_to_json(inst: ScheduleInstance) -> dict[str, Any]:
    out: dict[str, Any] = {"problem": "schedule"}
    if inst.name:
        out["name"] = inst.name
    out["objective"] = inst.objective
    out["ops"] = [{"id": o.id, "after": list(o.after)} for o in inst.ops]
    out["allocs"] = [{"id": a.id, "size": a.size, "ops": list(a.ops)} for a in inst.allocs]
    return out


def parse_solution(data: Mapping[str, Any], inst: ScheduleInstance) -> ScheduleSolution:
    """Reads the ids; whether they form a valid schedule is the checker's business."""
    data = known_fields(obj(data, "solution"), "solution", ("order",))
    raw = array(req(data, "order", "solution"), "solution.order")
    return ScheduleSolution(tuple(ident(x, f"solution.order[{j}]") for j, x in enumerate(raw)))


def solution_to_json(inst: ScheduleInstance, sol: ScheduleSolution) -> dict[str, Any]:
    return {"order": list(sol.order)}


def to_solution(inst: ScheduleInstance, order: Sequence[int]) -> ScheduleSolution:
    return ScheduleSolution(tuple(inst.ops[v].id for v in order))


def to_order(inst: ScheduleInstance, sol: ScheduleSolution) -> list[int]:
    index = inst.index()
    return [index[x] for x in sol.order]


# --- objective, checker, bounds ------------------------------------------------------------------


def spans(g: Graph, order: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """(first, last) position of every alloc under `order`; unused allocs get first > last."""
    pos = np.empty(g.n, dtype=np.int64)
    pos[np.asarray(order, dtype=np.int64)] = np.arange(len(order))
    first = np.array([min((pos[v] for v in vs), default=1) for vs in g.alloc_ops], dtype=np.int64)
    last = np.array([max((pos[v] for v in vs), default=0) for vs in g.alloc_ops], dtype=np.int64)
    return first, last


INT64_MAX = 2**63 - 1


def exact_sizes(g: Graph, factor: int = 1) -> np.ndarray:
    """The alloc sizes as int64 when sum(sizes) x factor fits (every total computed from them
    then fits), else as Python integers (object array): sums stay exact, never wrap around."""
    fits = sum(g.sizes) * max(factor, 1) <= INT64_MAX
    return np.asarray(g.sizes, dtype=np.int64 if fits else object)


def profile(g: Graph, order: Sequence[int]) -> np.ndarray:
    """Total size of the allocs live at each schedule position (exact, see `exact_sizes`)."""
    first, last = spans(g, order)
    sizes = exact_sizes(g)
    diff = np.zeros(len(order) + 1, dtype=sizes.dtype)
    used = first <= last
    np.add.at(diff, first[used], sizes[used])
    np.add.at(diff, last[used] + 1, -sizes[used])
    return np.cumsum(diff)[:-1]


def order_objective(g: Graph, order: Sequence[int], objective: str) -> int:
    """The objective of a valid order of op indices (assumed feasible)."""
    if objective == "peak":
        return int(profile(g, order).max(initial=0))
    first, last = spans(g, order)
    sizes = exact_sizes(g, len(order))
    return int(np.sum(sizes * np.maximum(last - first + 1, 0).astype(sizes.dtype)))


def evaluate(inst: ScheduleInstance, sol: ScheduleSolution) -> int:
    return order_objective(inst.graph, to_order(inst, sol), inst.objective)


def check(inst: ScheduleInstance, sol: ScheduleSolution) -> list[str]:
    """Named violations: unknown op, op scheduled twice, op missing, precedence broken."""
    out: list[str] = []
    index = inst.index()
    pos: dict[str, int] = {}
    for p, x in enumerate(sol.order):
        if x not in index:
            out.append(f"unknown op: {x!r} at position {p} is not an op of the instance")
        elif x in pos:
            out.append(f"not a permutation: op {x!r} at positions {pos[x]} and {p}")
        else:
            pos[x] = p
    missing = [o.id for o in inst.ops if o.id not in pos]
    if missing:
        shown = ", ".join(map(repr, missing[:5])) + (" ..." if len(missing) > 5 else "")
        out.append(f"not a permutation: {len(missing)} op(s) never scheduled: {shown}")
    for o in inst.ops:
        if o.id not in pos:
            continue
        for u in o.after:
            if u in pos and pos[u] >= pos[o.id]:
                out.append(
                    f"precedence broken: {o.id!r} at {pos[o.id]} must come after {u!r} at {pos[u]}"
                )
    return out


def own_sizes(g: Graph) -> list[int]:
    """Total size of the allocs each op uses: live at its position whatever the order."""
    return [sum(g.sizes[a] for a in g.op_allocs[v]) for v in range(g.n)]


HULL_MAX_OPS = 10_000
"""Up to this many ops the bounds use the users' hulls (reachability as n-bit sets: n^2 / 4
bytes); beyond, only the users themselves."""


def reachability(g: Graph) -> tuple[list[int], list[int]]:
    """(ancestors, descendants) of every op as bit sets (Python ints; bit u = op u), strict."""
    indeg = [len(p) for p in g.preds]
    order = [v for v in range(g.n) if indeg[v] == 0]
    for v in order:  # Kahn's order: grows while it is read
        for w in g.succs[v]:
            indeg[w] -= 1
            if indeg[w] == 0:
                order.append(w)
    anc = [0] * g.n
    for v in order:
        m = 0
        for u in g.preds[v]:
            m |= anc[u] | (1 << u)
        anc[v] = m
    desc = [0] * g.n
    for v in reversed(order):
        m = 0
        for u in g.succs[v]:
            m |= desc[u] | (1 << u)
        desc[v] = m
    return anc, desc


def closure_counts(g: Graph) -> tuple[list[int], list[int]]:
    """Number of ancestors and of descendants of each op: bounds on its position (and on the
    sizes of the ideals that can hold it or leave it out)."""
    anc, desc = reachability(g)
    return [a.bit_count() for a in anc], [d.bit_count() for d in desc]


def hulls(g: Graph, reach: tuple[list[int], list[int]] | None = None) -> list[int]:
    """Per alloc, the ops every schedule runs while it is live, as a bit set: its users, and
    every op that is a descendant of one user and an ancestor of another (such an op comes
    after the first use and before the last in any topological order). `reach`: the graph's
    `reachability`, when known."""
    anc, desc = reach or reachability(g)
    out = []
    for vs in g.alloc_ops:
        users = down = up = 0
        for u in vs:
            users |= 1 << u
            down |= desc[u]
            up |= anc[u]
        out.append(users | (down & up))
    return out


def forced_live(g: Graph) -> np.ndarray:
    """Per op, the total size of the allocs live at its position in every schedule: those whose
    hull holds it (`hulls`; beyond `HULL_MAX_OPS` ops, those it uses)."""
    if g.n > HULL_MAX_OPS:
        return np.asarray(own_sizes(g), dtype=object)
    total = np.zeros(g.n, dtype=object)
    width = (g.n + 7) // 8
    for size, h in zip(g.sizes, hulls(g), strict=True):
        if h:
            bits = np.unpackbits(
                np.frombuffer(h.to_bytes(width, "little"), np.uint8), bitorder="little"
            )
            total[np.flatnonzero(bits[: g.n])] += size
    return total


def lower_bound(inst: ScheduleInstance) -> int:
    """sum_liveness: each alloc is live at least over its hull (`hulls`: its users and every op
    that must run between two of them), so at least |hull| positions; peak: at each op, the
    allocs whose hull holds it are live at once (`forced_live`), and Liu's pebbling optimum on
    a forest relaxation (`schedule_pebble.pebble_bound`, the stronger on trees), whichever is
    higher. Beyond `HULL_MAX_OPS` ops, the users alone. Computed once per instance; the
    stronger sum-liveness bound that takes time (`schedule_bound.lagrangian_bound`) is the
    solvers' to compute within their limit."""
    return inst.lower_bound


def _lower_bound(inst: ScheduleInstance) -> int:
    g = inst.graph
    if inst.objective == "peak":
        hull = int(max(forced_live(g), default=0))
        return hull if g.n > HULL_MAX_OPS else max(hull, pebble_bound(g))
    if g.n > HULL_MAX_OPS:
        return sum(s * len(vs) for s, vs in zip(g.sizes, g.alloc_ops, strict=True))
    return sum(s * h.bit_count() for s, h in zip(g.sizes, hulls(g), strict=True))


def step_cost(g: Graph, done: Sequence[bool], v: int) -> int:
    """Memory live at the position of v when the ops in `done` come before it (for tests/DP)."""
    total = 0
    for a, vs in enumerate(g.alloc_ops):
        inside = any(done[u] for u in vs)
        outside = any(not done[u] for u in vs)
        if (inside and outside) or v in vs:
            total += g.sizes[a]
    return total


def metrics(inst: ScheduleInstance, sol: ScheduleSolution) -> dict[str, int]:
    """Both objectives, whichever the instance optimises."""
    order = to_order(inst, sol)
    return {
        "sum_liveness": order_objective(inst.graph, order, "sum_liveness"),
        "peak": order_objective(inst.graph, order, "peak"),
    }


PROBLEM = Problem(
    name="schedule",
    sense="min",
    instance_type=ScheduleInstance,
    parse_instance=parse_instance,
    instance_to_json=instance_to_json,
    parse_solution=parse_solution,
    solution_to_json=solution_to_json,
    evaluate=evaluate,
    check=check,
    bound=lower_bound,
    size=lambda inst: len(inst.ops),
    metrics=metrics,
)

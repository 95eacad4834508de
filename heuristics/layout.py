"""Layout heuristics: poprithms' greedy unwinding (`greedy0`) and a local search on top (`local`).

`greedy0` keeps the labels that are known from the start (sources, fixed points), repeatedly takes
the most valuable valued pair (value per element, then the deeper of its two tensors, then file
order) with a known side facing still-unset sink elements, unwinds the known labels through the view
ops onto those sink elements (one scatter through the origin arrays -- the same as applying the
ops' inverses in reverse order), and releases a barrier's fresh labels once all its inputs are set.
When no pair can move and a barrier is still blocked, the unset sink elements feeding it get fresh
labels; at the end every unset sink element gets a fresh label.

`local` starts from greedy0 (or the given initial solution) and only accepts strict improvements:
isolated sink elements jump to their best label in one vectorised step; linked sink elements are
grouped into classes of identical components (`problems.layout_classes.reduce_terms`), each class
starts from its best member's labelling, which is improved on one copy of the class by re-labelling
elements one at a time (iterated conditional modes) and moving whole connected groups to one
common label, then given to every member it beats. Never worse than its start. No element is
moved to a label the barrier rule forbids it; a labelling that still breaks the rule (a cycle
through two barriers) is repaired (`problems.layout.repair_barriers`). The terms are built within
0.6 of the time limit, else the start is returned.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tensorplan.problems.core import (
    Options,
    Reporter,
    Result,
    Solver,
    heuristic_result,
    stopwatch,
)
from tensorplan.problems.layout import (
    BARRIER_OPS,
    VIEW_OPS,
    Graph,
    LayoutInstance,
    Terms,
    barriers,
    fresh_solution,
    objective,
    repair_barriers,
    solution_vector,
    terms,
)
from tensorplan.problems.layout_classes import OutOfTime, Reduction, linked_components, reduce_terms


def depths(inst: LayoutInstance) -> dict[str, int]:
    """Longest chain of view ops from a root to each tensor (roots have depth 0)."""
    g = inst.graph
    out: dict[str, int] = {}
    for i in g.order:
        t = inst.tensors[i]
        out[t.id] = 0 if t.op not in VIEW_OPS else 1 + max(out[x] for x in t.inputs)
    return out


def greedy0_vector(inst: LayoutInstance) -> tuple[np.ndarray, int]:
    """Greedy unwinding; returns (label of every sink element, number of unwinding steps)."""
    g = inst.graph
    n = g.num_sink_elements
    x = np.full(n, -1, dtype=np.int64)
    fixed = g.fixed_labels
    known_fixed = np.ones(fixed.size, dtype=bool)
    barriers = [inst.tensors[i] for i in g.order if inst.tensors[i].op in BARRIER_OPS]
    for b in barriers:
        off = g.root_offset[b.id] - n
        known_fixed[off : off + g.size[b.id]] = False
    released = {b.id: False for b in barriers}
    fresh = g.num_labels

    def known(o: np.ndarray) -> np.ndarray:
        s = o < n
        out = np.empty(o.size, dtype=bool)
        out[s] = x[o[s]] >= 0
        out[~s] = known_fixed[o[~s] - n]
        return out

    def labels(o: np.ndarray) -> np.ndarray:
        s = o < n
        out = np.empty(o.size, dtype=np.int64)
        out[s] = x[o[s]]
        out[~s] = fixed[o[~s] - n]
        return out

    def release() -> None:
        for b in barriers:
            if not released[b.id] and all(known(g.flat_origin(i)).all() for i in b.inputs):
                released[b.id] = True
                off = g.root_offset[b.id] - n
                known_fixed[off : off + g.size[b.id]] = True

    depth = depths(inst)
    order = sorted(
        range(len(inst.pairs)),
        key=lambda k: (
            -inst.pairs[k].value,
            -max(depth[inst.pairs[k].a], depth[inst.pairs[k].b]),
            k,
        ),
    )
    sides = [(g.flat_origin(inst.pairs[k].a), g.flat_origin(inst.pairs[k].b)) for k in order]
    live = [
        bool(((oa < n) | (ob < n)).any()) and inst.pairs[k].value > 0
        for k, (oa, ob) in zip(order, sides, strict=True)
    ]
    steps = 0
    release()
    while True:
        moved = False
        for k, (oa, ob) in enumerate(sides):
            if not live[k]:
                continue
            unset_a = (oa < n) & ~known(oa)
            unset_b = (ob < n) & ~known(ob)
            if not unset_a.any() and not unset_b.any():
                live[k] = False
                continue
            for ok, ou, unset in ((oa, ob, unset_b), (ob, oa, unset_a)):
                mask = unset & known(ok)
                if mask.any():
                    targets, labs = ou[mask], labels(ok[mask])
                    uniq, first = np.unique(targets, return_index=True)
                    x[uniq] = labs[first]
                    moved = True
                    break
            if moved:
                steps += 1
                break
        release()
        if moved:
            continue
        blocked = [b for b in barriers if not released[b.id]]
        if not blocked:
            break
        # no pair can move: give the unset sink elements feeding the first blocked barrier
        # fresh labels so its output (and what hangs off it) becomes known
        for i in blocked[0].inputs:
            o = g.flat_origin(i)
            o = np.unique(o[(o < n)])
            o = o[x[o] < 0]
            x[o] = np.arange(fresh, fresh + o.size)
            fresh += o.size
        release()
    unset = np.flatnonzero(x < 0)
    x[unset] = np.arange(fresh, fresh + unset.size)
    return x, steps


def greedy0(
    inst: LayoutInstance,
    opts: Options,
) -> Result:
    with stopwatch() as elapsed:
        x, steps = greedy0_vector(inst)
        sol = fresh_solution(inst, x)
        value = objective(inst, sol)
    return heuristic_result("greedy0", value, sol, elapsed(), unwinding_steps=steps)


# --- local search ---------------------------------------------------------------------------------


def _csr(n: int, key: np.ndarray) -> np.ndarray:
    """Start offsets of each node's run in an array sorted by `key`."""
    return np.searchsorted(key, np.arange(n + 1), side="left")


def improve(
    inst: LayoutInstance,
    x: np.ndarray,
    tm: Terms,
    *,
    time_limit: float,
    elapsed=lambda: 0.0,
    banned: Bans | None = None,
) -> tuple[np.ndarray, int]:
    """Strict-improvement search from x; returns (improved x, number of accepted moves).

    No element is moved to a label the barrier rule forbids it (`banned`)."""
    owner, ban_of = (banned.owner, banned.barriers) if banned else ([], {})
    n = tm.n
    x = x.copy()
    moves = 0
    linked = np.zeros(n, dtype=bool)
    linked[tm.bin_e] = True
    linked[tm.bin_f] = True
    # isolated elements: their best unary label, all at once
    if tm.unary_e.size:
        cur = np.bincount(
            tm.unary_e, weights=tm.unary_w * (x[tm.unary_e] == tm.unary_l), minlength=n
        )
        us = _csr(n, tm.unary_e)
        has = us[1:] > us[:-1]
        best = np.zeros(n)
        best[has] = np.maximum.reduceat(tm.unary_w, us[:-1][has])
        # label of the first maximal unary term of each element
        is_max = tm.unary_w >= best[tm.unary_e] - 1e-12
        first = np.full(n, -1, dtype=np.int64)
        idx = np.flatnonzero(is_max)[::-1]
        first[tm.unary_e[idx]] = tm.unary_l[idx]
        jump = has & ~linked & (best > cur + 1e-9)
        x[jump] = first[jump]
        moves += int(jump.sum())
    if tm.bin_e.size == 0:
        return x, moves
    # linked elements: iterated conditional modes, then whole-component moves
    ul, uw = tm.unary_l.tolist(), tm.unary_w.tolist()
    us = _csr(n, tm.unary_e).tolist()
    nb_src = np.concatenate([tm.bin_e, tm.bin_f])
    nb_dst = np.concatenate([tm.bin_f, tm.bin_e])
    nb_w = np.concatenate([tm.bin_w, tm.bin_w])
    o = np.argsort(nb_src, kind="stable")
    nb_src, nb_dst, nb_w = nb_src[o], nb_dst[o].tolist(), nb_w[o].tolist()
    ns = _csr(n, nb_src).tolist()
    nodes = np.flatnonzero(linked).tolist()
    xl = x.tolist()

    def scores(e: int) -> dict[int, float]:
        sc: dict[int, float] = {}
        for k in range(us[e], us[e + 1]):
            sc[ul[k]] = sc.get(ul[k], 0.0) + uw[k]
        for k in range(ns[e], ns[e + 1]):
            lab = xl[nb_dst[k]]
            sc[lab] = sc.get(lab, 0.0) + nb_w[k]
        if e in ban_of:
            out = ban_of[e]
            for lab in [lab for lab in sc if owner[lab] in out and lab != xl[e]]:
                del sc[lab]
        return sc

    improved = True
    while improved and elapsed() < time_limit:
        improved = False
        for i, e in enumerate(nodes):
            if i % 1024 == 1023 and elapsed() >= time_limit:
                break
            sc = scores(e)
            if not sc:
                continue
            here = sc.get(xl[e], 0.0)
            lab, val = max(sc.items(), key=lambda kv: (kv[1], -kv[0]))
            if val > here + 1e-9:
                xl[e] = lab
                moves += 1
                improved = True
        # component moves: every element of a linked group to one label
        comp = linked_components(n, tm.bin_e, tm.bin_f)
        members: dict[int, list[int]] = {}
        for e in nodes:
            members.setdefault(int(comp[e]), []).append(e)
        for group in members.values():
            if elapsed() >= time_limit:
                break
            inside = set(group)
            cand: dict[int, float] = {}
            now = 0.0
            internal = 0.0
            for e in group:
                for k in range(us[e], us[e + 1]):
                    cand[ul[k]] = cand.get(ul[k], 0.0) + uw[k]
                    if ul[k] == xl[e]:
                        now += uw[k]
                for k in range(ns[e], ns[e + 1]):
                    f = nb_dst[k]
                    if f in inside and f > e:
                        internal += nb_w[k]
                        if xl[f] == xl[e]:
                            now += nb_w[k]
            if not cand:
                cand[xl[group[0]]] = 0.0
            if ban_of:  # a label for the whole group: allowed for every member
                out = set().union(*(ban_of[e] for e in group if e in ban_of))
                cand = {c: v for c, v in cand.items() if owner[c] not in out}
                if not cand:
                    continue
            lab, val = max(cand.items(), key=lambda kv: (kv[1], -kv[0]))
            if val + internal > now + 1e-9:
                for e in group:
                    xl[e] = lab
                moves += 1
                improved = True
    return np.asarray(xl, dtype=np.int64), moves


@dataclass(frozen=True)
class Bans:
    """The barrier rule over the union of the classes: label -> the barrier owning it (-1 for
    none) and element -> the barriers whose labels it may not take. A class's bans (element j,
    label c) are exactly those of its representative's elements against the barriers owning its
    labels, so (element, barrier) pairs hold them compactly."""

    owner: list[int]
    barriers: dict[int, set[int]]


def _union(
    red: Reduction, starts: list[np.ndarray], graph: Graph
) -> tuple[Terms, np.ndarray, list[int], list[int], Bans]:
    """One labelling problem holding one copy of every class (elements and labels offset),
    with the classes' bans."""
    eoff, loff = [0], [0]
    for k in red.classes:
        eoff.append(eoff[-1] + k.size)
        loff.append(loff[-1] + k.options)
    cat = [np.empty(0, dtype=np.int64)]
    catf = [np.empty(0)]
    ks = red.classes
    tm = Terms(
        eoff[-1],
        0.0,
        np.concatenate(cat + [k.unary_j + eoff[q] for q, k in enumerate(ks)]),
        np.concatenate(cat + [k.unary_l + loff[q] for q, k in enumerate(ks)]),
        np.concatenate(catf + [k.unary_w for k in ks]),
        np.concatenate(cat + [k.link_j + eoff[q] for q, k in enumerate(ks)]),
        np.concatenate(cat + [k.link_k + eoff[q] for q, k in enumerate(ks)]),
        np.concatenate(catf + [k.link_w for k in ks]),
    )
    y0 = np.concatenate(cat + [y + loff[q] for q, y in enumerate(starts)])
    bs = barriers(graph)
    nb = max(len(bs.ids), 1)
    owners, pairs = [], []
    for q, k in enumerate(ks):
        own = np.full(k.options, -1, dtype=np.int64)
        if k.num_labels and k.ban_j.size:
            own[: k.num_labels] = bs.owner(k.labels[0])
            pairs.append(np.unique((k.ban_j + eoff[q]) * nb + own[k.ban_c]))
        owners.append(own)
    ban_of: dict[int, set[int]] = {}
    for key in np.concatenate(cat + pairs).tolist():
        ban_of.setdefault(key // nb, set()).add(key % nb)
    return tm, y0, eoff, loff, Bans(np.concatenate(cat + owners).tolist(), ban_of)


def class_starts(red: Reduction, x: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per class: the canonical labelling of its best member under x, and every member's value."""
    starts, values = [], []
    for k in red.classes:
        vals = k.member_values(x)
        starts.append(k.canonical(x, int(vals.argmax())))
        values.append(vals)
    return starts, values


def apply_classes(
    inst: LayoutInstance,
    red: Reduction,
    x: np.ndarray,
    picks: list[np.ndarray],
    values: list[np.ndarray],
) -> tuple[np.ndarray, int]:
    """Give every member whose value under x is below its class pick's value that labelling."""
    x = x.copy()
    fresh = max(int(x.max(initial=-1)) + 1, inst.graph.num_labels)
    changed = 0
    for k, y, vals in zip(red.classes, picks, values, strict=True):
        better = vals < k.value(y) - 1e-9
        if not better.any():
            continue
        rows = k.elements[better]
        labs = k.labels[better]
        if k.has_fresh:  # option num_labels: a new label of each component's own
            own = (fresh + np.arange(rows.shape[0]))[:, None]
            fresh += rows.shape[0]
            labs = np.concatenate([labs, own], axis=1)
        x[rows] = labs[np.arange(rows.shape[0])[:, None], y[None, :]]
        changed += int(better.sum())
    return x, changed


def local_vector(
    inst: LayoutInstance,
    x0: np.ndarray,
    tm: Terms,
    *,
    time_limit: float,
    elapsed=lambda: 0.0,
    red: Reduction | None = None,
) -> tuple[np.ndarray, int]:
    """Strict improvement of x0 within time_limit (seconds of `elapsed`); never worse than x0.

    Isolated elements jump to their best label; linked elements are improved one class of
    identical components at a time: the best member's labelling is improved by `improve` on one
    copy of each class and given to every member it beats.
    """

    def out_of_time() -> None:
        if elapsed() >= time_limit:
            raise OutOfTime

    try:
        if red is None:
            red = reduce_terms(tm, out_of_time, inst.graph)
    except OutOfTime:
        return x0, 0
    n = tm.n
    linked = np.zeros(n, dtype=bool)
    linked[tm.bin_e] = True
    linked[tm.bin_f] = True
    iso = (red.isolated_x >= 0) & ~linked
    x = x0.copy()
    moves = 0
    if iso.any():
        cur = np.bincount(
            tm.unary_e, weights=tm.unary_w * (x[tm.unary_e] == tm.unary_l), minlength=n
        )
        best = np.zeros(n)
        np.maximum.at(best, tm.unary_e, tm.unary_w)
        jump = iso & (best > cur + 1e-9)
        x[jump] = red.isolated_x[jump]
        moves += int(jump.sum())
    if red.classes:
        starts, values = class_starts(red, x0)
        utm, y0, eoff, loff, bans = _union(red, starts, inst.graph)
        y, mv = improve(inst, y0, utm, time_limit=time_limit, elapsed=elapsed, banned=bans)
        if utm.value(y) < utm.value(y0):  # cannot happen with strict improvements
            y = y0
        picks = [y[eoff[q] : eoff[q + 1]] - loff[q] for q in range(len(red.classes))]
        x, changed = apply_classes(inst, red, x, picks, values)
        moves += mv + changed
    # a copied label can break the barrier rule (an element linked to one that may carry a
    # barrier's label, or a cycle through two barriers): give those elements labels of their own
    x, _ = repair_barriers(inst.graph, x, tm.value)
    if tm.value(x) < tm.value(x0):  # belt and braces
        return x0, 0
    return x, moves


def local(
    inst: LayoutInstance,
    opts: Options,
) -> Result:
    time_limit, initial_solution = opts.time_limit, opts.hint
    report = Reporter(opts, "local", "max")
    with stopwatch() as elapsed:
        if initial_solution is not None:
            x0, _ = repair_barriers(inst.graph, solution_vector(inst, initial_solution))
        else:
            x0, _ = greedy0_vector(inst)
        limit = 0.9 * time_limit

        def out_of_time() -> None:  # set-up done by 0.6 of the limit, or no search at all
            if elapsed() >= 0.6 * time_limit:
                raise OutOfTime

        try:  # building the terms can take longer than the whole limit on huge graphs
            tm = terms(inst, out_of_time)
        except OutOfTime:
            sol = fresh_solution(inst, x0)
            value = objective(inst, sol)
            return report.result(
                heuristic_result(
                    "local", value, sol, elapsed(), message="time limit reached: the start", moves=0
                )
            )
        start_value = tm.value(x0)
        report(objective(inst, fresh_solution(inst, x0)))
        with report.ticking():  # `improve` is told nothing: a heartbeat
            x, moves = local_vector(inst, x0, tm, time_limit=limit, elapsed=elapsed)
        sol = fresh_solution(inst, x)
        value = objective(inst, sol)
    return report.result(
        heuristic_result("local", value, sol, elapsed(), moves=moves, start_objective=start_value)
    )


SOLVERS = [
    Solver(
        "greedy0",
        "heuristic",
        greedy0,
        "poprithms greedy unwinding: most valuable pair first, unwind known labels to sinks",
    ),
    Solver(
        "local",
        "heuristic",
        local,
        "greedy0 then strict-improvement relabelling of sink elements and linked groups",
        frozenset({"time_limit"}),
    ),
]

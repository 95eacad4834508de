"""Layout property tests: view ops and inverses, brute force, solver agreement on random graphs."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tensorplan.harness.run import solve
from tensorplan.problems import layout_gen as gen
from tensorplan.problems.core import Options, Status
from tensorplan.problems.layout import (
    LayoutInstance,
    Pair,
    Tensor,
    barriers,
    blocked_barriers,
    forward,
    numel,
    objective,
    parse_solution,
    solution_to_json,
    unwind,
    upper_bound,
)

FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def view_chain(draw, bijective: bool = False):
    """A start shape and a chain of single-input view ops that fit it, with the shapes."""
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    kinds = ["reshape", "reverse", "dim_shuffle"] + ([] if bijective else ["slice", "sub_sample"])
    ops, shapes = [], [shape]
    for k in range(draw(st.integers(1, 5))):
        kind = draw(st.sampled_from(kinds))
        cur = shapes[-1]
        if kind == "reshape":
            n = numel(cur)
            divs = [d for d in range(1, n + 1) if n % d == 0]
            a = draw(st.sampled_from(divs))
            t = Tensor(f"v{k}", "reshape", (a, n // a))
        elif kind == "reverse":
            axes = draw(st.lists(st.integers(0, len(cur) - 1), unique=True, max_size=len(cur)))
            t = Tensor(f"v{k}", "reverse", axes=tuple(axes))
        elif kind == "dim_shuffle":
            t = Tensor(
                f"v{k}", "dim_shuffle", permutation=tuple(draw(st.permutations(range(len(cur)))))
            )
        elif kind == "slice":
            start = tuple(draw(st.integers(0, d - 1)) for d in cur)
            end = tuple(draw(st.integers(s + 1, d)) for s, d in zip(start, cur, strict=True))
            t = Tensor(f"v{k}", "slice", start=start, end=end)
        else:
            t = Tensor(f"v{k}", "sub_sample", strides=tuple(draw(st.integers(1, 3)) for _ in cur))
        t = Tensor(
            t.id,
            t.op,
            t.shape,
            (f"v{k - 1}" if k else "sink",),
            t.axes,
            t.permutation,
            t.start,
            t.end,
            t.strides,
        )
        ops.append(t)
        shapes.append(tuple(forward(t, [np.empty(cur)]).shape))
    return shape, ops, shapes


@FAST
@given(view_chain())
def test_unwinding_through_inverses_reproduces_the_source(chain):
    """Forward a labelled tensor through the ops, unwind it back: covered elements come back."""
    shape, ops, shapes = chain
    src = np.arange(numel(shape)).reshape(shape)
    ys = [src]
    for t in ops:
        ys.append(forward(t, [ys[-1]]))
    back = ys[-1]
    for t, in_shape in zip(reversed(ops), reversed(shapes[:-1]), strict=True):
        back = unwind(t, back, [in_shape], fill=-1)[0]
    covered = back >= 0
    assert np.array_equal(back[covered], src[covered])
    assert covered.sum() == numel(shapes[-1])


@FAST
@given(view_chain(bijective=True))
def test_greedy0_unwinds_a_source_onto_the_sink(chain):
    """sink -> bijective views -> T tied to a source: greedy0 gives the sink the unwound source."""
    shape, ops, shapes = chain
    inst = LayoutInstance(
        (Tensor("sink", "sink", shape), *ops, Tensor("src", "source", shapes[-1])),
        (Pair(ops[-1].id, "src", 2.0),),
    )
    r = solve(inst, "greedy0")
    assert r.objective == 2.0 * numel(shape) == upper_bound(inst)
    labels = np.array(
        [int(x.split("#")[1]) for x in solution_to_json(inst, r.solution)["sinks"]["sink"]]
    ).reshape(shape)
    back = np.arange(numel(shapes[-1])).reshape(shapes[-1])
    for t, in_shape in zip(reversed(ops), reversed(shapes[:-1]), strict=True):
        back = unwind(t, back, [in_shape])[0]
    assert np.array_equal(labels, back)


def brute_force(inst: LayoutInstance) -> float:
    """Best objective over every labelling by the labels reaching a pair, plus two fresh labels,
    that obeys the barrier rule."""
    g = inst.graph
    n = g.num_sink_elements
    labs: set[int] = set()
    for p in inst.pairs:
        for t in (p.a, p.b):
            o = g.flat_origin(t)
            labs |= set(g.fixed_labels[o[o >= n] - n].tolist())
    cands = [*sorted(labs), g.num_labels, g.num_labels + 1]
    xs = np.array(list(itertools.product(cands, repeat=n)), dtype=np.int64).reshape(-1, n)
    fixed = np.broadcast_to(g.fixed_labels, (xs.shape[0], g.fixed_labels.size))
    roots = np.concatenate([xs, fixed], axis=1)
    total = np.zeros(xs.shape[0])
    for p in inst.pairs:
        total += p.value * (roots[:, g.flat_origin(p.a)] == roots[:, g.flat_origin(p.b)]).sum(1)
    # rows where a sink element carries a barrier's label: keep only those the rule allows
    maybe = np.flatnonzero((barriers(g).owner(xs) >= 0).any(axis=1))
    total[[r for r in maybe.tolist() if blocked_barriers(g, xs[r])]] = -np.inf
    return float(total.max())


def tiny_instances(count: int):
    out = []
    for seed in range(400):
        inst = gen.random_graph(6, 3, seed=seed, tiles=2, num_sinks=2)
        n = inst.graph.num_sink_elements
        if n <= 7 and len(inst.pairs) >= 2 and (inst.graph.num_labels + 2) ** n <= 40_000:
            out.append(inst)
        if len(out) == count:
            break
    return out


def linked_pair() -> LayoutInstance:
    """Two sinks tied to each other through a reverse and each to a two-label source."""
    return LayoutInstance(
        (
            Tensor("B", "sink", (4,)),
            Tensor("C", "sink", (4,)),
            Tensor("Cr", "reverse", inputs=("C",), axes=(0,)),
            Tensor("S1", "source", (4,), layout=(0, 1, 0, 1)),
            Tensor("S2", "source", (4,), layout=(1, 0, 0, 1)),
        ),
        (Pair("B", "Cr", 3.0), Pair("B", "S1", 2.0), Pair("C", "S2", 2.0)),
        "linked-pair",
    )


@pytest.mark.parametrize("inst", [linked_pair(), *tiny_instances(12)], ids=lambda i: i.name)
def test_brute_force_equals_exact(inst):
    best = brute_force(inst)
    for s in ("mip", "cpsat"):
        r = solve(inst, s, Options(time_limit=5))
        assert r.status is Status.OPTIMAL
        assert r.objective == pytest.approx(best)
    for s in ("greedy0", "local"):
        assert solve(inst, s).objective <= best + 1e-9


@FAST
@given(st.integers(0, 10_000), st.integers(5, 40), st.sampled_from([4, 6, 12, 30]))
def test_random_graphs_solvers_agree(seed, ops, size):
    inst = gen.random_graph(ops, size, seed=seed, tiles=4)
    rs = {s: solve(inst, s, Options(time_limit=5)) for s in ("greedy0", "local", "mip", "cpsat")}
    for s, r in rs.items():
        assert r.status in (Status.OPTIMAL, Status.FEASIBLE), (s, r.message)
    ub = upper_bound(inst)
    assume(rs["mip"].status is Status.OPTIMAL and rs["cpsat"].status is Status.OPTIMAL)
    opt = rs["mip"].objective
    assert rs["cpsat"].objective == pytest.approx(opt)
    assert rs["greedy0"].objective <= rs["local"].objective + 1e-9 <= opt + 2e-9 <= ub + 3e-9
    # a written solution reads back to the same objective
    doc = solution_to_json(inst, rs["local"].solution)
    assert objective(inst, parse_solution(doc, inst)) == rs["local"].objective


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10_000), st.integers(40, 120), st.sampled_from([16, 32, 64]))
def test_exact_never_below_local_on_random_graphs(seed, ops, size):
    """Exact solvers are warm-started from `local`: whatever the time limit, never worse."""
    inst = gen.random_graph(ops, size, seed=seed, tiles=8)
    loc = solve(inst, "local", Options(time_limit=2))
    for s in ("mip", "cpsat"):
        r = solve(inst, s, Options(time_limit=1))
        assert r.status in (Status.OPTIMAL, Status.FEASIBLE), (s, r.message)
        assert r.objective >= loc.objective - 1e-9, s
        assert r.bound >= r.objective - 1e-9

"""Fusion: seed numbers, checker, every solver, forms agreeing, brute force, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tensorplan.harness import registry
from tensorplan.harness.run import METRIC, load_instance, solve
from tensorplan.problems.core import InstanceError, Options, Status
from tensorplan.problems.fusion import (
    PROBLEM,
    FusionSolution,
    acyclic_clusterings,
    check,
    instance_to_json,
    lower_bound,
    objective,
    parse_instance,
    parse_solution,
    solution_from_labels,
    unoptimised_constant,
)
from tensorplan.problems.fusion_gen import (
    HAND_WRITTEN,
    NORMALIZE2,
    NORMALIZE_INC,
    QUADTREE,
    random_program,
)
from tensorplan.problems.fusion_interp import (
    make_data,
    measure,
    reference,
    run_clustered,
    same_outputs,
)

ROOT = Path(__file__).resolve().parent.parent
BAD = Path(__file__).resolve().parent / "data" / "fusion" / "bad"
SOLVERS = list(registry.solvers("fusion"))
EXACT = [s for s, v in registry.solvers("fusion").items() if v.kind == "exact"]
HEURISTICS = [s for s, v in registry.solvers("fusion").items() if v.kind == "heuristic"]


def sol(*clusters: list[str]) -> FusionSolution:
    return FusionSolution(tuple(tuple(c) for c in clusters))


def brute_force(inst) -> int:
    """Minimum objective over every legal clustering (set partitions, topologically ordered)."""
    best = None
    for s in acyclic_clusterings(inst):
        if not check(inst, s):
            value = objective(inst, s)
            best = value if best is None else min(best, value)
    assert best is not None
    return best


SMALL = {d["name"]: parse_instance(d) for d in HAND_WRITTEN if len(d["bindings"]) <= 9}


# --- the seed's worked numbers --------------------------------------------------------------------


def test_normalize_inc_worked_example():
    inst = parse_instance(NORMALIZE_INC)
    assert objective(inst, sol(["sum"], ["incs", "norm"])) == 9
    assert objective(inst, sol(["incs", "sum"], ["norm"])) == 12
    assert check(inst, sol(["sum"], ["incs", "norm"])) == []
    assert check(inst, sol(["incs", "sum"], ["norm"])) == []
    assert brute_force(inst) == 9


def test_normalize2_worked_example():
    inst = parse_instance(NORMALIZE2)
    best = sol(["sum1", "gts", "sum2"], ["ys1", "ys2"])
    assert check(inst, best) == []
    assert objective(inst, best) == 51
    assert brute_force(inst) == 51
    counts = measure(inst, best)
    assert counts["loops"] == 2 and counts["outputs_match"] == 1
    assert counts["intermediate_arrays"] == 0


@pytest.mark.parametrize("solver", EXACT)
def test_exact_solvers_reach_the_worked_optima(solver):
    for doc, value, clusters in [
        (NORMALIZE_INC, 9, [{"sum"}, {"incs", "norm"}]),
        (NORMALIZE2, 51, [{"sum1", "gts", "sum2"}, {"ys1", "ys2"}]),
    ]:
        r = solve(parse_instance(doc), solver, Options(time_limit=5))
        assert r.status is Status.OPTIMAL, r.message
        assert r.objective == value and r.bound == value
        assert [set(c) for c in r.solution.clusters] == clusters
        assert r.stats["variables"] > 0 and r.stats["constraints"] > 0
        assert r.stats[METRIC + "loops"] == 2 and r.stats[METRIC + "outputs_match"] == 1


# --- every solver on every small shipped program --------------------------------------------------


@pytest.mark.parametrize("name", sorted(SMALL))
def test_all_solvers_legal_and_ordered(name):
    inst = SMALL[name]
    opt = brute_force(inst)
    lb = lower_bound(inst)
    assert lb <= opt
    for s in SOLVERS:
        r = solve(inst, s, Options(time_limit=5))
        assert r.status.has_solution, (s, r.message)
        assert check(inst, r.solution) == []
        assert r.stats[METRIC + "outputs_match"] == 1
        assert r.objective >= opt >= (r.bound if r.bound is not None else lb)
        if registry.solvers("fusion")[s].kind == "exact":
            assert r.status is Status.OPTIMAL and r.objective == opt, (s, r.objective, opt)


def test_forms_agree_up_to_the_constant():
    inst = parse_instance(QUADTREE)
    results = {s: solve(inst, s, Options(time_limit=10)) for s in EXACT}
    values = {r.objective for r in results.values()}
    assert len(values) == 1
    const = unoptimised_constant(inst)
    for s, r in results.items():
        form = r.stats["form"]
        assert r.stats["model_objective"] == r.objective + (const if form == "unopt" else 0), s
    assert results["ilp-unopt"].stats["variables"] > results["ilp"].stats["variables"]
    assert results["ilp-unopt"].stats["constraints"] > results["ilp"].stats["constraints"]


def test_shipped_instances_load_and_round_trip():
    files = sorted((ROOT / "instances" / "fusion").glob("*.json"))
    assert len(files) >= 10
    for f in files:
        inst = load_instance(f)
        assert parse_instance(instance_to_json(inst)) == inst
        assert json.loads(f.read_text())["problem"] == "fusion"


def test_time_limit_returns_a_solution():
    inst = random_program(30, 4)
    r = solve(inst, "ilp-unopt-cbc", Options(time_limit=0.01))
    assert r.status.has_solution and check(inst, r.solution) == []


# --- property tests over random programs ----------------------------------------------------------


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(2, 7), seed=st.integers(0, 10_000))
def test_random_programs_brute_force_equals_ilp(n, seed):
    inst = random_program(n, seed, filter_p=0.25, cross_p=0.05, external_p=0.05)
    opt = brute_force(inst)
    for s in ("ilp", "ilp-unopt", "cpsat"):
        r = solve(inst, s, Options(time_limit=5))
        assert r.status is Status.OPTIMAL and r.objective == opt, (s, r.message)
        assert r.stats[METRIC + "outputs_match"] == 1
    for s in HEURISTICS:
        r = solve(inst, s)
        assert r.status.has_solution and r.objective >= opt
        assert r.stats[METRIC + "outputs_match"] == 1


@settings(max_examples=15, deadline=None)
@given(n=st.integers(1, 25), seed=st.integers(0, 10_000), data_seed=st.integers(0, 100))
def test_interpreter_unfused_counts_and_heuristic_outputs(n, seed, data_seed):
    inst = random_program(n, seed, filter_p=0.25, cross_p=0.05, external_p=0.05, gather_p=0.1)
    data = make_data(inst, data_seed)
    ref, ref_counts = reference(inst, data)
    none = solution_from_labels(inst, list(range(n)))
    got, counts = run_clustered(inst, none, data)
    assert same_outputs(ref, got)
    assert counts == ref_counts
    for s in HEURISTICS:
        r = solve(inst, s)
        assert check(inst, r.solution) == []
        got, fused = run_clustered(inst, r.solution, data)
        assert same_outputs(ref, got)
        assert fused.loops == len(r.solution.clusters)
        assert fused.elements_read <= ref_counts.elements_read
        assert fused.elements_written <= ref_counts.elements_written


# --- the checker names each violation -------------------------------------------------------------


@pytest.mark.parametrize(
    "clusters, needle",
    [
        ([["incs", "sum", "norm"]], "fusion-preventing edge inside a cluster"),
        ([["incs", "norm"], ["sum"]], "broken precedence"),
        ([["incs"], ["sum"]], "missing"),
        ([["incs", "sum"], ["norm", "sum"]], "duplicate"),
        ([["incs"], [], ["sum"], ["norm"]], "empty cluster"),
    ],
)
def test_checker_normalize_inc(clusters, needle):
    inst = parse_instance(NORMALIZE_INC)
    found = check(inst, sol(*clusters))
    assert any(needle in v for v in found), found


def test_checker_rate_rule_and_cycle():
    inst = parse_instance(NORMALIZE2)
    found = check(inst, sol(["sum1", "sum2"], ["gts"], ["ys1"], ["ys2"]))
    assert any("rate rule" in v and "gts" in v for v in found), found
    chain = parse_instance(
        {
            "problem": "fusion",
            "inputs": ["xs"],
            "bindings": [
                {"name": "a", "op": "map", "inputs": ["xs"]},
                {"name": "s", "op": "fold", "inputs": ["a"]},
                {"name": "b", "op": "map", "inputs": ["xs"], "scalars": ["s"]},
            ],
            "outputs": ["b"],
        }
    )
    found = check(chain, sol(["a", "b"], ["s"]))
    assert any("cycle" in v for v in found), found
    two_rates = parse_instance(
        {
            "problem": "fusion",
            "inputs": ["xs", "ys"],
            "input_rates": {"ys": "m"},
            "bindings": [
                {"name": "a", "op": "map", "inputs": ["xs"]},
                {"name": "b", "op": "map", "inputs": ["ys"]},
            ],
            "outputs": ["a", "b"],
        }
    )
    assert any("rate mismatch" in v for v in check(two_rates, sol(["a", "b"])))


# --- bad input: one clear line naming the field ---------------------------------------------------


def prog(bindings, inputs=("xs",), outputs=("y",), **extra):
    return {
        "problem": "fusion",
        "inputs": list(inputs),
        "bindings": bindings,
        "outputs": list(outputs),
        **extra,
    }


@pytest.mark.parametrize(
    "doc, field, why",
    [
        (
            prog([{"name": "y", "op": "map", "inputs": ["zs"]}]),
            "bindings[0].inputs[0]",
            "unknown name 'zs'",
        ),
        (
            prog(
                [
                    {"name": "y", "op": "map", "inputs": ["xs"]},
                    {"name": "y", "op": "map", "inputs": ["xs"]},
                ]
            ),
            "bindings[1].name",
            "bound twice",
        ),
        (prog([{"name": "xs", "op": "map", "inputs": ["xs"]}]), "bindings[0].name", "bound twice"),
        (
            prog(
                [
                    {"name": "y", "op": "map", "inputs": ["t"]},
                    {"name": "t", "op": "map", "inputs": ["xs"]},
                ]
            ),
            "bindings[0].inputs[0]",
            "used before it is defined",
        ),
        (
            prog([{"name": "y", "op": "zip", "inputs": ["xs"]}]),
            "bindings[0].op",
            "unknown op 'zip'",
        ),
        (
            prog([{"name": "y", "op": "fold", "inputs": ["xs", "xs"]}]),
            "bindings[0].inputs",
            "fold takes exactly 1 input, got 2",
        ),
        (
            prog([{"name": "y", "op": "gather", "inputs": ["xs"]}]),
            "bindings[0].inputs",
            "gather takes exactly 2 inputs [data, indices], got 1",
        ),
        (
            prog([{"name": "y", "op": "map", "inputs": []}]),
            "bindings[0].inputs",
            "map takes at least 1 input",
        ),
        (
            prog(
                [
                    {"name": "s", "op": "fold", "inputs": ["xs"]},
                    {"name": "y", "op": "map", "inputs": ["s"]},
                ]
            ),
            "bindings[1].inputs[0]",
            "is a scalar",
        ),
        (
            prog([{"name": "y", "op": "map", "inputs": ["xs"], "scalars": ["xs"]}]),
            "bindings[0].scalars[0]",
            "is an array, not a scalar",
        ),
        (
            prog(
                [
                    {"name": "g", "op": "filter", "inputs": ["xs"]},
                    {"name": "y", "op": "map", "inputs": ["xs", "g"]},
                ]
            ),
            "bindings[1].inputs[1]",
            "rate",
        ),
        (prog([{"name": "y", "op": "map"}][:0]), "bindings", "at least one binding"),
        (prog([{"op": "map", "inputs": ["xs"]}]), "bindings[0].name", "missing required field"),
        (
            prog([{"name": "y", "op": "map", "inputs": ["xs"]}], outputs=("q",)),
            "outputs[0]",
            "unknown name 'q'",
        ),
        (
            prog([{"name": "y", "op": "map", "inputs": "xs"}]),
            "bindings[0].inputs",
            "must be a list",
        ),
        (
            prog([{"name": "y", "op": "external", "inputs": ["xs"]}]),
            "bindings[0].outputs",
            "at least one output",
        ),
        (
            {"problem": "fusion", "inputs": ["xs"], "outputs": ["xs"]},
            "bindings",
            "missing required field",
        ),
    ],
)
def test_bad_input_names_the_field(doc, field, why):
    with pytest.raises(InstanceError) as err:
        parse_instance(doc)
    text = str(err.value)
    assert text.startswith(field + ":"), text
    assert why in text, text
    assert "\n" not in text


@pytest.mark.parametrize("path", sorted(BAD.glob("*.json")), ids=lambda p: p.stem)
def test_bad_files(path):
    expected = (
        json.loads(path.with_suffix(".expected").read_text())["error"]
        if path.with_suffix(".expected").exists()
        else None
    )
    with pytest.raises(InstanceError) as err:
        load_instance(path)
    text = str(err.value)
    assert text.startswith(str(path))
    if expected:
        assert expected in text, text


def test_bad_solution_names_the_field():
    inst = parse_instance(NORMALIZE_INC)
    with pytest.raises(InstanceError, match=r"solution.clusters\[1\]\[0\]: no binding"):
        parse_solution({"clusters": [["sum"], ["nope"]]}, inst)
    with pytest.raises(InstanceError, match=r"solution.clusters\[0\]: must be a list"):
        parse_solution({"clusters": ["sum"]}, inst)


def test_problem_spec():
    inst = parse_instance(NORMALIZE_INC)
    assert PROBLEM.sense == "min" and PROBLEM.size(inst) == 3
    s = sol(["sum"], ["incs", "norm"])
    assert parse_solution(PROBLEM.solution_to_json(inst, s), inst) == s


def test_picture_draws_one_or_two_panels():
    from tensorplan.harness.picture_fusion import picture

    inst = parse_instance(NORMALIZE2)
    one = solve(inst, "greedy").solution
    two = solve(inst, "typed").solution
    assert len(picture(inst, {"greedy": one}).axes) == 1
    assert len(picture(inst, {"greedy": one, "typed": two}).axes) == 2
    assert len(picture(inst, {}).axes) == 1

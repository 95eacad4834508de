"""Exo realisation: Exo's own checks accept the chosen fusion and refuse an illegal one."""

from __future__ import annotations

import pytest

from tensorplan.harness.run import solve
from tensorplan.problems.core import Options
from tensorplan.problems.fusion import FusionSolution, acyclic_clusterings, check, parse_instance
from tensorplan.problems.fusion_gen import NORMALIZE2, NORMALIZE_INC, SUMSQ, random_program

pytest.importorskip("exo")

from tensorplan.problems.fusion_exo import (
    ExoRefused,
    contract,
    contracted,
    exo_source,
    realise,
    top_level_loops,
    unsupported,
)


def test_normalize_inc_optimum_is_realised_by_exo():
    inst = parse_instance(NORMALIZE_INC)
    r = solve(inst, "ilp", Options(time_limit=5))
    p = realise(inst, r.solution)
    assert top_level_loops(p) == 2
    text = str(p)
    # the sum loop first, then incs and norm in one loop, incs contracted to a scalar inside it
    assert text.index("v_sum +=") < text.index("v_incs_0 =") < text.index("v_norm[i_incs]")
    assert "v_incs: f32[n]" not in text and "f32[n] @ DRAM\n" not in text.split("):", 1)[1]
    assert "v_incs_0: f32 @ DRAM" in text
    unshrunk = str(realise(inst, r.solution, shrink=False))
    assert "v_incs: f32[n] @ DRAM" in unshrunk


def test_exo_refuses_to_contract_an_array_used_by_another_loop():
    inst = parse_instance(NORMALIZE_INC)
    fused = realise(inst, FusionSolution((("incs", "sum"), ("norm",))), shrink=False)
    forced = FusionSolution((("sum",), ("incs", "norm")))  # contracts incs ...
    with pytest.raises(ExoRefused, match="sink_alloc: cannot contract incs"):
        contract(inst, forced, fused)  # ... but in a procedure where norm's loop reads it


def test_exo_refuses_an_illegal_fusion():
    inst = parse_instance(NORMALIZE_INC)
    bad = FusionSolution((("incs",), ("sum", "norm")))
    assert check(inst, bad)  # our checker: fusion-preventing edge sum -> norm
    with pytest.raises(ExoRefused, match="fuse: cannot fuse norm into the loop of sum"):
        realise(inst, bad)


@pytest.mark.parametrize("doc", [NORMALIZE_INC, SUMSQ], ids=lambda d: d["name"])
def test_exo_accepts_exactly_the_legal_clusterings(doc):
    """Over every acyclic clustering: our checker says legal <=> Exo realises it."""
    inst = parse_instance(doc)
    for sol in acyclic_clusterings(inst):
        legal = not check(inst, sol)
        try:
            p = realise(inst, sol)
            realised = True
        except ExoRefused:
            realised = False
        assert legal == realised, (sol.clusters, check(inst, sol))
        if realised:
            assert top_level_loops(p) == len(sol.clusters)
            text = str(p)
            for name in contracted(inst, sol):  # contracted arrays are scalars in the loop
                assert f"v_{name}: f32[n]" not in text and f"v_{name}_0: f32 @ DRAM" in text


def test_random_map_fold_programs_realise_the_ilp_optimum():
    for seed in range(3):
        inst = random_program(
            8,
            seed,
            filter_p=0,
            gather_p=0,
            cross_p=0,
            external_p=0,
            generate_p=0,
            fold_p=0.3,
            inputs=2,
        )
        assert unsupported(inst) is None
        r = solve(inst, "cpsat", Options(time_limit=5))
        assert top_level_loops(realise(inst, r.solution)) == len(r.solution.clusters)


def test_filters_are_reported_unsupported():
    inst = parse_instance(NORMALIZE2)
    assert "filter" in unsupported(inst)
    with pytest.raises(ValueError, match="no Exo realisation: bindings\\[1\\] is a filter"):
        exo_source(inst)

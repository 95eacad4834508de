"""Schedule picture: live memory at each schedule position, one step line per solution.

Typically two solutions, e.g. the greedy/Kahn start against `shift`: the area under each line is
its sum-liveness, its highest point its peak.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from matplotlib.figure import Figure

from tensorplan.harness.figures import subplots
from tensorplan.problems.schedule import ScheduleInstance, order_objective, profile, to_order

PREFERRED = ("kahn", "shift")  # the pair the report draws: a baseline and the best


def picture(instance: ScheduleInstance, solutions: Mapping[str, Any]) -> Figure:
    """Live memory per position for each named solution (a `ScheduleSolution`)."""
    fig, ax = subplots(figsize=(7, 3), dpi=100)
    g = instance.graph
    for name, sol in list(solutions.items())[:4]:
        order = to_order(instance, sol)
        live = profile(g, order)
        total = order_objective(g, order, "sum_liveness")
        ax.step(
            range(len(live)),
            live,
            where="mid",
            label=f"{name}: sum {total}, peak {int(live.max(initial=0))}",
        )
    ax.set_xlabel("schedule position")
    ax.set_ylabel("live memory")
    ax.set_title(
        f"{instance.name or 'schedule'} ({len(instance.ops)} ops, objective {instance.objective})",
        fontsize=9,
    )
    ax.legend(fontsize=8, loc="upper right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig

"""Picture of a fusion clustering: the dependency graph, nodes coloured by cluster.

Nodes sit in columns by dependency depth; fusible edges are grey arrows, fusion-preventing edges
dashed red. With two solutions, two panels side by side compare them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from matplotlib.figure import Figure

from tensorplan.harness.figures import colormap, subplots
from tensorplan.problems.fusion import FusionInstance, labels_of


def _layout(inst: FusionInstance) -> list[tuple[float, float]]:
    g = inst.graph
    level = [0] * g.n
    for j in range(g.n):
        level[j] = max((level[i] + 1 for i in g.pred[j]), default=0)
    rows: dict[int, int] = {}
    pos = []
    for j in range(g.n):
        r = rows.get(level[j], 0)
        rows[level[j]] = r + 1
        pos.append((float(level[j]), -float(r)))
    return pos


def _draw(ax, inst: FusionInstance, solution: Any, title: str) -> None:
    g = inst.graph
    pos = _layout(inst)
    lab = labels_of(inst, solution) if solution is not None else list(range(g.n))
    cmap = colormap("tab20")
    for (i, j), fp in g.edges.items():
        (x0, y0), (x1, y1) = pos[i], pos[j]
        ax.annotate(
            "",
            xy=(x1, y1),
            xytext=(x0, y0),
            arrowprops={
                "arrowstyle": "->",
                "color": "tab:red" if fp else "0.5",
                "linestyle": "--" if fp else "-",
                "lw": 1.2,
                "shrinkA": 11,
                "shrinkB": 11,
            },
        )
    for i, (x, y) in enumerate(pos):
        b = inst.bindings[i]
        ax.scatter([x], [y], s=520, color=cmap(lab[i] % 20), edgecolors="k", zorder=3)
        ax.text(x, y, f"{b.name}\n{b.op}", ha="center", va="center", fontsize=6, zorder=4)
    ax.set_title(title, fontsize=8)
    ax.set_axis_off()
    ax.margins(0.15)


PREFERRED = ("none", "ilp")  # the pair the report draws: a baseline and the best


def picture(instance: FusionInstance, solutions: Mapping[str, Any]) -> Figure:
    """One panel per solution (at most two; none given: the graph alone)."""
    from tensorplan.problems.fusion import objective

    chosen = list(solutions.items())[:2] or [("graph", None)]
    width = min(4 + 0.5 * len(instance.bindings), 9)
    fig, rows = subplots(1, len(chosen), figsize=(width * len(chosen), 3.2), squeeze=False)
    axes = rows[0]
    for ax, (name, sol) in zip(axes, chosen, strict=True):
        title = (
            name
            if sol is None
            else f"{name}: {len(sol.clusters)} loops, objective {objective(instance, sol)}"
        )
        _draw(ax, instance, sol, title)
    fig.suptitle(f"{instance.name or 'fusion'} (red dashed: fusion-preventing)", fontsize=9)
    fig.tight_layout()
    return fig

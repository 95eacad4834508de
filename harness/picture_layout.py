"""Picture of layout solutions: each sink's layout as a grid of coloured cells, a colour per label.

One row of panels per solver (at most three), one panel per sink (at most eight); colours are
shared across all panels, so equal colours mean equal mappings. Tensors of rank > 2 are drawn as
(product of leading dims, last dim); large tensors show their top-left 64 x 64 corner.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure

from tensorplan.harness.figures import colormap, subplots
from tensorplan.problems.layout import LayoutInstance, LayoutSolution, objective

MAX_SINKS, MAX_SOLVERS, CORNER = 8, 3, 64


def _grid(labels: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    if len(shape) <= 1:
        grid = labels.reshape(1, -1)
    else:
        grid = labels.reshape(int(np.prod(shape[:-1])), shape[-1])
    return grid[:CORNER, :CORNER]


PREFERRED = ("greedy0", "mip")  # the pair the report draws: a baseline and the best


def picture(instance: LayoutInstance, solutions: Mapping[str, Any]) -> Figure:
    """Sink layouts of up to three solutions, one colour per label (shared across panels)."""
    g = instance.graph
    sinks = g.sink_ids[:MAX_SINKS]
    chosen = list(solutions.items())[:MAX_SOLVERS]
    grids: list[list[np.ndarray]] = []
    for _, sol in chosen:
        assert isinstance(sol, LayoutSolution)
        grids.append([_grid(np.asarray(sol.sinks[s]), g.shapes[s]) for s in sinks])
    used = (
        np.unique(np.concatenate([x.ravel() for row in grids for x in row]))
        if grids and sinks
        else np.empty(0, dtype=np.int64)
    )
    base = colormap("tab20").colors
    colours = ListedColormap([base[i % len(base)] for i in range(max(len(used), 1))])
    rows, cols = max(len(chosen), 1), max(len(sinks), 1)
    fig, axes = subplots(rows, cols, figsize=(min(2.2 * cols, 14), 2.0 * rows + 0.4), squeeze=False)
    for r, (name, sol) in enumerate(chosen):
        for c, s in enumerate(sinks):
            ax = axes[r][c]
            idx = np.searchsorted(used, grids[r][c])
            ax.imshow(
                idx,
                cmap=colours,
                vmin=0,
                vmax=max(len(used) - 1, 1),
                interpolation="nearest",
                aspect="equal",
            )
            ax.set_xticks([])
            ax.set_yticks([])
            ax.set_title(f"{s} {list(g.shapes[s])}", fontsize=8)
        axes[r][0].set_ylabel(f"{name}\n{objective(instance, sol):g}", fontsize=8)
    if not chosen or not sinks:
        axes[0][0].axis("off")
        axes[0][0].text(0.5, 0.5, "nothing to draw", ha="center", va="center")
    fig.suptitle(f"{instance.name or 'layout'}: sink layouts (colour = mapping)", fontsize=9)
    fig.tight_layout()
    return fig

"""Figures for pictures and reports: each on its own Agg canvas, never through pyplot.

Calling `matplotlib.use("Agg")` or pyplot inside a library switches the backend of whoever imports
it (a Jupyter kernel then stops drawing inline figures) and keeps figures alive in pyplot's global
registry. A `Figure` with its own canvas renders to PNG the same in scripts, tests and reports.
"""

from __future__ import annotations

from typing import Any

import matplotlib
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure


def subplots(
    nrows: int = 1, ncols: int = 1, *, figsize: tuple[float, float] | None = None, **kw: Any
) -> tuple[Figure, Any]:
    """Like `pyplot.subplots`, but the figure is independent of pyplot and of the backend."""
    fig = Figure(figsize=figsize, dpi=kw.pop("dpi", None))
    FigureCanvasAgg(fig)
    return fig, fig.subplots(nrows, ncols, **kw)


def colormap(name: str) -> Any:
    return matplotlib.colormaps[name]

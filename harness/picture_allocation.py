"""Allocation picture: every buffer as a rectangle in time x address, one panel per solver."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tensorplan.harness.figures import colormap, subplots
from tensorplan.problems.allocation import AllocationInstance, AllocationSolution, lower_bound, peak

PREFERRED = ("ffd", "cpsat")  # the pair the report draws: a baseline and the best


def picture(instance: AllocationInstance, solutions: Mapping[str, AllocationSolution]) -> Any:
    """Up to two solutions side by side; the dashed line is the live-size lower bound."""
    from matplotlib.patches import Rectangle

    chosen = list(solutions.items())[:2]
    fig, axes = subplots(1, len(chosen), figsize=(5.5 * len(chosen), 4), squeeze=False)
    cmap = colormap("tab20")
    lb = lower_bound(instance)
    t0 = min((b.start for b in instance.buffers), default=0)
    t1 = max((b.end for b in instance.buffers), default=0) + 1
    for ax, (name, sol) in zip(axes[0], chosen, strict=True):
        for k, (b, o) in enumerate(zip(instance.buffers, sol.offsets, strict=True)):
            ax.add_patch(
                Rectangle(
                    (b.start, o),
                    b.duration,
                    b.size,
                    facecolor=cmap(k % 20),
                    edgecolor="black",
                    linewidth=0.3,
                )
            )
            if len(instance.buffers) <= 30:
                ax.text(
                    b.start + b.duration / 2,
                    o + b.size / 2,
                    b.id,
                    ha="center",
                    va="center",
                    fontsize=7,
                )
        top = peak(instance, sol)
        ax.axhline(lb, ls="--", color="grey", lw=0.8)
        ax.set(
            xlim=(t0, t1),
            ylim=(0, max(top, lb) * 1.05 or 1),
            xlabel="time",
            ylabel="address",
            title=f"{name}: peak {top} (lower bound {lb})",
        )
    fig.suptitle(instance.name or "allocation")
    fig.tight_layout()
    return fig

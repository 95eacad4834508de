"""Interactive exploration in Jupyter: pick an instance family, size, seed, time limit and
solvers; the explorer regenerates the instance, re-solves and redraws the comparison table and
the problem's picture. The notebooks stay one line long (`allocation.explore()`); everything
else lives here.

Built on a problem's front door, taken duck-typed (`Explorable`: `harness.api.ProblemAPI` is one,
and opens an explorer with `allocation.explore()`), so this module never imports the API: each
solver runs once through it, its solution verified by the problem's checker, and instances come
from the problem's generators `tensorplan.problems.<p>_gen`. The table is an HTML widget and the
picture a PNG image widget, so both work with any matplotlib backend and can be driven without a
browser: set `explorer.controls["seed"].value = 3` and read `explorer.table`. Needs `ipywidgets`
(the `dev` and `notebooks` extras).
"""

from __future__ import annotations

import html
import io
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path
from typing import Any, Protocol

import ipywidgets as widgets
import pandas as pd

from tensorplan.harness import registry
from tensorplan.problems.core import Result

SHIPPED = "shipped"  # the family whose members are the shipped instance files
SHOWN = ("solver", "kind", "status", "objective", "bound", "gap", "runtime_s")
"""Columns of the comparison table the explorer draws (`Explorer.table` has every stat)."""


class Explorable(Protocol):
    """What an explorer asks of a problem's front door (`harness.api.ProblemAPI` has it all)."""

    @property
    def name(self) -> str: ...

    def shipped(self, name: str) -> Path: ...

    def shipped_names(self) -> list[str]: ...

    def load(self, path: str | Path) -> Any: ...

    def results(
        self, instance: Any, solvers: Sequence[str] | None = None, *, time_limit: float, seed: int
    ) -> dict[str, Result]: ...

    def table(self, results: Mapping[str, Result]) -> pd.DataFrame: ...

    def plot(self, instance: Any, solutions: Mapping[str, Any] | Result) -> Any: ...


@dataclass(frozen=True)
class Family:
    """An instance generator driven by one size and a seed."""

    name: str
    make: Callable[[int, int], Any]  # (size, seed) -> instance
    smallest: int
    largest: int
    default: int
    size_label: str = "size"


def families(problem: str) -> dict[str, Family]:
    """The generator families of `problem`, small default sizes first (quick to re-solve)."""
    gen = import_module(f"tensorplan.problems.{problem}_gen")
    if problem == "allocation":
        return {
            "mixed": Family("mixed", gen.mixed_family, 2, 300, 16, "buffers"),
            "random": Family("random", gen.random_family, 2, 300, 12, "buffers"),
            "pow2": Family("pow2", gen.pow2_family, 2, 300, 12, "buffers"),
            "layered": Family("layered", gen.layered_family, 1, 100, 4, "layers"),
        }
    if problem == "schedule":
        return {
            "grid": Family("grid", lambda n, s: gen.grid(n, n + 1, s), 1, 12, 3, "rows"),
            "tree": Family("tree", gen.tree, 2, 400, 12, "ops"),
            "bifurcating": Family("bifurcating", gen.bifurcating, 1, 6, 2, "depth"),
            "adversary": Family("adversary", gen.adversary, 2, 400, 10, "ops"),
            "recompute": Family("recompute", gen.recompute, 2, 400, 4, "layers"),
        }
    if problem == "layout":
        return {
            "random": Family(
                "random", lambda n, s: gen.random_graph(n, max(4, n), s), 2, 200, 12, "ops"
            ),
            "exercise": Family("exercise", gen.scaled_exercise, 2, 100_000, 12, "elements"),
        }
    if problem == "fusion":
        return {"random": Family("random", gen.random_program, 2, 60, 10, "bindings")}
    raise KeyError(f"no generator families for problem {problem!r}")


def default_solvers(problem: str) -> tuple[str, ...]:
    """The pair the report draws (a baseline and the best), plus the default exact model when
    neither is exact (its bound is the yardstick)."""
    preferred = getattr(import_module(f"tensorplan.harness.picture_{problem}"), "PREFERRED", ())
    known = registry.solvers(problem)
    chosen = tuple(n for n in preferred if n in known)
    if not chosen:
        chosen = (next(n for n, s in known.items() if s.kind == "heuristic"),)
    if all(known[n].kind != "exact" for n in chosen):  # an exact model shows the bound
        chosen += (registry.solver(problem).name,)
    return chosen


def figure_png(fig: Any, dpi: int = 80) -> bytes:
    """Render a matplotlib Figure (the pictures' own, pyplot-free) to PNG bytes."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


def time_limit_slider(value: float) -> Any:
    """A log-scale slider of seconds, 0.1 to 100: the time-limit control of every explorer."""
    return widgets.FloatLogSlider(
        value=value,
        base=10,
        min=-1,
        max=2,
        step=0.1,
        description="time limit s",
        continuous_update=False,
        readout_format=".2g",
    )


class Explorer(widgets.VBox):
    """Controls, a status line, the comparison table and the picture of one problem.

    Any change of a control re-solves (sliders only when released); `Solve` re-runs as is.
    After each solve: `instance`, `results` (solver -> Result), `table` (DataFrame), `png`.
    """

    def __init__(
        self,
        api: Explorable,
        *,
        family: str | None = None,
        size: int | None = None,
        seed: int = 0,
        time_limit: float = 2.0,
        solvers: Sequence[str] | None = None,
        shipped: str | None = None,
    ) -> None:
        self.api = api
        self.families = families(self.api.name)
        self.instance: Any = None
        self.results: dict[str, Result] = {}
        self.table = pd.DataFrame()
        self.png = b""
        self.solves = 0
        self._hold = False

        fam = family or (SHIPPED if shipped else next(iter(self.families)))
        names = self.api.shipped_names()
        c: dict[str, Any] = {
            "family": widgets.Dropdown(
                options=[*self.families, SHIPPED], value=fam, description="family"
            ),
            "instance": widgets.Dropdown(
                options=names,
                value=shipped or _first_small(self.api, names),
                description="instance",
            ),
            "size": widgets.IntSlider(description="size", continuous_update=False),
            "seed": widgets.BoundedIntText(value=seed, min=0, max=10**6, description="seed"),
            "time_limit": time_limit_slider(time_limit),
            "solvers": widgets.SelectMultiple(
                options=list(registry.solvers(self.api.name)),
                value=tuple(solvers or default_solvers(self.api.name)),
                description="solvers",
                rows=6,
            ),
        }
        self.controls = c
        self.button = widgets.Button(description="Solve", tooltip="re-run with these settings")
        self.status = widgets.HTML()
        self.table_html = widgets.HTML()
        self.image = widgets.Image(format="png", layout=widgets.Layout(max_width="100%"))
        self._set_family(fam, size)
        for w in c.values():
            w.observe(self._changed, names="value")
        self.button.on_click(lambda _: self.refresh())
        super().__init__(
            [
                widgets.HBox([c["family"], c["instance"], c["size"], c["seed"]]),
                widgets.HBox([c["solvers"], widgets.VBox([c["time_limit"], self.button])]),
                self.status,
                self.table_html,
                self.image,
            ]
        )
        self.refresh()

    def _set_family(self, fam: str, size: int | None = None) -> None:
        """Point the size slider at family `fam`'s range; without firing a re-solve."""
        c = self.controls
        self._hold = True
        try:
            slider = c["size"]
            if fam == SHIPPED:  # the seed still seeds the solvers
                slider.disabled, c["instance"].disabled = True, False
                return
            f = self.families[fam]
            slider.min, slider.max = min(slider.min, f.smallest), max(slider.max, f.largest)
            slider.value = f.default if size is None else max(f.smallest, min(size, f.largest))
            slider.min, slider.max = f.smallest, f.largest
            slider.description = f.size_label
            slider.disabled, c["instance"].disabled = False, True
        finally:
            self._hold = False

    def _changed(self, change: dict[str, Any]) -> None:
        if self._hold:
            return
        if change["owner"] is self.controls["family"]:
            self._set_family(change["new"])
        self.refresh()

    def make_instance(self) -> Any:
        """The instance the controls describe: a shipped file or a generated one."""
        c = self.controls
        if c["family"].value == SHIPPED:
            return self.api.load(self.api.shipped(c["instance"].value))
        return self.families[c["family"].value].make(c["size"].value, c["seed"].value)

    def refresh(self) -> None:
        """Rebuild the instance, re-solve with every chosen solver, redraw table and picture.

        Errors are shown in the status line (a callback that raised would vanish silently)."""
        c = self.controls
        names = list(c["solvers"].value)
        if not names:
            self.status.value = "<b>choose at least one solver</b>"
            return
        self.status.value = "<i>solving...</i>"
        try:
            self.instance = self.make_instance()
            self.results = self.api.results(
                self.instance, names, time_limit=float(c["time_limit"].value), seed=c["seed"].value
            )
            self.table = self.api.table(self.results)
            drawn = {n: r.solution for n, r in self.results.items() if r.solution is not None}
            self.png = figure_png(self.api.plot(self.instance, drawn)) if drawn else b""
        except Exception as exc:  # shown to the user; the explorer stays usable
            self.status.value = f"<b>error</b>: {html.escape(type(exc).__name__)}: " + html.escape(
                str(exc)
            )
            return
        self.solves += 1
        name = getattr(self.instance, "name", None) or c["family"].value
        self.status.value = f"<b>{html.escape(str(name))}</b>, solved with {len(names)} solver(s)"
        shown = self.table[[k for k in SHOWN if k in self.table]]  # the stats stay in .table
        self.table_html.value = shown.to_html(index=False, na_rep="", float_format="{:g}".format)
        self.image.value = self.png
        self.image.layout.display = "" if self.png else "none"


def _first_small(api: Explorable, names: list[str]) -> str | None:
    """The smallest shipped file of a problem (a quick first solve)."""
    if not names:
        return None
    return min(names, key=lambda n: (api.shipped(n).stat().st_size, n))


def explore(api: Explorable, **options: Any) -> Explorer:
    """An `Explorer` of one problem's front door; options: family, size, seed, time_limit,
    solvers, shipped (a shipped instance name; selects the `shipped` family)."""
    return Explorer(api, **options)


class Tour(widgets.VBox):
    """One explorer per problem behind a problem selector; each is built (and solved) on first
    selection, so opening the tour costs one solve. `harness.api.tour()` opens one."""

    def __init__(self, apis: Sequence[Explorable], **options: Any) -> None:
        self.apis = {api.name: api for api in apis}
        names = list(self.apis)
        self.options = options
        self.explorers: dict[str, Explorer] = {}
        self.choice = widgets.ToggleButtons(options=names, value=names[0], description="problem")
        self.choice.observe(lambda ch: self.show(ch["new"]), names="value")
        super().__init__([self.choice])
        self.show(names[0])

    def show(self, problem: str) -> Explorer:
        """Select `problem`, building its explorer on first use."""
        if problem not in self.explorers:
            self.explorers[problem] = Explorer(self.apis[problem], **self.options)
        if self.choice.value != problem:
            self.choice.value = problem  # fires show() again, which then finds the explorer
        self.children = (self.choice, self.explorers[problem])
        return self.explorers[problem]


# --- the memory plan of a real model ---------------------------------------------------------


def plan_peaks(plan: Any) -> pd.DataFrame:
    """The peaks of a `harness.plan.Plan` in bytes and MiB, and the memory each saves against
    (a) no reuse (every tensor its own offset); the live peaks are the floors of packing."""
    from tensorplan.harness.plan import baselines

    peaks = pd.Series(baselines(plan), name="bytes").to_frame()
    peaks["MiB"] = (peaks["bytes"] / 2**20).round(2)
    peaks["saved vs no reuse"] = (1 - peaks["bytes"] / plan.no_reuse).map("{:.1%}".format)
    return peaks


class PlanExplorer(widgets.VBox):
    """Plan a shipped ONNX model (`instances.models()`) with a batch size and a time limit:
    the peaks table, the live-memory curve and the packing, redrawn on every change.
    After each plan: `plan` (a `harness.plan.Plan`), `peaks` (DataFrame), `pngs`."""

    def __init__(self, model: str | None = None, *, batch: int = 1, time_limit: float = 2.0):
        from tensorplan import instances

        models = instances.models()
        self.plan: Any = None
        self.peaks = pd.DataFrame()
        self.pngs: dict[str, bytes] = {}
        self.plans = 0
        self.controls: dict[str, Any] = {
            "model": widgets.Dropdown(
                options=models, value=model or (models[0] if models else None), description="model"
            ),
            "batch": widgets.BoundedIntText(value=batch, min=1, max=256, description="batch"),
            "time_limit": time_limit_slider(time_limit),
        }
        self.status = widgets.HTML()
        self.table_html = widgets.HTML()
        wide = widgets.Layout(max_width="100%")
        self.images = {
            "live-memory.png": widgets.Image(format="png", layout=wide),
            "packing.png": widgets.Image(format="png", layout=wide),
        }
        for w in self.controls.values():
            w.observe(lambda _: self.refresh(), names="value")
        super().__init__(
            [
                widgets.HBox(list(self.controls.values())),
                self.status,
                self.table_html,
                *self.images.values(),
            ]
        )
        self.refresh()

    def refresh(self) -> None:
        """Import the chosen model, plan it, redraw; errors go to the status line."""
        import tempfile

        from tensorplan import instances
        from tensorplan.harness.plan import plan_model

        c = self.controls
        self.status.value = "<i>planning...</i>"
        try:
            path = instances.shipped(f"models/{c['model'].value}.onnx")
            with tempfile.TemporaryDirectory() as tmp:
                plan, _ = plan_model(
                    path,
                    tmp,
                    dims={"batch": c["batch"].value},
                    time_limit=float(c["time_limit"].value),
                )
                pngs = {name: (Path(tmp) / name).read_bytes() for name in self.images}
            self.plan, self.peaks, self.pngs = plan, plan_peaks(plan), pngs
        except Exception as exc:  # shown to the user; the explorer stays usable
            self.status.value = f"<b>error</b>: {html.escape(type(exc).__name__)}: " + html.escape(
                str(exc)
            )
            return
        self.plans += 1
        p = self.plan
        self.status.value = html.escape(
            f"{p.name}: {len(p.schedule.ops)} ops, {len(p.schedule.allocs)} tensors; "
            f"planned order: {p.order_source}"
        )
        self.table_html.value = self.peaks.to_html()
        for name, image in self.images.items():
            image.value = self.pngs[name]


def explore_plan(model: str | None = None, **options: Any) -> PlanExplorer:
    """A `PlanExplorer`: model (a name of `instances.models()`), batch, time_limit."""
    return PlanExplorer(model, **options)

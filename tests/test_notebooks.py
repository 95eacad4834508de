"""The notebooks as a user runs them, and their explorers driven without a browser.

Every notebook in notebooks/ runs top to bottom without error both with its own folder as the
working directory (as Jupyter starts the kernel) and from the repository root; the widgets it
shows report no error. The Jupyter front end the README opens them with is installed next to
the running Python. The explorers re-solve when a control changes, and every solution they
show passes the problem's checker.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
WHERE = {"own-folder": ROOT / "notebooks", "root": ROOT}


def _widget_texts(nb) -> list[str]:
    """The values of the HTML widgets the notebook left behind (its explorers' status lines)."""
    state = nb.metadata.get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {})
    return [
        m["state"].get("value", "")
        for m in state.get("state", {}).values()
        if m.get("model_name") == "HTMLModel"
    ]


@pytest.mark.parametrize("where", list(WHERE))
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path, where):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipywidgets")
    if path.stem == "plan":
        pytest.importorskip(
            "onnx", reason="plan.ipynb imports an ONNX model: pip install -e '.[onnx]'"
        )
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert not any(c.get("outputs") or c.get("execution_count") for c in code), "strip outputs"
    assert "instances/" not in "".join(c.source for c in code), "use shipped(), not a cwd path"
    probe = nbformat.v4.new_code_cell("import os; print(os.getcwd())")  # where the kernel runs
    nb.cells.insert(0, probe)
    client = nbclient.NotebookClient(
        nb,
        timeout=300,
        kernel_name="python3",
        shutdown_kernel="immediate",  # saves ~2 s a notebook; the kernel's state is not needed
        resources={"metadata": {"path": str(WHERE[where])}},  # the kernel's working directory
    )
    client.execute()
    assert Path(probe.outputs[0]["text"].strip()) == WHERE[where]
    errors = [o for c in code for o in c.outputs if o.output_type == "error"]
    assert not errors, errors[0]["evalue"] if errors else ""
    for c in code:  # a cell ending in a picture shows it (not just `<Figure size ...>`)
        last = c.source.strip().splitlines()[-1]
        if ".plot(" in last or last.startswith("Image("):
            assert any("image/png" in o.get("data", {}) for o in c.outputs), c.source
    texts = _widget_texts(nb)
    assert not [t for t in texts if "error" in t], texts
    if any("explore(" in c.source or "tour(" in c.source for c in code):
        assert any("solved with" in t for t in texts), "the explorer solved on opening"
    if any("explore_plan(" in c.source for c in code):
        assert any("planned order" in t for t in texts), "the plan explorer planned on opening"


def test_jupyter_lab_entry_point_installed():
    """The README opens the notebooks with `.venv/bin/jupyter lab notebooks/`: the `jupyter` and
    `jupyter-lab` scripts of the `dev` extra sit next to the running Python and run it, and the
    JupyterLab side of ipywidgets is there to draw the explorers."""
    pytest.importorskip("jupyterlab", reason="jupyterlab not installed: pip install -e '.[dev]'")
    from importlib.metadata import entry_points

    (lab,) = entry_points(group="console_scripts", name="jupyter-lab")
    assert lab.value.startswith("jupyterlab.")
    bindir = Path(sys.executable).parent
    for script in ("jupyter", "jupyter-lab"):
        path = bindir / script
        assert path.is_file() and os.access(path, os.X_OK), f"{script} missing in {bindir}"
        shebang = path.read_text(errors="replace").splitlines()[0]
        assert Path(shebang.removeprefix("#!").split()[0]).parent == bindir, shebang
    assert importlib.util.find_spec("jupyterlab_widgets"), "widgets would not render in Lab"


# --- the explorers, driven programmatically ------------------------------------------------

PROBLEMS = ("allocation", "schedule", "layout", "fusion")


def _verified(ex) -> None:
    """Every solution the explorer shows passes the problem's independent checker."""
    for name, res in ex.results.items():
        if res.solution is not None:
            violations, objective = ex.api.check(ex.instance, res.solution)
            assert violations == [], (name, violations)
            assert objective == res.objective


@pytest.mark.parametrize("problem", PROBLEMS)
def test_explorer_resolves_on_change(problem):
    pytest.importorskip("ipywidgets")
    from tensorplan.harness.api import ProblemAPI
    from tensorplan.harness.widgets import SHIPPED, families

    ex = ProblemAPI(problem).explore(time_limit=2)
    assert ex.solves == 1 and "solved with" in ex.status.value
    assert list(ex.table["solver"]) == list(ex.controls["solvers"].value)
    assert ex.png.startswith(b"\x89PNG") and ex.image.value == ex.png
    _verified(ex)
    first_name, first_table, first_png = ex.instance.name, ex.table.copy(), ex.png
    first_html = ex.table_html.value

    ex.controls["seed"].value = 3  # another instance of the same family and size
    assert ex.solves == 2
    assert ex.instance.name != first_name and ex.instance.name.endswith("-s3")
    assert not ex.table[["objective", "bound"]].equals(first_table[["objective", "bound"]])
    assert ex.png != first_png
    assert ex.table_html.value != first_html
    _verified(ex)

    size = ex.controls["size"]
    size.value = size.value + 1
    assert ex.solves == 3
    _verified(ex)

    others = list(families(problem))[1:]  # another family: the size slider follows its range
    for k, name in enumerate(others, start=4):
        ex.controls["family"].value = name
        f = ex.families[name]
        assert ex.solves == k and size.description == f.size_label
        assert (size.min, size.value, size.max) == (f.smallest, f.default, f.largest)
        _verified(ex)
    solves = ex.solves

    ex.controls["family"].value = SHIPPED  # a shipped file; the size no longer applies
    assert ex.solves == solves + 1 and size.disabled and not ex.controls["instance"].disabled
    assert ex.instance.name == ex.controls["instance"].value
    _verified(ex)
    by_size = sorted(ex.api.shipped_names(), key=lambda n: ex.api.shipped(n).stat().st_size)
    other = next(n for n in by_size if n != ex.controls["instance"].value)
    ex.controls["instance"].value = other  # another shipped file
    assert ex.solves == solves + 2 and ex.instance.name == other
    _verified(ex)


def test_explorer_solver_choice_and_shipped_instance():
    pytest.importorskip("ipywidgets")
    from tensorplan import allocation

    ex = allocation.explore(shipped="seed-example", solvers=["ffd"], time_limit=2)
    assert ex.controls["family"].value == "shipped"
    assert ex.table[["solver", "objective"]].values.tolist() == [["ffd", 37]]
    ex.controls["solvers"].value = ("bfd", "cpsat", "mip")
    assert list(ex.table["solver"]) == ["bfd", "cpsat", "mip"]
    row = ex.table.set_index("solver").loc["cpsat"]
    assert (row["status"], row["objective"], row["bound"]) == ("optimal", 37, 37)
    ex.controls["solvers"].value = ()  # nothing chosen: say so, keep the last table
    assert "at least one solver" in ex.status.value and len(ex.table) == 3
    ex.controls["time_limit"].value = 1.0  # still nothing chosen
    solves = ex.solves
    ex.controls["solvers"].value = ("ffd",)
    ex.button.click()  # Solve re-runs with the same settings
    assert ex.solves == solves + 2 and list(ex.table["solver"]) == ["ffd"]


def test_explorer_shows_errors_in_its_status_line(monkeypatch):
    """A failing solve must be visible: callbacks that raise vanish silently in Jupyter."""
    pytest.importorskip("ipywidgets")
    from tensorplan import schedule

    ex = schedule.explore(time_limit=2)
    good = ex.table.copy()

    def broken(size: int, seed: int):
        raise ValueError("generator broke")

    monkeypatch.setitem(ex.families, "grid", dataclasses.replace(ex.families["grid"], make=broken))
    ex.controls["seed"].value = 5
    assert "error" in ex.status.value and "generator broke" in ex.status.value
    assert ex.table.equals(good)


def test_tour_builds_each_explorer_on_first_selection():
    pytest.importorskip("ipywidgets")
    from tensorplan.harness.api import tour

    t = tour(["allocation", "layout"], time_limit=2)
    assert list(t.explorers) == ["allocation"] and t.children[1] is t.explorers["allocation"]
    t.choice.value = "layout"
    assert list(t.explorers) == ["allocation", "layout"]
    assert t.children[1] is t.explorers["layout"] and t.explorers["layout"].solves == 1
    t.choice.value = "allocation"  # back: the same explorer, not solved again
    assert t.children[1] is t.explorers["allocation"] and t.explorers["allocation"].solves == 1


def test_plan_explorer_replans_on_change():
    pytest.importorskip("ipywidgets")
    pytest.importorskip("onnx", reason="the plan explorer imports ONNX models")
    from tensorplan.harness.run import check
    from tensorplan.harness.widgets import explore_plan

    ex = explore_plan("mobilenetv2", batch=1, time_limit=1)
    assert ex.plans == 1 and "error" not in ex.status.value, ex.status.value
    first = ex.peaks["bytes"].copy()
    assert first["c_planned_order_best_packing"] <= first["b_model_order_best_packing"]
    assert first["c_planned_order_best_packing"] < first["a_model_order_no_reuse"]
    assert all(png.startswith(b"\x89PNG") for png in ex.pngs.values())

    ex.controls["batch"].value = 2  # twice the activations: the table changes
    assert ex.plans == 2
    assert ex.peaks["bytes"]["a_model_order_no_reuse"] > first["a_model_order_no_reuse"]
    planned = ex.plan.planned
    violations, peak = check(planned.instance, planned.solution)  # the offsets shown are valid
    assert violations == [] and peak == ex.peaks["bytes"]["c_planned_order_best_packing"]

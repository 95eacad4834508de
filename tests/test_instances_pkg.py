"""`tensorplan.instances`: shipped files found through the package from any working directory."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tensorplan import instances
from tensorplan.harness.api import ProblemAPI
from tensorplan.harness.registry import PROBLEMS

ROOT = Path(__file__).resolve().parents[1]


def test_root_is_the_package_folder():
    assert instances.root() == ROOT / "instances"
    assert Path(instances.__file__).resolve().parent == instances.root()
    for p in PROBLEMS:
        assert (instances.root() / p).is_dir()


def test_names_and_shipped_agree_with_the_folders():
    every = instances.names()
    assert every == sorted(every) and len(every) == len(set(every))
    for p in PROBLEMS:
        mine = instances.names(p)
        assert mine and [f"{p}/{n}" for n in mine] == [x for x in every if x.startswith(f"{p}/")]
        assert sorted(f.stem for f in (ROOT / "instances" / p).glob("*.json")) == mine
        assert ProblemAPI(p).shipped_names() == mine
    seed = ROOT / "instances" / "allocation" / "seed-example.json"
    assert instances.shipped("allocation/seed-example") == seed
    assert instances.shipped("allocation/seed-example.json") == seed
    assert ProblemAPI("allocation").shipped("seed-example") == seed


@pytest.mark.parametrize("problem", PROBLEMS)
def test_every_shipped_instance_loads_as_its_problem(problem):
    api = ProblemAPI(problem)
    for name in api.shipped_names():
        inst = api.load(api.shipped(name))
        assert isinstance(inst, api.spec.instance_type)


def test_unknown_names_say_what_was_meant():
    with pytest.raises(FileNotFoundError, match="did you mean allocation/seed-example"):
        instances.shipped("allocation/seed-exampel")
    with pytest.raises(FileNotFoundError, match="no shipped instance"):
        ProblemAPI("schedule").shipped("no-such-graph")
    with pytest.raises(FileNotFoundError):  # never a file outside the package
        instances.shipped("../pyproject.toml")
    with pytest.raises(FileNotFoundError):
        instances.shipped("allocation")  # a folder is not a file


def test_shipped_works_from_any_working_directory(tmp_path):
    """What a notebook started in notebooks/ (or any folder) does: no path relative to cwd."""
    code = (
        "from tensorplan import allocation\n"
        "inst = allocation.load(allocation.shipped('seed-example'))\n"
        "print(allocation.solve(inst, 'ffd').objective)\n"
    )
    for cwd in (tmp_path, ROOT / "notebooks"):
        out = subprocess.run(
            [sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, check=True
        )
        assert out.stdout.split() == ["37"]


def _script(name: str) -> ModuleType:
    """A maintainer script of instances/tools/ (not in the installed package), loaded by path."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "instances" / "tools" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_maintainer_scripts_are_not_installed() -> None:
    """instances/tools/ holds scripts that import the harness: they stay out of the package."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = config["tool"]["setuptools"]["packages"]
    assert not [p for p in packages if "tools" in p]
    assert not (ROOT / "instances" / "tools" / "__init__.py").exists()


def test_generate_rewrites_the_shipped_files(tmp_path, monkeypatch):
    """`instances/tools/generate.py` writes exactly the shipped generator files; files from other
    sources (e.g. imported models) are left alone."""
    generate = _script("generate")

    monkeypatch.setattr(generate, "HERE", tmp_path)
    assert generate.main([]) == 0
    written = sorted(tmp_path.rglob("*.json"))
    assert {p.parent.name for p in written} == set(PROBLEMS)
    stale = []
    for p in written:
        shipped = instances.root() / p.relative_to(tmp_path)
        if not shipped.is_file() or shipped.read_bytes() != p.read_bytes():
            stale.append(p.relative_to(tmp_path).as_posix())
    assert not stale, (
        f"shipped files differ from the generators; run instances/tools/generate.py: {stale}"
    )


def test_generate_still_runs_as_a_script(tmp_path):
    """`python instances/tools/generate.py` runs as a script from any folder: run it on a
    problem name that does not exist, so nothing is written."""
    out = subprocess.run(
        [sys.executable, str(ROOT / "instances" / "tools" / "generate.py"), "no-such-problem"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2
    assert "unknown problem 'no-such-problem'; known: allocation" in out.stderr
    assert "Traceback" not in out.stderr

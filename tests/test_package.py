"""One package: only `tensorplan` imports after installation, and the tree stays ruff-clean."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("problems", "models", "heuristics", "harness")


def python(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run `code` in a fresh interpreter of this environment, outside the repository."""
    return subprocess.run(
        [sys.executable, "-I", "-c", code], cwd=cwd, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("name", FOLDERS)
def test_repository_folders_are_not_top_level_packages(name: str, tmp_path: Path) -> None:
    done = python(f"import {name}", tmp_path)
    assert done.returncode != 0 and "ModuleNotFoundError" in done.stderr


def test_everything_imports_under_tensorplan(tmp_path: Path) -> None:
    code = (
        "import tensorplan, tensorplan.harness.cli, tensorplan.problems.core, "
        "tensorplan.models.backends, tensorplan.heuristics.allocation\n"
        "from tensorplan import allocation, fusion, layout, schedule\n"
        "print(allocation.name, tensorplan.harness.cli.__name__)"
    )
    done = python(code, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["allocation", "tensorplan.harness.cli"]


def test_the_command_line_entry_point_is_the_namespaced_cli() -> None:
    script = Path(sys.executable).with_name("tensorplan")
    assert script.exists()
    assert "tensorplan.harness.cli" in script.read_text()


@pytest.mark.parametrize("args", [["check", "."], ["format", "--check", "."]])
def test_ruff_is_clean(args: list[str]) -> None:
    pytest.importorskip("ruff")
    done = subprocess.run(
        [sys.executable, "-m", "ruff", *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]


def test_ci_runs_exactly_the_readme_test_command() -> None:
    readme = (ROOT / "README.md").read_text()
    command = next(line for line in readme.splitlines() if line.endswith("python -m pytest -q"))
    assert command in (ROOT / ".ci" / "run").read_text()

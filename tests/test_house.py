"""The house rules a newcomer relies on, checked on the source: imports go one way, between and
within the layers (problems -> heuristics -> models -> harness), with no circle anywhere; no
function is too long to read (numba kernels, which cannot call closures, get more room)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# The installed package's layers, lowest first: a module may import its own layer and those below.
# `instances` only locates the shipped data files, so anything may use it.
LAYERS = {"instances": 0, "problems": 0, "heuristics": 1, "models": 2, "harness": 3}
MAX_LINES = 150  # a function, outside the compiled kernels
MAX_KERNEL_LINES = 250  # a numba kernel
SCANNED = ("problems", "heuristics", "models", "harness", "instances", "benchmarks")


def _modules() -> dict[str, Path]:
    """tensorplan.<layer>.<module> -> file, for every module of the installed package."""
    found = {}
    for layer in LAYERS:
        for path in (ROOT / layer).glob("*.py"):
            name = f"tensorplan.{layer}" + ("" if path.stem == "__init__" else f".{path.stem}")
            found[name] = path
    return found


def _imports(path: Path, known: dict[str, Path]) -> set[str]:
    """The tensorplan modules `path` imports anywhere: at the top, inside functions, or for the
    type checker only (a circle hidden in a function is still a circle)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return {m for m in out if m in known}


def _graph() -> dict[str, set[str]]:
    known = _modules()
    return {name: _imports(path, known) - {name} for name, path in known.items()}


def _layer(module: str) -> int:
    return LAYERS[module.split(".")[1]]


def test_no_upward_import() -> None:
    """problems never import heuristics, models or the harness; heuristics never import models
    or the harness; models never import the harness."""
    upward = [f"{a} -> {b}" for a, deps in _graph().items() for b in deps if _layer(b) > _layer(a)]
    assert not upward, "imports against the layers:\n" + "\n".join(sorted(upward))


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of `graph`, if there is any (depth-first search, colouring)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(v: str) -> list[str] | None:
        state[v] = 1
        path.append(v)
        for w in sorted(graph[v]):
            if state.get(w) == 1:
                return [*path[path.index(w) :], w]
            if w not in state and (found := visit(w)):
                return found
        state[v] = 2
        path.pop()
        return None

    for v in sorted(graph):
        if v not in state and (found := visit(v)):
            return found
    return None


def test_no_import_circle() -> None:
    """No module reaches itself through imports, not even through a function-level one."""
    cycle = _cycle(_graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle or [])


def test_the_cycle_finder_finds_cycles() -> None:
    """The check above can fail: a three-module circle and a self-contained chain."""
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def _kernels(tree: ast.Module) -> set[str]:
    """Names of the functions compiled by numba: decorated `@njit`/`@jit`, or wrapped as
    `njit(...)(fn)` (the kernels keep a pure-Python twin for the tests)."""

    def is_jit(node: ast.expr) -> bool:
        target = node.func if isinstance(node, ast.Call) else node
        name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
        return name in {"njit", "jit", "vectorize", "guvectorize"}

    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and any(map(is_jit, node.decorator_list)):
            names.add(node.name)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Call) and is_jit(node.func):
            names.update(a.id for a in node.args if isinstance(a, ast.Name))
    return names


def _functions() -> Iterator[tuple[str, int, int]]:
    """(where, lines, limit) of every function in the scanned folders."""
    for folder in SCANNED:
        for path in sorted((ROOT / folder).rglob("*.py")):
            tree = ast.parse(path.read_text())
            kernels = _kernels(tree)
            for node in ast.walk(tree):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    assert node.end_lineno is not None
                    lines = node.end_lineno - node.lineno + 1
                    limit = MAX_KERNEL_LINES if node.name in kernels else MAX_LINES
                    where = f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"
                    yield where, lines, limit


def test_no_function_too_long_to_read() -> None:
    """No function over 150 lines, no numba kernel over 250."""
    long = [f"{w}: {n} lines (limit {lim})" for w, n, lim in _functions() if n > lim]
    assert not long, "split these:\n" + "\n".join(long)


@pytest.mark.parametrize(
    "source, kernels",
    [
        ("from numba import njit\n@njit(cache=True)\ndef f(x):\n    return x\n", {"f"}),
        ("import numba\ndef g_py(x):\n    return x\ng = numba.njit()(g_py)\n", {"g_py"}),
        ("def h(x):\n    return x\n", set()),
    ],
)
def test_kernels_are_recognised(source: str, kernels: set[str]) -> None:
    assert _kernels(ast.parse(source)) == kernels

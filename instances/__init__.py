"""The shipped instance files, found through the package rather than the working directory.

A notebook started in `notebooks/`, a script run from anywhere, or an installed copy all see the
same files::

    from tensorplan import instances
    instances.shipped("allocation/seed-example")    # Path to instances/allocation/seed-example.json
    instances.names("schedule")                      # ['adversary-10-s2', ...]
    instances.shipped("models/resnet50.onnx")        # a shipped ONNX graph (`models()`)

The paths resolve relative to this package: the source tree for the editable install, the
installed package data otherwise. `python instances/tools/generate.py` rewrites the files.
"""

from __future__ import annotations

from difflib import get_close_matches
from pathlib import Path

__all__ = ["models", "names", "root", "shipped"]

_ROOT = Path(__file__).resolve().parent


def root() -> Path:
    """The folder holding one sub-folder of JSON instances per problem."""
    return _ROOT


def names(problem: str | None = None) -> list[str]:
    """Shipped instance names, sorted: `"<problem>/<name>"` for all problems, or the bare names
    of one problem's folder (`names("allocation")` -> `["layered-4-s1", ...]`)."""
    if problem is not None:
        return sorted(p.stem for p in (_ROOT / problem).glob("*.json"))
    return sorted(f"{p.parent.name}/{p.stem}" for p in _ROOT.glob("*/*.json"))


def models() -> list[str]:
    """Names of the shipped ONNX model graphs (`models/<name>.onnx`, weights stripped), sorted;
    `shipped(f"models/{name}.onnx")` is the file, for `tensorplan plan`."""
    return sorted(p.stem for p in (_ROOT / "models").glob("*.onnx"))


def shipped(name: str) -> Path:
    """The path of shipped file `name`: an instance such as `"allocation/seed-example"` (`.json`
    optional) or another shipped file given with its suffix (`"models/resnet50.onnx"`).

    An unknown name raises FileNotFoundError naming the closest shipped ones, so a typo in a
    notebook says what was meant instead of failing later on an unreadable file.
    """
    path = (_ROOT / name).resolve()
    if not path.is_file():
        path = (_ROOT / f"{name.removesuffix('.json')}.json").resolve()
    if _ROOT not in path.parents or not path.is_file():
        known = names()
        close = get_close_matches(name.removesuffix(".json"), known, n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else f"; {len(known)} known"
        raise FileNotFoundError(f"no shipped instance {name!r} under {_ROOT}{hint}")
    return path

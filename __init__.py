"""tensorplan: exact models and fast heuristics for the planning decisions of a tensor compiler.

The repository root is the `tensorplan` package (see `pyproject.toml`, `package-dir`): its
folders `problems/`, `models/`, `heuristics/`, `harness/` and `instances/` install as
`tensorplan.problems`, `tensorplan.models`, ... and nothing else is installed at top level.

The per-problem front doors are attributes, loaded on first use so that importing a
sub-package stays cheap::

    from tensorplan import allocation
    inst = allocation.load(allocation.shipped("seed-example"))
    allocation.solve(inst, "ffd")
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what `__getattr__` gives, for the type checker
    from collections.abc import Callable
    from typing import Any

    from tensorplan.harness.api import ProblemAPI, allocation, fusion, layout, schedule
    from tensorplan.harness.torch_import import import_torch
    from tensorplan.harness.torch_plan import plan_torch

__all__ = ["allocation", "fusion", "import_torch", "layout", "plan_torch", "schedule"]


def __getattr__(name: str) -> ProblemAPI | Callable[..., Any]:
    if name == "import_torch":  # extra `torch`: PyTorch itself is imported on the first call
        from tensorplan.harness.torch_import import import_torch

        return import_torch
    if name == "plan_torch":  # extra `torch`: (planned fx GraphModule, Plan) of a module
        from tensorplan.harness.torch_plan import plan_torch

        return plan_torch
    if name in __all__:
        from tensorplan.harness import api

        return getattr(api, name)
    raise AttributeError(f"module 'tensorplan' has no attribute {name!r}")

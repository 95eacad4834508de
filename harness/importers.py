"""Converters from public benchmark formats to tensorplan instance files."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from tensorplan.problems.core import InstanceError, ident, integer, positive_int


def minimalloc_csv(path: str | Path) -> dict[str, Any]:
    """MiniMalloc's CSV (`id,lower,upper,size`, `upper` exclusive) as an allocation instance.

    A lifetime [lower, upper) becomes start = lower, end = upper - 1 (ours are inclusive).
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise InstanceError("<file>", f"cannot read: {err.strerror or err}", path) from None
    rows = list(csv.DictReader(text.splitlines()))
    if not rows:
        raise InstanceError("<file>", "no rows (expected a header id,lower,upper,size)", path)
    missing = {"id", "lower", "upper", "size"} - set(rows[0])
    if missing:
        raise InstanceError("header", f"missing column(s) {', '.join(sorted(missing))}", path)
    buffers = []
    try:
        for k, r in enumerate(rows, start=2):
            where = f"line {k}"
            lower = integer(_num(r["lower"]), f"{where}.lower")
            upper = integer(_num(r["upper"]), f"{where}.upper")
            if upper <= lower:
                raise InstanceError(f"{where}.upper", f"upper {upper} must exceed lower {lower}")
            buffers.append(
                {
                    "id": ident(r["id"], f"{where}.id"),
                    "size": positive_int(_num(r["size"]), f"{where}.size"),
                    "start": lower,
                    "end": upper - 1,
                }
            )
    except InstanceError as err:
        raise err.in_file(path) from None
    return {
        "problem": "allocation",
        "name": path.stem,
        "buffers": buffers,
        "alignment": 1,
        "capacity": None,
    }


def _num(text: str | None) -> Any:
    text = (text or "").strip()
    try:
        return int(text)
    except ValueError:
        return text

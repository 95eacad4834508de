"""Converters from public benchmark formats to tensorplan instance files."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from tensorplan.problems.core import InstanceError, integer, positive_int, string


def minimalloc_csv(path: str | Path) -> dict[str, Any]:
    """MiniMalloc's CSV (`id,lower,upper,size`, `upper` exclusive) as an allocation instance.

    A lifetime [lower, upper) becomes start = lower, end = upper - 1 (ours are inclusive). The
    header must name exactly those four columns (any order); every row gives one value for each.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")  # a byte-order mark is tolerated
    except OSError as err:
        raise InstanceError("<file>", f"cannot read: {err.strerror or err}", path) from None
    except UnicodeDecodeError as err:
        raise InstanceError(
            "<file>", f"not UTF-8 text (byte {err.start}): expected a CSV file", path
        ) from None
    try:
        return {
            "problem": "allocation",
            "name": path.stem,
            "buffers": _minimalloc_buffers(text),
            "alignment": 1,
            "capacity": None,
        }
    except InstanceError as err:
        raise err.in_file(path) from None
    except csv.Error as err:
        raise InstanceError("<file>", f"not a readable CSV file ({err})", path) from None


COLUMNS = ("id", "lower", "upper", "size")


def _minimalloc_buffers(text: str) -> list[dict[str, Any]]:
    """The buffers of a MiniMalloc CSV's text; errors name the header or the line."""
    reader = csv.reader(text.splitlines())
    header = next(reader, None)
    if header is None:
        raise InstanceError("<file>", "file is empty (expected a header id,lower,upper,size)")
    names = [h.strip() for h in header]
    missing = [c for c in COLUMNS if c not in names]
    if missing:
        raise InstanceError("header", f"missing column(s) {', '.join(missing)}")
    extra = [h for h in names if h not in COLUMNS]
    if extra:
        listed = ", ".join(map(repr, extra))
        raise InstanceError("header", f"unknown column(s) {listed}; expected id,lower,upper,size")
    if len(names) != len(COLUMNS):
        twice = sorted({c for c in names if names.count(c) > 1})
        raise InstanceError("header", f"column(s) {', '.join(twice)} given twice")
    at = [names.index(c) for c in COLUMNS]
    buffers = []
    for row in reader:
        if not row or not any(cell.strip() for cell in row):
            continue  # a blank line
        where = f"line {reader.line_num}"
        if len(row) != len(COLUMNS):
            raise InstanceError(where, f"{len(row)} values for the 4 columns id,lower,upper,size")
        ident_, lower_, upper_, size_ = (row[k] for k in at)
        lower = integer(_num(lower_), f"{where}.lower")
        upper = integer(_num(upper_), f"{where}.upper")
        if upper <= lower:
            raise InstanceError(f"{where}.upper", f"upper {upper} must exceed lower {lower}")
        buffers.append(
            {
                "id": string(ident_.strip(), f"{where}.id"),
                "size": positive_int(_num(size_), f"{where}.size"),
                "start": lower,
                "end": upper - 1,
            }
        )
    if not buffers:
        raise InstanceError("<file>", "a header but no buffers: expected one row per buffer")
    return buffers


def _num(text: str | None) -> Any:
    text = (text or "").strip()
    try:
        return int(text)
    except ValueError:
        return text

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
    return _csv_instance(path, omnimalloc=False)


def omnimalloc_csv(path: str | Path) -> dict[str, Any]:
    """OmniMalloc's CSV (`omnimalloc.io.save_allocation`) as an allocation instance: MiniMalloc's
    columns, optionally `offset` and `kind` (ignored: offsets are what we solve for) and a first
    line `# pool_offset=N` (ignored: a base address moves nothing). `lower` and `upper` may be
    vector clocks `a:b:c` (one counter per stream, half-open [lower, upper)): then each buffer
    keeps them as its `start` and `end` lists, and two buffers conflict unless the clocks order
    them (`allocation_conflicts.from_clocks`)."""
    return _csv_instance(path, omnimalloc=True)


def _csv_instance(path: str | Path, *, omnimalloc: bool) -> dict[str, Any]:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")  # a byte-order mark is tolerated
    except OSError as err:
        raise InstanceError("<file>", f"cannot read: {err.strerror or err}", path) from None
    except UnicodeDecodeError as err:
        raise InstanceError(
            "<file>", f"not UTF-8 text (byte {err.start}): expected a CSV file", path
        ) from None
    if omnimalloc and text.startswith("# pool_offset="):
        text = text.partition("\n")[2]
    try:
        return {
            "problem": "allocation",
            "name": path.stem,
            "buffers": _buffers(text, OMNI_COLUMNS if omnimalloc else COLUMNS, omnimalloc),
            "alignment": 1,
            "capacity": None,
        }
    except InstanceError as err:
        raise err.in_file(path) from None
    except csv.Error as err:
        raise InstanceError("<file>", f"not a readable CSV file ({err})", path) from None


COLUMNS = ("id", "lower", "upper", "size")
OMNI_COLUMNS = (*COLUMNS, "offset", "kind")  # the last two optional


def _header(names: list[str], allowed: tuple[str, ...]) -> list[int | None]:
    """Where each of `allowed` sits in the header (None: an optional column left out)."""
    missing = [c for c in COLUMNS if c not in names]
    if missing:
        raise InstanceError("header", f"missing column(s) {', '.join(missing)}")
    extra = [h for h in names if h not in allowed]
    if extra:
        listed = ", ".join(map(repr, extra))
        raise InstanceError("header", f"unknown column(s) {listed}; expected {','.join(allowed)}")
    twice = sorted({c for c in names if names.count(c) > 1})
    if twice:
        raise InstanceError("header", f"column(s) {', '.join(twice)} given twice")
    return [names.index(c) if c in names else None for c in allowed]


def _buffers(text: str, allowed: tuple[str, ...], clocks: bool) -> list[dict[str, Any]]:
    """The buffers of a CSV's text (with vector clocks as `start` and `end` when its times are
    clocks); errors name the header or the line."""
    reader = csv.reader(text.splitlines())
    header = next(reader, None)
    if header is None:
        raise InstanceError("<file>", "file is empty (expected a header id,lower,upper,size)")
    names = [h.strip() for h in header]
    at = _header(names, allowed)[:4]
    buffers: list[dict[str, Any]] = []
    lowers: list[list[int]] = []
    uppers: list[list[int]] = []
    for row in reader:
        if not row or not any(cell.strip() for cell in row):
            continue  # a blank line
        where = f"line {reader.line_num}"
        if len(row) != len(names):
            raise InstanceError(where, f"{len(row)} values for the {len(names)} columns")
        ident_, lower_, upper_, size_ = (row[k] for k in at if k is not None)
        lower = _time(lower_, f"{where}.lower", clocks)
        upper = _time(upper_, f"{where}.upper", clocks)
        if len(lower) != len(upper) or (lowers and len(lower) != len(lowers[0])):
            raise InstanceError(where, "every lower and upper must have the same clock length")
        if len(lower) == 1 and upper[0] <= lower[0]:
            raise InstanceError(f"{where}.upper", f"upper {upper[0]} must exceed lower {lower[0]}")
        if any(u < lo for lo, u in zip(lower, upper, strict=True)):
            raise InstanceError(f"{where}.upper", "the clock goes back: upper < lower somewhere")
        buffers.append(
            {
                "id": string(ident_.strip(), f"{where}.id"),
                "size": positive_int(_num(size_), f"{where}.size"),
                "start": lower[0],
                "end": upper[0] - 1,
            }
        )
        lowers.append(lower)
        uppers.append(upper)
    if not buffers:
        raise InstanceError("<file>", "a header but no buffers: expected one row per buffer")
    if len(lowers[0]) > 1:
        for b, lower, upper in zip(buffers, lowers, uppers, strict=True):
            b["start"], b["end"] = lower, upper
    return buffers


def _time(text: str, where: str, clocks: bool) -> list[int]:
    """A time: an integer, or (OmniMalloc) a vector clock `a:b:c`."""
    parts = text.strip().split(":") if clocks else [text]
    return [integer(_num(p), where) for p in parts]


def _num(text: str | None) -> Any:
    text = (text or "").strip()
    try:
        return int(text)
    except ValueError:
        return text

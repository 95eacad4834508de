"""What the command line prints: plain-text tables that fit the terminal (80 columns when it
cannot be asked), numbers never cut, long names abbreviated, wide tables split into blocks of
columns that each repeat the row labels, and characters counted by the cells they take (CJK
characters take two)."""

from __future__ import annotations

import shutil
import textwrap
import unicodedata
from collections.abc import Iterable, Sequence
from typing import Any

from tensorplan.harness import registry
from tensorplan.problems.core import OPTIONS

GAP = "  "  # between two columns
NBSP = "\u00a0"
HEADERS = {"best_bound": "best bound"}  # the columns of `report.problem_tables`, as shown


def terminal_width() -> int:
    """The terminal's width, or `$COLUMNS`, or 80 (a pipe, a file, a test)."""
    return max(40, shutil.get_terminal_size((80, 24)).columns)


def cells(text: str) -> int:
    """How many terminal cells `text` takes: wide (CJK) characters two, combining marks none."""
    n = 0
    for ch in text:
        if unicodedata.combining(ch):
            continue
        n += 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1
    return n


def abbreviate(text: str, width: int) -> str:
    """`text` within `width` cells, its middle replaced by `…` when it is longer."""
    if cells(text) <= width:
        return text
    if width <= 1:
        return "…"[:width]
    head, tail = "", ""
    room = width - 1
    left, right = 0, len(text) - 1
    take_head = True
    while room > 0 and left <= right:
        ch = text[left] if take_head else text[right]
        w = cells(ch)
        if w > room:
            break
        if take_head:
            head, left = head + ch, left + 1
        else:
            tail, right = ch + tail, right - 1
        room -= w
        take_head = not take_head
    return f"{head}…{tail}"


def _pad(text: str, width: int, right: bool) -> str:
    fill = " " * max(0, width - cells(text))
    return fill + text if right else text + fill


def _header_lines(name: str, width: int) -> list[str]:
    """A column name on as few lines as fit `width`, broken after a space or `-` (never inside
    a word); a word longer than `width` widens the column instead."""
    words: list[str] = []
    word = ""
    for ch in name:
        word += ch
        if ch in " -":
            words.append(word)
            word = ""
    if word:
        words.append(word)
    lines = [""]
    for w in words:
        if lines[-1] and cells(lines[-1] + w.rstrip()) > width:
            lines[-1] = lines[-1].rstrip()
            lines.append(w)
        else:
            lines[-1] += w
    return [line.rstrip() for line in lines]


def table_blocks(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    keys: int = 1,
    width: int | None = None,
    name_width: int | None = None,
) -> list[str]:
    """Lines of a table whose first `keys` columns label the rows and are repeated in every
    block. The first column is left-aligned and abbreviated to `name_width` cells (default: a
    third of `width`); every other is right-aligned and never cut.

    When the columns do not fit `width`, the value columns are split into blocks, each printed
    under the same row labels, so every line fits (unless a single value column alone does not).
    """
    width = terminal_width() if width is None else width
    rows = [list(r) for r in rows]
    first = [r[0] for r in rows]
    longest = max([cells(headers[0]), *map(cells, first)])
    limit = name_width if name_width is not None else max(16, width // 3)
    name_w = min(longest, max(limit, cells(headers[0])))
    rows = [[abbreviate(r[0], name_w), *r[1:]] for r in rows]

    def col_width(k: int) -> int:
        values = max((cells(r[k]) for r in rows), default=1)
        head = max(map(cells, _header_lines(headers[k], max(values, 6))))
        return max(values, head)

    widths = [name_w, *(col_width(k) for k in range(1, len(headers)))]
    fixed = list(range(keys))
    base = sum(widths[k] for k in fixed) + len(GAP) * (len(fixed) - 1)
    blocks: list[list[int]] = []
    for k in range(keys, len(headers)):
        if blocks and base + sum(len(GAP) + widths[j] for j in [*blocks[-1], k]) <= width:
            blocks[-1].append(k)
        else:
            blocks.append([k])
    out: list[str] = []
    for b, block in enumerate(blocks or [[]]):
        cols = fixed + block
        heads = [_header_lines(headers[k], widths[k]) for k in cols]
        height = max(map(len, heads))
        if b:
            out.append("")
        for line in range(height):
            parts = []
            for k, h in zip(cols, heads, strict=True):
                text = h[line - (height - len(h))] if line >= height - len(h) else ""
                parts.append(_pad(text, widths[k], right=k > 0))
            out.append(GAP.join(parts).rstrip())
        out.append(GAP.join("-" * widths[k] for k in cols))
        for r in rows:
            out.append(GAP.join(_pad(r[k], widths[k], right=k > 0) for k in cols).rstrip())
    return out


def solvers_lines(width: int | None = None) -> list[str]:
    """`tensorplan solvers`: per problem, each solver's name, kind, summary, the options it
    honours and the instance features it takes (`supports`), wrapped to fit `width`."""
    width = terminal_width() if width is None else width
    out: list[str] = []
    everyone = [s for p in registry.PROBLEMS for s in registry.solvers(p).values()]
    name_w = max(len("solver"), *(cells(s.name) for s in everyone))
    kind_w = max(len("kind"), *(cells(s.kind) for s in everyone))
    indent = 2 + name_w + len(GAP) + kind_w + len(GAP)
    room = max(20, width - indent)
    for p in registry.PROBLEMS:
        if out:
            out.append("")
        out.append(f"{p} ({registry.problem(p).sense}imise):")
        out.append(f"  {_pad('solver', name_w, False)}{GAP}{_pad('kind', kind_w, False)}{GAP}"
                   "summary [options it honours]")  # fmt: skip
        for s in registry.solvers(p).values():
            honours = [o for o in OPTIONS if o in s.honours]
            said = ", ".join(honours) if honours else "no options"
            said += "".join(f"; takes {f}" for f in sorted(s.supports))
            text = f"{s.summary} [{said.replace(' ', NBSP)}]"  # the options stay on one line
            wrapped = [
                w.replace(NBSP, " ") for w in textwrap.wrap(text, room, break_on_hyphens=False)
            ] or [""]
            head = f"  {_pad(s.name, name_w, False)}{GAP}{_pad(s.kind, kind_w, False)}{GAP}"
            out.append(head + wrapped[0])
            out.extend(" " * indent + w for w in wrapped[1:])
    return out


def results_lines(frame: Any, width: int | None = None) -> list[str]:
    """The per-problem result tables of a comparison (instance rows, solver columns; cells as
    in report.md), fitted to `width`."""
    from tensorplan.harness.report import fmt_num, problem_tables

    out: list[str] = []
    for p in [p for p in registry.PROBLEMS if p in set(frame["problem"])]:
        res = problem_tables(frame, p)["results"]
        sense = registry.problem(p).sense
        if out:
            out.append("")
        out.append(f"{p} ({sense}imise): objective, * proven optimal, (+gap) over the best bound")
        headers = [HEADERS.get(str(c), str(c)) for c in res.columns]
        rows = [[v if isinstance(v, str) else fmt_num(v) for v in r] for r in res.values.tolist()]
        out.extend(table_blocks(headers, rows, keys=3, width=width))
    return out


def show(lines: Iterable[str]) -> None:
    for line in lines:
        print(line)

"""The tables of a batch, rebuilt from its rows: one line per instance x solver with the gap to
the best proven bound (`table`, written as results.csv), and one per problem x solver
(`summarize`, in the report)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from tensorplan.harness import registry
from tensorplan.harness.rows import Row, current, options_text
from tensorplan.problems.core import Number, relative_gap, stronger_bound, write_text_atomic

COLUMNS = [
    "instance",
    "problem",
    "solver",
    "kind",
    "status",
    "objective",
    "bound",
    "best_bound",
    "gap",
    "runtime_s",
    "wall_s",
    "size",
    "message",
    "file",
    "key",
    "capacity",
    "options",
]
SUMMARY = ["problem", "solver", "kind", "instances", "optimal", "mean_gap", "worst_gap", "median_s"]


def table(rows: Sequence[Row]) -> pd.DataFrame:
    """One row per question x solver with the gap to the best proven bound of that question.

    The rows shown are `rows.current`: each file's latest question (so an edited file shows
    its current version only, a renamed copy once) and each solver's latest answer to it. The
    best bound is the tightest of every shown row's proven bound (each already tightened by the
    problem's own bound); gap = relative excess over it (0 = proven optimal). `options` shows
    the asked options that can change the answer (`tasks.asked`).
    """
    latest = current(rows)
    frame = pd.DataFrame(
        [
            {k: v for k, v in r.to_json().items() if k not in ("stats", "source")}
            | {"options": options_text(r.options)}
            for r in latest
        ],
        columns=[c for c in COLUMNS if c not in ("best_bound", "gap")],
    )
    frame["capacity"] = frame["capacity"].astype("Int64")
    stats = pd.DataFrame([dict(r.stats) for r in latest], index=frame.index)
    best: dict[str, Number | None] = {}
    for r in latest:
        if r.bound is not None and r.problem in registry.PROBLEMS:
            best[r.key] = stronger_bound(
                registry.problem(r.problem).sense, best.get(r.key), r.bound
            )
    frame["best_bound"] = frame["key"].map(best)
    frame["gap"] = [
        relative_gap(o, None if pd.isna(b) else b, registry.problem(p).sense)
        if p in registry.PROBLEMS and o is not None and not pd.isna(o)
        else None
        for o, b, p in zip(frame["objective"], frame["best_bound"], frame["problem"], strict=True)
    ]
    frame = frame[COLUMNS]
    if not stats.empty:
        frame = pd.concat([frame, stats.add_prefix("stat_")], axis=1)
    return frame.sort_values(
        ["problem", "instance", "kind", "solver", "file"], kind="stable", ignore_index=True
    )


def labels(frame: pd.DataFrame) -> pd.Series:
    """The name each question goes by in a report: its instance's, with the capacity asked when
    one replaced the file's, and with its key's hash when two questions would still share one
    (two files of one name, say), so that no two questions are merged into one line."""
    if frame.empty:
        return pd.Series([], dtype=object, index=frame.index)
    base = [
        name if pd.isna(cap) else f"{name} (capacity {int(cap)})"
        for name, cap in zip(frame["instance"].astype(str), frame["capacity"], strict=True)
    ]
    keys: dict[str, set[str]] = {}
    for b, k in zip(base, frame["key"], strict=True):
        keys.setdefault(b, set()).add(str(k))
    return pd.Series(
        [
            b if len(keys[b]) == 1 else f"{b} [{str(k).rpartition('@')[2][:8]}]"
            for b, k in zip(base, frame["key"], strict=True)
        ],
        index=frame.index,
        dtype=object,
    )


def write_csv(frame: pd.DataFrame, path: Path) -> None:
    write_text_atomic(path, frame.to_csv(index=False))


def summarize(frame: pd.DataFrame) -> pd.DataFrame:
    """Per problem x solver: instances, optimal count, mean / worst gap, median runtime."""
    if frame.empty:
        return pd.DataFrame(columns=SUMMARY)
    ok = frame[frame["status"].isin(["optimal", "feasible"])]
    out = []
    for (p, s), g in frame.groupby(["problem", "solver"], sort=True):
        good = ok[(ok["problem"] == p) & (ok["solver"] == s)]
        gaps = pd.to_numeric(good["gap"], errors="coerce").dropna()
        out.append(
            {
                "problem": p,
                "solver": s,
                "kind": g["kind"].iloc[0],
                "instances": len(g),
                "solved": len(good),
                "optimal": int((g["status"] == "optimal").sum()),
                "mean_gap": float(gaps.mean()) if len(gaps) else math.nan,
                "worst_gap": float(gaps.max()) if len(gaps) else math.nan,
                "median_s": float(pd.to_numeric(g["runtime_s"]).median()),
            }
        )
    return pd.DataFrame(out)

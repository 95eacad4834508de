"""Reports from a batch directory: `report.md` and a self-contained `report.html` (PNGs inlined).

Per problem: a table of instances x solvers (objective, status, gap to the best bound, runtime),
a summary line per solver, plots of gap and runtime against instance size, and the problem's own
picture of one instance. Everything is rebuilt from `rows.jsonl`; nothing here solves.
"""

from __future__ import annotations

import base64
import html
import io
import logging
import math
from datetime import UTC, datetime
from importlib import import_module
from pathlib import Path
from typing import Any

import pandas as pd

from tensorplan.harness import registry
from tensorplan.harness.rows import ROWS, current, line_ranges, read_rows, scan, solution_path
from tensorplan.harness.run import (
    METRIC,
    load_instance,
    load_solution,
    with_capacity,
    write_text_atomic,
)
from tensorplan.harness.tables import labels, summarize, table, write_csv
from tensorplan.problems.core import InstanceError, refused, write_bytes_atomic

log = logging.getLogger("tensorplan")


def fmt_num(x: Any) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if isinstance(x, float) and x.is_integer() and abs(x) < 1e15:
        return str(int(x))
    return f"{x:.6g}" if isinstance(x, float) else str(x)


def fmt_gap(g: Any) -> str:
    if g is None or (isinstance(g, float) and math.isnan(g)):
        return "–"
    return "0" if g == 0 else ("∞" if math.isinf(g) else f"{g:.2%}")


def cell(row: pd.Series) -> str:
    """'37*' optimal, '41 (+10.81%)' with gap, 'n/a' for a solver that does not take the
    instance (`refused`), or the status when there is no objective."""
    if row["objective"] is None or pd.isna(row["objective"]):
        return "n/a" if refused(row["status"], row.get("message")) else row["status"]
    mark = "*" if row["status"] == "optimal" else ""
    gap = row["gap"]
    extra = "" if gap is None or pd.isna(gap) or gap == 0 else f" (+{fmt_gap(gap)})"
    return f"{fmt_num(row['objective'])}{mark}{extra}"


def problem_tables(frame: pd.DataFrame, problem: str) -> dict[str, pd.DataFrame]:
    """Wide tables (instance rows, solver columns) of results and runtimes for one problem."""
    part = frame[frame["problem"] == problem].copy()
    order = list(
        dict.fromkeys(part.sort_values(["kind", "solver"], ascending=[False, True])["solver"])
    )
    part["cell"] = part.apply(cell, axis=1)
    part["instance"] = labels(part)  # one line per question, never two merged under one name
    first = part.groupby("instance", sort=True)[["size", "best_bound"]].first()
    res = part.pivot_table(index="instance", columns="solver", values="cell", aggfunc="first")
    res = first.join(res)[[c for c in ["size", "best_bound", *order] if c in first.join(res)]]
    res["best_bound"] = res["best_bound"].map(fmt_num)
    times = part.pivot_table(
        index="instance", columns="solver", values="runtime_s", aggfunc="first"
    )
    times = times[[c for c in order if c in times]].map(lambda t: f"{t:.3f}")
    return {"results": res.reset_index(), "runtime_s": times.reset_index()}


def md_text(text: str) -> str:
    """`text` as Markdown shows it literally, in a table cell too: `\\` and `|` escaped, `<`, `>`
    and `&` as entities (a name is never read as HTML), line breaks as spaces."""
    escaped = text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")
    return html.escape(escaped, quote=False)


def markdown_table(df: pd.DataFrame) -> str:
    cols = [md_text(str(c)) for c in df.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for _, r in df.iterrows():
        lines.append(
            "| "
            + " | ".join(fmt_num(v) if not isinstance(v, str) else md_text(v) for v in r.tolist())
            + " |"
        )
    return "\n".join(lines)


def metrics_table(frame: pd.DataFrame, problem: str) -> pd.DataFrame | None:
    """Instance x solver rows of the problem's own measured figures, when it defines any."""
    part = frame[(frame["problem"] == problem) & frame["objective"].notna()]
    cols = [c for c in part.columns if c.startswith(f"stat_{METRIC}") and part[c].notna().any()]
    if part.empty or not cols:
        return None
    part = part.assign(instance=labels(part))
    out = part[["instance", "solver", "objective", *cols]].rename(
        columns={c: c.removeprefix(f"stat_{METRIC}") for c in cols}
    )
    return out.sort_values(["instance", "solver"], ignore_index=True)


def summary_frame(frame: pd.DataFrame, problem: str) -> pd.DataFrame:
    s = summarize(frame[frame["problem"] == problem])
    if s.empty:
        return s
    s = s.drop(columns=["problem"])
    for c in ("mean_gap", "worst_gap"):
        s[c] = s[c].map(fmt_gap)
    s["median_s"] = s["median_s"].map(lambda t: f"{t:.3f}")
    return s


# --- plots ------------------------------------------------------------------------------------


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    return buf.getvalue()


def plot_gap_and_runtime(frame: pd.DataFrame, problem: str) -> bytes | None:
    """Two panels: heuristic gap vs size, runtime vs size per solver (log axes)."""
    from tensorplan.harness.figures import subplots

    part = frame[(frame["problem"] == problem) & frame["objective"].notna()]
    if part.empty:
        return None
    fig, (ax1, ax2) = subplots(1, 2, figsize=(10, 3.6))
    for solver, g in part.groupby("solver"):
        g = g.sort_values("size")
        if (g["kind"] == "heuristic").all():
            gaps = pd.to_numeric(g["gap"], errors="coerce")
            ax1.plot(g["size"], 100 * gaps, marker="o", ls="none", alpha=0.7, label=solver)
        ax2.plot(
            g["size"],
            g["runtime_s"].clip(lower=1e-5),
            marker="o",
            ls="none",
            alpha=0.7,
            label=solver,
        )
    ax1.set(
        xscale="log",
        xlabel="instance size",
        ylabel="gap to best bound (%)",
        title=f"{problem}: heuristic gap",
    )
    ax2.set(
        xscale="log",
        yscale="log",
        xlabel="instance size",
        ylabel="runtime (s)",
        title=f"{problem}: runtime",
    )
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    return _png(fig)


def plot_picture(outdir: Path, frame: pd.DataFrame, problem: str) -> tuple[bytes, str] | None:
    """The problem's own picture of the most telling instance with saved solutions.

    A picture module may name the solvers it is best read with (`PREFERRED`, e.g. a start order
    and `shift`); otherwise heuristics come first, then exact solvers. The instance drawn is the
    one where the first of those solvers is furthest from the best bound (then the largest).
    """
    try:
        module = import_module(f"tensorplan.harness.picture_{problem}")
    except ModuleNotFoundError:
        return None
    picture, preferred = module.picture, tuple(getattr(module, "PREFERRED", ()))
    part = frame[(frame["problem"] == problem) & frame["objective"].notna()]
    lead = preferred[0] if preferred else None
    gaps = pd.to_numeric(part["gap"], errors="coerce").replace(math.inf, 0.0).fillna(0.0)
    lead_gap = gaps.where(part["solver"] == lead, 0.0).groupby(part["instance"]).transform("max")
    part = part.assign(lead_gap=lead_gap)
    order = part.sort_values(["lead_gap", "size"], ascending=False)
    shown = {(r.key, r.solver): r for r in current(read_rows(outdir))}
    for key, g in order.groupby("key", sort=False):
        instance = g["instance"].iloc[0]
        try:
            inst = load_instance(g["file"].iloc[0])
            capacity = g["capacity"].iloc[0]
            if not pd.isna(capacity):
                inst = with_capacity(inst, int(capacity))
        except InstanceError:
            continue
        sols = {}
        ranked = g.sort_values(["kind", "solver"], ascending=[False, True])["solver"].tolist()
        if preferred:
            ranked = [s for s in preferred if s in ranked]
        for solver in ranked:
            row = shown.get((str(key), solver))
            if row is None:
                continue
            path = solution_path(outdir, row)
            if path.exists():
                try:
                    sols[solver] = load_solution(path, inst)[1]
                except InstanceError:
                    continue
        if sols:
            return _png(picture(inst, sols)), str(instance)
    return None


# --- writing ----------------------------------------------------------------------------------


def write_report(outdir: str | Path, *, pictures: bool = True) -> tuple[Path, Path]:
    """(Re)build results.csv, report.md and report.html in `outdir` from its rows.

    Lines of rows.jsonl that are not rows are named in a warning and left out; a file with
    lines but not one row in them is refused (InstanceError): no report of nothing."""
    out = Path(outdir)
    rows, bad, _ = scan(out / ROWS)
    if bad:
        what = f"line(s) {line_ranges(bad)} of {len(bad) + len(rows)} are not rows of a batch"
        if not rows:
            raise InstanceError("<file>", f"{what}: no row to report", out / ROWS)
        log.warning("%s: %s; left out of the report", out / ROWS, what)
    frame = table(rows)
    write_csv(frame, out / "results.csv")
    problems = [p for p in registry.PROBLEMS if p in set(frame["problem"])]
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    md = [
        f"# tensorplan comparison\n\n{len(frame)} results, generated {stamp}. Cells: objective, "
        "`*` = proven optimal, (+gap) = relative excess over the best proven bound of that "
        "instance (the tightest bound any solver or the problem's own bound proved).\n"
    ]
    body = [
        f"<h1>tensorplan comparison</h1><p>{len(frame)} results, generated {stamp}. Cells: "
        "objective, * = proven optimal, (+gap) = excess over the best proven bound.</p>"
    ]
    plots = out / "plots"

    def add(title: str, tab: pd.DataFrame) -> None:
        """One titled table, in both documents."""
        md.extend([f"\n\n{title}:\n", markdown_table(tab)])
        body.extend([f"<h3>{html.escape(title)}</h3>", _html_table(tab)])

    for p in problems:
        heading = f"{p} ({'minimise' if registry.problem(p).sense == 'min' else 'maximise'})"
        tabs = problem_tables(frame, p)
        md += [f"\n## {heading}\n", markdown_table(tabs["results"])]
        body += [f"<h2>{html.escape(heading)}</h2>", _html_table(tabs["results"])]
        add("Runtime (s)", tabs["runtime_s"])
        add("Per solver", summary_frame(frame, p))
        if (metrics := metrics_table(frame, p)) is not None:
            add("Measured on each solution", metrics)
        images: list[tuple[str, bytes]] = []
        if pictures:
            if (png := plot_gap_and_runtime(frame, p)) is not None:
                images.append((f"{p}: gap and runtime against size", png))
            if (pic := plot_picture(out, frame, p)) is not None:
                images.append((f"{p}: {pic[1]}", pic[0]))
        for k, (caption, png) in enumerate(images):
            name = f"{p}_{k}.png"
            write_bytes_atomic(plots / name, png)
            md.append(f"\n![{md_text(caption)}](plots/{name})\n")
            b64 = base64.b64encode(png).decode()
            body.append(
                f'<figure><img src="data:image/png;base64,{b64}" alt="{html.escape(caption)}">'
                f"<figcaption>{html.escape(caption)}</figcaption></figure>"
            )
    failed = frame[frame["status"].isin(["error", "unknown"])]
    if not failed.empty:
        cols = ["instance", "problem", "solver", "status", "message"]
        md += ["\n## Failures and unsolved\n", markdown_table(failed[cols]), "\n"]
        body += ["<h2>Failures and unsolved</h2>", _html_table(failed[cols])]
    md_path, html_path = out / "report.md", out / "report.html"
    write_text_atomic(md_path, "\n".join(md).rstrip() + "\n")
    write_text_atomic(html_path, _html_page("\n".join(body)))
    return md_path, html_path


def _html_table(df: pd.DataFrame) -> str:
    return df.to_html(index=False, escape=True, na_rep="–", border=0, classes="t")


def _html_page(body: str) -> str:
    style = (
        "body{font-family:sans-serif;margin:2em;max-width:1200px}"
        "table.t{border-collapse:collapse;font-size:13px;margin:.5em 0}"
        "table.t td,table.t th{border:1px solid #ccc;padding:2px 6px;text-align:right}"
        "figure{margin:1em 0}img{max-width:100%}"
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>tensorplan report</title>"
        f"<style>{style}</style></head><body>{body}</body></html>\n"
    )

"""Figures, their aggregation over repeated runs, targets, and the printed table.

A child run returns *figures*: a measured value, the baseline it is compared with (measured
in the same run), and optionally a target on the value or on the ratio value / baseline.
The parent aggregates the runs of one scenario figure by figure: the median and the spread
(min-max) of the value, the baseline and the per-run ratio; the target is judged on the
median. Per-run ratios (not a ratio of medians) are used because a value and its baseline
were measured side by side, under the same conditions, in one run.

Pure functions of plain data: no timing, no I/O beyond ``print`` in :func:`render_table`.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

__all__ = ["Target", "aggregate", "figure", "format_number", "judge", "render_table"]

#: Comparison operators a target may use.
_OPS = {">=": lambda a, b: a >= b, "<=": lambda a, b: a <= b, "==": lambda a, b: a == b}
_SHOWN = {">=": "≥", "<=": "≤", "==": "="}


def Target(op: str, value: float, on: str = "value") -> dict[str, Any]:  # noqa: N802 - a record
    """A target: ``value`` (or ``ratio``, with ``on="ratio"``) ``op`` ``value``."""
    if op not in _OPS or on not in ("value", "ratio"):
        raise ValueError(f"bad target {op!r} on {on!r}")
    return {"op": op, "value": float(value), "on": on}


def figure(
    key: str,
    label: str,
    value: float,
    unit: str,
    *,
    baseline: float | None = None,
    baseline_label: str | None = None,
    target: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One figure of one run (JSON-ready); ``ratio`` is ``value / baseline``."""
    ratio = None
    if baseline is not None and baseline != 0:
        ratio = float(value) / float(baseline)
    return {
        "key": key,
        "label": label,
        "value": float(value),
        "unit": unit,
        "baseline": None if baseline is None else float(baseline),
        "baseline_label": baseline_label,
        "ratio": ratio,
        "target": target,
    }


def _spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def judge(target: dict[str, Any] | None, value: float | None, ratio: float | None) -> str:
    """``PASS``, ``MISS``, or ``info`` (no target)."""
    if target is None:
        return "info"
    subject = ratio if target["on"] == "ratio" else value
    if subject is None or (isinstance(subject, float) and math.isnan(subject)):
        return "MISS"
    return "PASS" if _OPS[target["op"]](subject, target["value"]) else "MISS"


def aggregate(runs: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Merge the figure lists of several runs of one scenario (figures matched by key)."""
    order: list[str] = []
    by_key: dict[str, list[dict[str, Any]]] = {}
    for run in runs:
        for fig in run:
            if fig["key"] not in by_key:
                order.append(fig["key"])
                by_key[fig["key"]] = []
            by_key[fig["key"]].append(fig)
    out = []
    for key in order:
        figs = by_key[key]
        last = figs[-1]
        value = _spread([f["value"] for f in figs])
        baselines = [f["baseline"] for f in figs if f["baseline"] is not None]
        ratios = [f["ratio"] for f in figs if f["ratio"] is not None]
        baseline = _spread(baselines) if baselines else None
        ratio = _spread(ratios) if ratios else None
        out.append(
            {
                "key": key,
                "label": last["label"],
                "unit": last["unit"],
                "runs": len(figs),
                "value": value["median"],
                "value_spread": [value["min"], value["max"]],
                "baseline": None if baseline is None else baseline["median"],
                "baseline_label": last["baseline_label"],
                "ratio": None if ratio is None else ratio["median"],
                "ratio_spread": None if ratio is None else [ratio["min"], ratio["max"]],
                "target": last["target"],
                "status": judge(
                    last["target"], value["median"], None if ratio is None else ratio["median"]
                ),
            }
        )
    return out


def format_number(x: float | None) -> str:
    """A compact human number: 3 significant digits, thousands separators."""
    if x is None:
        return "-"
    if x == 0:
        return "0"
    a = abs(x)
    if a >= 1000:
        return f"{x:,.0f}"
    if a >= 100:
        return f"{x:.0f}"
    if a >= 10:
        return f"{x:.1f}"
    if a >= 1:
        return f"{x:.2f}"
    return f"{x:.3g}"


def _with_spread(median: float, spread: list[float] | None, runs: int) -> str:
    text = format_number(median)
    if spread is not None and runs > 1:
        text += f" [{format_number(spread[0])}–{format_number(spread[1])}]"
    return text


def _target_text(target: dict[str, Any] | None, unit: str) -> str:
    if target is None:
        return "-"
    shown = _SHOWN[target["op"]]
    if target["on"] == "ratio":
        return f"ratio {shown} {format_number(target['value'])}"
    return f"{shown} {format_number(target['value'])} {unit}"


def table_rows(figures: list[dict[str, Any]]) -> list[list[str]]:
    """The rows of a scenario table (header first)."""
    rows = [["figure", "value [min–max]", "unit", "baseline", "ratio [min–max]", "target",
             "status"]]
    for f in figures:
        baseline = "-"
        if f["baseline"] is not None:
            baseline = f"{format_number(f['baseline'])} ({f['baseline_label']})"
        ratio = "-"
        if f["ratio"] is not None:
            ratio = _with_spread(f["ratio"], f["ratio_spread"], f["runs"])
        rows.append(
            [
                f["label"],
                _with_spread(f["value"], f["value_spread"], f["runs"]),
                f["unit"],
                baseline,
                ratio,
                _target_text(f["target"], f["unit"]),
                f["status"],
            ]
        )
    return rows


def render_table(title: str, figures: list[dict[str, Any]], *, markdown: bool = False) -> str:
    """The scenario's table as text (aligned columns, or a Markdown table)."""
    rows = table_rows(figures)
    if markdown:  # Markdown drops leading spaces: mark a sub-figure with an arrow instead
        rows = [[f"↳ {r[0].strip()}" if r[0].startswith("  ") else r[0], *r[1:]] for r in rows]
        lines = [f"| {' | '.join(rows[0])} |", "|" + "---|" * len(rows[0])]
        lines += [f"| {' | '.join(r)} |" for r in rows[1:]]
        return "\n".join(lines)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [title, "=" * len(title)]
    for n, r in enumerate(rows):
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)

"""Each committed table drawn as ours against the paper's numbers: one PNG per table.

A table's CSV (as ``make results`` writes it) has its metrics in column pairs ``<metric> (ours)`` /
``<metric> (paper)``, each cell ``mean ± std``, a bare mean (one run, or a paper without a spread),
``mean ± std (n=k)`` (k of the row's runs have the metric) or empty. Every row with both numbers is
a point at x = paper, y = ours with both stds as error bars, beside the diagonal y = x; one subplot
per metric, colour = model, marker = setting (the columns that tell the rows apart). A metric
without a paper column or without any paper number is skipped, and said so; a cell that is none of
the forms above is an error naming the file, line and column. The same points are also listed as
text, cell by cell (``agreement.md``), so that a reader can quote which cells agree without reading
numbers off a plot.
"""

from __future__ import annotations

import csv
import math
import os
import re
import secrets
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.lines import Line2D

from recurrent_attention.runs.atomic import atomic_write_text

OURS, PAPER = " (ours)", " (paper)"
_NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
_CELL = re.compile(rf"(?P<mean>{_NUMBER})(?:\s*±\s*(?P<std>{_NUMBER}))?(?:\s*\(n=\d+\))?")
# a metric is drawn on log axes when its values are all positive and span at least this factor
LOG_RANGE = 10.0
MARKERS = "os^Dv<>PXph*"


class CellError(ValueError):
    """A table cell that is neither empty, a number nor ``mean ± std``."""


@dataclass(frozen=True)
class Cell:
    mean: float
    std: float = 0.0


def parse_cell(text: str) -> Cell | None:
    """``"14.35 ± 0.83"``, ``"305.90"``, ``"1.2 ± 0.1 (n=2)"`` -> Cell; ``""`` -> None; else CellError."""
    if not text.strip():
        return None
    match = _CELL.fullmatch(text.strip())
    if match is None:
        raise CellError(f"{text!r} is not a number, 'mean ± std' or empty")
    std = match["std"]
    return Cell(float(match["mean"]), float(std) if std is not None else 0.0)


def metric_pairs(columns: list[str]) -> list[tuple[str, bool]]:
    """Each metric with an ``(ours)`` column, in column order, and whether it has a ``(paper)`` one."""
    metrics = [c.removesuffix(OURS) for c in columns if c.endswith(OURS)]
    return [(metric, metric + PAPER in columns) for metric in metrics]


@dataclass(frozen=True)
class Point:
    setting: str
    model: str
    paper: Cell
    ours: Cell

    @property
    def gap(self) -> float:
        """How far ours is from the paper's mean, in the metric's units."""
        return abs(self.ours.mean - self.paper.mean)

    @property
    def tolerance(self) -> float:
        """The largest gap that two estimates with these spreads cannot be told apart by."""
        return self.ours.std + self.paper.std

    @property
    def agrees(self) -> bool:
        """Whether ours and the paper's are within the sum of their stds of each other."""
        return self.gap <= self.tolerance


@dataclass
class Panel:
    metric: str
    points: list[Point]
    not_drawn: list[str] = field(default_factory=list)  # rows with only one of the two numbers

    @property
    def log(self) -> bool:
        values = [v for p in self.points for v in (p.paper.mean, p.ours.mean)]
        return bool(values) and min(values) > 0 and max(values) / min(values) >= LOG_RANGE


@dataclass
class TableFigure:
    name: str
    panels: list[Panel]
    common: str  # the key values every row shares, e.g. "ETTh1, horizon 96"
    skipped: list[str]  # metrics not drawn, with why


def _named(key: str, value: str) -> str:
    """A number or a flag says which column it is from (``horizon 96``); a name stands alone."""
    try:
        float(value)
    except ValueError:
        return f"{key} {value}" if value in ("True", "False") else value
    return f"{key} {value}"


def _settings(header: list[str], rows: list[dict[str, str]]) -> tuple[list[str], str]:
    """Each row's setting (the key columns that tell rows apart, less those the model and the columns
    already taken determine) and the key values all rows share."""
    first_metric = next(i for i, c in enumerate(header) if c.endswith((OURS, PAPER)))
    keys = [c for c in header[:first_metric] if c != "model"]
    model = ["model"] if "model" in header else []
    taken: list[str] = []
    common: list[str] = []
    for key in keys:
        values = {r[key] for r in rows}
        if len(values) == 1:
            common += [_named(key, v) for v in values if v]
            continue
        seen: dict[tuple[str, ...], set[str]] = {}
        for r in rows:
            seen.setdefault(tuple(r[c] for c in taken + model), set()).add(r[key])
        if any(len(v) > 1 for v in seen.values()):
            taken.append(key)
    labels = [", ".join(_named(k, r[k]) for k in taken if r[k]) or "(all rows)" for r in rows]
    return labels, ", ".join(common)


def read_table(path: str | Path) -> TableFigure:
    """The points to draw from one table's CSV; every ``(ours)``/``(paper)`` cell must parse."""
    path = Path(path)
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        header = list(reader.fieldnames or [])
        rows, cells = [], []
        for row in reader:
            if None in row or None in row.values():
                raise CellError(f"{path}: line {reader.line_num} has not as many fields as the header")
            parsed = {}
            for column in header:
                if column.endswith((OURS, PAPER)):
                    try:
                        parsed[column] = parse_cell(row[column])
                    except CellError as err:
                        raise CellError(f"{path}: line {reader.line_num}, column {column!r}: {err}") from None
            rows.append(row)
            cells.append(parsed)
    pairs = metric_pairs(header)
    if not pairs:
        return TableFigure(path.stem, [], "", ["no '(ours)' columns"])
    settings, common = _settings(header, rows)
    papers = [c.removesuffix(PAPER) for c in header if c.endswith(PAPER)]
    orphans = [metric for metric in papers if metric + OURS not in header]
    skipped = [f"a paper column without ours: {', '.join(orphans)}"] if orphans else []
    without = [metric for metric, has_paper in pairs if not has_paper]
    if without:
        skipped.append(f"no paper column: {', '.join(without)}")
    panels = []
    for metric in (metric for metric, has_paper in pairs if has_paper):
        panel = Panel(metric, [])
        for row, parsed, setting in zip(rows, cells, settings, strict=True):
            ours, paper = parsed[metric + OURS], parsed[metric + PAPER]
            name = f"{setting} {row.get('model', '')}".strip()
            if ours is not None and paper is not None:
                panel.points.append(Point(setting, row.get("model", ""), paper, ours))
            elif ours is not None or paper is not None:
                panel.not_drawn.append(f"{name} (no {'paper' if paper is None else 'own'} number)")
        if panel.points:
            panels.append(panel)
        else:
            skipped.append(f"{metric}: no row has both numbers")
    return TableFigure(path.stem, panels, common, skipped)


def _limits(panel: Panel) -> tuple[float, float]:
    """One range for both axes, covering every point and error bar, with a margin."""
    lows = [v for p in panel.points for v in (p.paper.mean - p.paper.std, p.ours.mean - p.ours.std)]
    highs = [v for p in panel.points for v in (p.paper.mean + p.paper.std, p.ours.mean + p.ours.std)]
    if panel.log:
        lows = [v for p in panel.points for v in (p.paper.mean, p.ours.mean)] + [v for v in lows if v > 0]
        low, high = math.log10(min(lows)), math.log10(max(highs))
        pad = 0.06 * (high - low)
        return 10 ** (low - pad), 10 ** (high + pad)
    low, high = min(lows), max(highs)
    pad = 0.06 * (high - low) or 0.5 * abs(high) or 1.0
    return low - pad, high + pad


def draw(table: TableFigure, path: str | Path) -> dict[str, list[tuple[float, float]]]:
    """Write the PNG; returns, per metric, the (x, y) of the points as they are on the axes."""
    models = list(dict.fromkeys(p.model for panel in table.panels for p in panel.points))
    settings = list(dict.fromkeys(p.setting for panel in table.panels for p in panel.points))
    colour = {m: f"C{i % 10}" for i, m in enumerate(models)}
    marker = {s: MARKERS[i % len(MARKERS)] for i, s in enumerate(settings)}
    n = len(table.panels)
    fig, axes = plt.subplots(1, n, figsize=(4.3 * n + 2.6, 4.6), layout="constrained", squeeze=False)
    drawn: dict[str, list[tuple[float, float]]] = {}
    for ax, panel in zip(axes[0], table.panels, strict=True):
        low, high = _limits(panel)
        ax.plot([low, high], [low, high], "--", color="grey", linewidth=1, zorder=0)
        drawn[panel.metric] = []
        for p in panel.points:
            bars = ax.errorbar(
                p.paper.mean,
                p.ours.mean,
                xerr=p.paper.std or None,
                yerr=p.ours.std or None,
                fmt=marker[p.setting],
                color=colour[p.model],
                markersize=6,
                capsize=2,
                elinewidth=1,
                alpha=0.85,
            )
            drawn[panel.metric].extend(tuple(map(float, xy)) for xy in bars.lines[0].get_xydata())
        scale = "log" if panel.log else "linear"
        ax.set(xscale=scale, yscale=scale, xlim=(low, high), ylim=(low, high), aspect="equal")
        ax.set(xlabel=f"paper{' (log)' if panel.log else ''}", ylabel="ours")
        agree = sum(p.agrees for p in panel.points)
        ax.set_title(
            f"{panel.metric}\n{agree} of {len(panel.points)} within std ours + std paper", fontsize=9
        )
        ax.grid(True, which="both", alpha=0.3)
    handles = [Line2D([], [], color=colour[m], marker="o", linestyle="", label=m) for m in models]
    if len(settings) > 1:
        handles += [
            Line2D([], [], color="black", marker=marker[s], linestyle="", label=s, fillstyle="none")
            for s in settings
        ]
    handles.append(Line2D([], [], color="grey", linestyle="--", label="ours = paper"))
    fig.legend(handles=handles, loc="outside right center", fontsize=7)
    title = f"{table.name}: ours (mean ± std over seeds) against the paper's"
    fig.suptitle(title + (f"\n{table.common}" if table.common else ""), fontsize=9)
    _save_png(fig, Path(path))
    plt.close(fig)
    return drawn


def _save_png(fig: plt.Figure, path: Path) -> None:
    """Write via a temporary file in the same folder and rename (readers never see half a file);
    the file gets the mode a plain ``open`` gives, as ``summary.atomic_write_text``'s do."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as fh:
            fig.savefig(fh, format="png", dpi=110)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _cell_text(cell: Cell) -> str:
    return f"{cell.mean:g} ± {cell.std:g}" if cell.std else f"{cell.mean:g}"


def agreement_markdown(tables: list[TableFigure]) -> str:
    """Every drawn point as a line: ours, the paper's, their gap and whether it is within the sum
    of the two stds (the figures' rule), a section per table with its count of cells inside."""
    lines = [
        "# Ours against the paper, cell by cell",
        "",
        "Written by `make figures` from the tables' CSVs. A cell is inside when |ours - paper| <= "
        "std ours + std paper (a bare number has std 0); the PNG beside this file named after each table "
        "draws the same points.",
    ]
    for table in tables:
        points = [(panel.metric, p) for panel in table.panels for p in panel.points]
        inside = sum(p.agrees for _, p in points)
        count = f"{inside} of {len(points)} cells inside."
        lines += ["", f"## {table.name}", "", f"{table.common}: {count}" if table.common else count, ""]
        lines += [
            "| setting | model | metric | ours | paper | gap | std ours + std paper | inside |",
            "|---|---|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {p.setting} | {p.model} | {metric} | {_cell_text(p.ours)} | {_cell_text(p.paper)} "
            f"| {p.gap:.3g} | {p.tolerance:.3g} | {'yes' if p.agrees else 'no'} |"
            for metric, p in points
        ]
    return "\n".join(lines) + "\n"


def figures(tables: list[Path], out: str | Path) -> list[str]:
    """Draw every table that has paper numbers into ``out/<table>.png`` and list their cells in
    ``out/agreement.md``; one line per table saying what was drawn or skipped and why."""
    lines = []
    drawn_tables = []
    for csv_path in tables:
        table = read_table(csv_path)
        skipped = "; ".join(table.skipped)
        if not table.panels:
            lines.append(f"skipped {table.name}: nothing to set against the paper ({skipped})")
            continue
        path = Path(out) / f"{table.name}.png"
        draw(table, path)
        drawn_tables.append(table)
        drawn = ", ".join(
            f"{p.metric} ({sum(q.agrees for q in p.points)}/{len(p.points)} agree"
            + (f"; not drawn: {', '.join(p.not_drawn)}" if p.not_drawn else "")
            + ")"
            for p in table.panels
        )
        lines.append(f"wrote {path}: {drawn}" + (f"; skipped {skipped}" if skipped else ""))
    if drawn_tables:
        listing = Path(out) / "agreement.md"
        atomic_write_text(listing, agreement_markdown(drawn_tables))
        points = [p for table in drawn_tables for panel in table.panels for p in panel.points]
        lines.append(f"wrote {listing}: {sum(p.agrees for p in points)} of {len(points)} cells inside")
    return lines

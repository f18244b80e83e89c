"""Rebuild the results tables (markdown + CSV) from every run record under the given folders.

Each task family's layout (src/recurrent_attention/results/layouts/) turns the runs into tables
beside the papers' numbers (shipped in the package, or --reference / RA_REFERENCE_DIR). One row per
config (seeds of one config only), n runs per row, failed and missing seeds marked. Runs on a GPU
make tables of their own (``*_gpu_*``, the GPU in the title; results/hardware.py).

Tables go to outputs/tables (git-ignored) by default. Writing them where git tracks files (e.g.
--out results, as `make results` does) is allowed only when each table's runs come from one clean
commit; --allow-unclean writes them anyway, with a warning in each table.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

from recurrent_attention.results.collect import RunRecordError, duplicate_lines, load_runs
from recurrent_attention.results.commits import commit_problems, in_git_checkout
from recurrent_attention.results.hardware import GPU_TAG, gpu_table, split_by_hardware
from recurrent_attention.results.layouts import builders
from recurrent_attention.results.tables import MissingReferenceWarning, Table

UNCLEAN_WARNING = (
    "WARNING: not built from runs of one clean commit (see the commit line); "
    "checking out one commit will not reproduce these numbers exactly."
)


def _report(runs, tables: list[Table]) -> None:
    """Say on stderr what the tables count once, count as failed, or cannot show."""
    for line in duplicate_lines(runs):
        print(f"duplicate: {line}", file=sys.stderr)
    shown = {p for t in tables if t.runs is not None for p in t.runs["path"]}
    failed = runs[runs["status"] == "failed"]
    for path, error in zip(failed["path"], failed["error"], strict=True):
        where = "marked in its table" if path in shown else "in no table"
        print(f"failed ({where}): {path}: {error}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", nargs="+", default=["outputs", "results/runs"], help="folders to search")
    parser.add_argument("--out", default="outputs/tables", help="where the tables are written")
    parser.add_argument(
        "--reference",
        default=None,
        help="folder of the papers' CSVs (default $RA_REFERENCE_DIR, else the package's results/reference)",
    )
    parser.add_argument(
        "--allow-unclean",
        action="store_true",
        help="write tables into the git checkout even from -dirty or mixed commits (flagged in each table)",
    )
    args = parser.parse_args(argv)

    try:
        runs = load_runs(r for r in args.runs if Path(r).exists())
    except RunRecordError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if runs.empty:
        print(f"no summary.json or failed.json found under {' '.join(args.runs)}", file=sys.stderr)
        return 1
    reference = Path(args.reference) if args.reference else None
    with warnings.catch_warnings(record=True) as missing:
        warnings.simplefilter("always", MissingReferenceWarning)
        tables = [
            (family, gpu_table(t) if kind == GPU_TAG else t)
            for kind, part in split_by_hardware(runs).items()
            for family, build in sorted(builders().items())
            for t in build(part, reference)
        ]
    for other in (w for w in missing if w.category is not MissingReferenceWarning):
        warnings.warn_explicit(other.message, other.category, other.filename, other.lineno)
    for line in dict.fromkeys(str(w.message) for w in missing if w.category is MissingReferenceWarning):
        print(f"warning: {line}", file=sys.stderr)  # one line per file, however many tables read it
    for family, table in tables:
        if table.frame.empty:  # only failed runs: their lines below say why; no empty table file
            print(f"{family}: {table.title}: no finished run, no table written", file=sys.stderr)
    tables = [(family, table) for family, table in tables if not table.frame.empty]
    _report(runs, [t for _, t in tables])  # a failure is "in its table" only where that is written
    if not tables:
        print("run records found, but no table has a finished run", file=sys.stderr)
        return 1

    if in_git_checkout(args.out):
        problems = {t.name: commit_problems(t.runs) for _, t in tables}
        problems = {name: lines for name, lines in problems.items() if lines}
        for name, lines in problems.items():
            for line in lines:
                print(f"{'warning' if args.allow_unclean else 'refused'}: {name}: {line}", file=sys.stderr)
        if problems and not args.allow_unclean:
            print(
                f"{args.out} is tracked by git, so its tables must each come from runs of one clean commit. "
                "Rerun them on a clean checkout, write elsewhere (make tables -> outputs/tables), "
                "or pass --allow-unclean to write them flagged.",
                file=sys.stderr,
            )
            return 1
        for _, table in tables:
            if table.name in problems:
                table.notes.insert(0, UNCLEAN_WARNING)

    for family, table in tables:
        table.write(args.out)
        print(f"{family}: {table.title} -> {args.out}/{table.name}.md ({len(table.frame)} rows)")
    return 0

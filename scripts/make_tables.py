#!/usr/bin/env python
"""Rebuild the results tables (markdown + CSV) from every summary.json under the given folders.

Each task family's layout (src/recurrent_attention/results/layouts/) turns the runs into tables
beside the papers' numbers (../shared/reference, or --reference / RA_REFERENCE_DIR).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from recurrent_attention.results.collect import load_summaries
from recurrent_attention.results.layouts import builders


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", nargs="+", default=["outputs", "results/runs"], help="folders to search")
    parser.add_argument("--out", default="results", help="where the tables are written")
    parser.add_argument(
        "--reference", default=None, help="folder of the papers' CSVs (default ../shared/reference)"
    )
    args = parser.parse_args(argv)

    runs = load_summaries(r for r in args.runs if Path(r).exists())
    if runs.empty:
        print(f"no summary.json found under {' '.join(args.runs)}", file=sys.stderr)
        return 1
    reference = Path(args.reference) if args.reference else None
    written = []
    for family, build in sorted(builders().items()):
        for table in build(runs, reference):
            written += table.write(args.out)
            print(f"{family}: {table.title} -> {args.out}/{table.name}.md ({len(table.frame)} rows)")
    if not written:
        print("summaries found, but no layout produced a table", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

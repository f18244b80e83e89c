#!/usr/bin/env python
"""Draw each committed table as ours against the paper's numbers: one PNG per table.

For every table CSV (default: results/*.csv, as `make results` writes them), each metric with a
"<metric> (ours)" and a "<metric> (paper)" column becomes one subplot: a point per row at
x = paper, y = ours, both ± std as error bars, the diagonal y = x dashed, colour = model,
marker = setting; the title counts the points within std ours + std paper of the paper. Log axes
when a metric's values are all positive and span a factor of 10 or more. Tables and metrics
without paper numbers are skipped, and said so; a cell that is not a number, "mean ± std" or empty
is an error naming the file, line and column. Writes <out>/<table>.png (default results/figures)
and <out>/agreement.md, every drawn cell as text: ours, the paper's, the gap, inside or not.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from recurrent_attention.results.paper_figures import CellError, figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("tables", nargs="*", type=Path, help="table CSVs (default: results/*.csv)")
    parser.add_argument("--out", default="results/figures", help="folder of the PNGs")
    args = parser.parse_args(argv)
    tables = args.tables or sorted(Path("results").glob("*.csv"))
    if not tables:
        print("error: no table CSVs given and none in results/", file=sys.stderr)
        return 1
    try:
        lines = figures(tables, args.out)
    except (CellError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())

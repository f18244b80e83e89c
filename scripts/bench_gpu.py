#!/usr/bin/env python
"""`make bench`'s GPU section (recurrent_attention.bench.gpu): run in a `verify` window of the device kit.

python scripts/bench_gpu.py --out results/bench/gpu     # on a GPU machine
python scripts/bench_gpu.py --out /tmp/x --smoke        # tiny sizes on any device (tests)
Writes <out>/bench_gpu.json and <out>/bench_gpu.md after each part (atomically: a run stopped in a
part keeps the parts before it, `parts_done` names them); exits 1 if any part failed (each recorded).
"""

from __future__ import annotations

import argparse
import sys
from functools import partial
from pathlib import Path

from recurrent_attention.bench.gpu import gpu_bench, markdown, write_report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, required=True, help="folder for bench_gpu.json and bench_gpu.md")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes on whatever device there is")
    args = parser.parse_args(argv)
    report = gpu_bench(smoke=args.smoke, on_part=partial(write_report, args.out))
    print(markdown(report))
    return 1 if report["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())

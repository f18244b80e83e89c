#!/usr/bin/env python
"""`make bench`'s GPU section (recurrent_attention.bench.gpu): run in a `verify` window of the device kit.

python scripts/bench_gpu.py --out results/bench/gpu     # on a GPU machine
python scripts/bench_gpu.py --out /tmp/x --smoke        # tiny sizes on any device (tests)
Writes <out>/bench_gpu.json and <out>/bench_gpu.md; exits 1 if any part failed (each failure recorded).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from recurrent_attention.bench.gpu import gpu_bench, markdown
from recurrent_attention.results.summary import atomic_write_text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, required=True, help="folder for bench_gpu.json and bench_gpu.md")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes on whatever device there is")
    args = parser.parse_args(argv)
    report = gpu_bench(smoke=args.smoke)
    atomic_write_text(args.out / "bench_gpu.json", json.dumps(report, indent=1) + "\n")
    atomic_write_text(args.out / "bench_gpu.md", markdown(report))
    print(markdown(report))
    return 1 if report["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())

"""Download and verify registered datasets into the data folder (or check a mirror).

python scripts/download_data.py ETTh1 ptb          # fetch, check sha256
python scripts/download_data.py wikitext103        # the release zip, else its Hugging Face copy
python scripts/download_data.py --list             # every registered source
RA_DATA_MIRROR=../shared/data python scripts/download_data.py ETTh1   # verify the mirror copy
"""

from __future__ import annotations

import argparse
import sys

from recurrent_attention.data import DataError, describe_origin, registry, resolve_source


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("sources", nargs="*", help="source names (see --list)")
    parser.add_argument("--data-dir", default="data")
    parser.add_argument(
        "--mirror", default=None, help="a folder with the same layout, read instead of the network"
    )
    parser.add_argument("--list", action="store_true", help="list the registered sources and exit")
    args = parser.parse_args(argv)

    if args.list or not args.sources:
        for name, source in sorted(registry().items()):
            files = ", ".join(f.path for f in source.files.values())
            print(f"{name:28s} {source.family:6s} {files}")
        return 0
    failed = 0
    for name in args.sources:
        try:
            for key, path in resolve_source(name, args.data_dir, args.mirror).items():
                print(f"ok  {name}/{key}: {path} (from {describe_origin(path)})")
        except (DataError, KeyError) as err:
            print(f"error: {err}", file=sys.stderr)
            failed += 1
    return 1 if failed else 0

#!/usr/bin/env python
"""Build the compiled CPU kernels now (``make setup`` runs this) instead of at the first training step.

python scripts/build_kernels.py

Prints where the module was built, or that it could not be (the warning says why). Exits 0 either
way: without the kernels everything runs in PyTorch, slower at short sequences. The build is
cached under TORCH_EXTENSIONS_DIR (default ~/.cache/torch_extensions); RA_NATIVE_KERNELS=0 skips it.
"""

from __future__ import annotations

import argparse
import logging

from recurrent_attention.ops import native


def main() -> int:
    formatter = argparse.RawDescriptionHelpFormatter
    argparse.ArgumentParser(description=__doc__, formatter_class=formatter).parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    module = native.extension()
    print(f"native kernels: {module.__file__ if module else 'unavailable; the PyTorch forms will run'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

#!/usr/bin/env python3
"""Run a device kit's chunk on this machine's GPU (the command `make device-kit` prints).

python3 scripts/device_run.py --kit device_kit --out "$OUT"       # on the GPU machine, from the repo root
python3 scripts/device_run.py --help

The project is not installed there: this puts src/ on the path and hands over to
recurrent_attention.device.runner, which needs only the standard library until it has installed the
kit's wheels.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from recurrent_attention.device.runner import main

if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""Download and verify registered datasets into the data folder (or check a mirror).

python scripts/download_data.py --help; the command line is recurrent_attention.cli.download_data.
"""

from __future__ import annotations

import sys

from recurrent_attention.cli.download_data import main

if __name__ == "__main__":
    sys.exit(main())

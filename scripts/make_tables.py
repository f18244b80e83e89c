#!/usr/bin/env python
"""Rebuild the results tables (markdown + CSV) from every run record under the given folders.

python scripts/make_tables.py --help; the command line is recurrent_attention.cli.make_tables.
"""

from __future__ import annotations

import sys

from recurrent_attention.cli.make_tables import main

if __name__ == "__main__":
    sys.exit(main())

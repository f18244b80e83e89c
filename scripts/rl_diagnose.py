#!/usr/bin/env python
"""Decision Transformers with several backbones on the same batches and held-out episodes, then
their table and curves. python scripts/rl_diagnose.py --help; the command line is
recurrent_attention.cli.rl_diagnose.
"""

from __future__ import annotations

import sys

from recurrent_attention.cli.rl_diagnose import main

if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""``make mutants``: mutation testing of models/, ops/ and each family's metrics and likelihood code.

Resumable (a rerun continues each file's session under outputs/mutants/sessions/); writes
results/mutants/report.md and mutants.csv. See src/recurrent_attention/cli/mutants.py.
"""

from __future__ import annotations

import sys

from recurrent_attention.cli.mutants import main

if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""CRT Table 1 (FLOPs per forward vs the paper's formulas) and Table 6 (parameters, inference ms/batch).

Writes results/crt_table1_flops.md and results/crt_table6_inference.md; see
src/recurrent_attention/bench/lm_cost.py for what is measured.
"""

from __future__ import annotations

import sys

from recurrent_attention.bench.lm_cost import main

if __name__ == "__main__":
    sys.exit(main())

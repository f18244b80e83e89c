#!/usr/bin/env python
"""A one-node SLURM cluster of your own on this machine (start/stop, everything in one folder).

python scripts/slurm_cluster.py --help; the command line is recurrent_attention.cli.slurm_cluster.
"""

from __future__ import annotations

import sys

from recurrent_attention.cli.slurm_cluster import main

if __name__ == "__main__":
    sys.exit(main())

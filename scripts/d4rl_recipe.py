#!/usr/bin/env python
"""D4RL's recipe made here: a SAC behaviour policy, then its medium, medium-replay and medium-expert files.

python scripts/d4rl_recipe.py --help; the command line is recurrent_attention.cli.d4rl_recipe.
"""

from __future__ import annotations

import sys

from recurrent_attention.cli.d4rl_recipe import main

if __name__ == "__main__":
    sys.exit(main())

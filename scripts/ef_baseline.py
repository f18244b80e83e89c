"""The history-free baseline on MIMIC's candidate splits: ``recurrent_attention.cli.ef_baseline``."""

import sys

from recurrent_attention.cli.ef_baseline import main

if __name__ == "__main__":
    sys.exit(main())

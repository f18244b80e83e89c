"""Print next-event predictions for a test sequence, fed one event at a time (``backbone.step``).

python scripts/ef_stream.py outputs/ef/mimic/aaren/paper/seed1-<run_id> --sequence 0
python scripts/ef_stream.py            # an untrained demo model on a generated sin sequence
"""

import sys

from recurrent_attention.cli.ef_stream import main

if __name__ == "__main__":
    sys.exit(main())

"""Math that is not a layer: attention as a many-to-many RNN (parallel scan, chunked, step).

``scan.py`` is the paper's math (the operator, its state, the scan and the recurrence);
``prefix_attention.py`` the chunked fast path and the choice between the paths.
"""

from recurrent_attention.ops.prefix_attention import PATHS, attention_chunked, prefix_attention
from recurrent_attention.ops.scan import (
    ScanState,
    attention_recurrent,
    attention_scan,
    attention_step,
    combine,
    empty_state,
)

__all__ = [
    "PATHS",
    "ScanState",
    "attention_chunked",
    "attention_recurrent",
    "attention_scan",
    "attention_step",
    "combine",
    "empty_state",
    "prefix_attention",
]

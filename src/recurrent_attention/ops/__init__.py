"""Math that is not a layer: attention as a many-to-many RNN (parallel scan, chunked, step)."""

from recurrent_attention.ops.prefix_attention import (
    PATHS,
    ScanState,
    attention_chunked,
    attention_recurrent,
    attention_scan,
    attention_step,
    combine,
    empty_state,
    prefix_attention,
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

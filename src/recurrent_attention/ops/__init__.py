"""Math that is not a layer: attention as a many-to-many RNN (parallel scan, chunked, step).

``scan.py`` is the paper's math (the operator, its state, the scan and the recurrence);
``prefix_attention.py`` the chunked fast path; ``linear_forms.py`` causal linear attention's
three forms (chunked, parallel, recurrent) beside Aaren's; ``attention_op.py`` the choice between
the paths and the chunked one as a ``torch.library`` custom op (what ``torch.compile``/``torch.export`` see);
``projection.py`` Aaren's values-and-scores projection in its compiled form; ``categorical.py`` a
many-class softmax head's log-likelihood in cache-sized chunks (the EF mark head). The compiled
kernels (``native.py``) are reached only through this package: a model asks here, never the
kernels themselves.
"""

from recurrent_attention.ops.attention_op import prefix_attention
from recurrent_attention.ops.prefix_attention import PATHS, attention_chunked
from recurrent_attention.ops.projection import compiled_value_score_projection
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
    "compiled_value_score_projection",
    "empty_state",
    "prefix_attention",
]

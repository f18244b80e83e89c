"""TSF's config rules and resolver, registered with the core on import (``tasks.register_families``)."""

from __future__ import annotations

from recurrent_attention.config import register_resolver
from recurrent_attention.config_checks import choice, register_family_rules
from recurrent_attention.tasks.tsf.data import ETT_MONTH_ROWS
from recurrent_attention.tasks.tsf.timefeatures import FEATURES_BY_FREQ, n_time_features

register_family_rules(
    "tsf",
    choice("task.features", ("M", "S")),
    choice("task.freq", FEATURES_BY_FREQ),
    choice("task.layout", (*ETT_MONTH_ROWS, "custom")),
)
# ${ra.n_time_features:${task.freq}}: the head's time-feature width follows the frequency chosen.
register_resolver("ra.n_time_features", n_time_features)

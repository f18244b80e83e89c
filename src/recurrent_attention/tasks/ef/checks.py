"""Event forecasting's config rules, registered with the core on import (``tasks.register_families``)."""

from __future__ import annotations

from recurrent_attention.config_checks import choice, register_family_rules
from recurrent_attention.tasks.ef.data import FORMATS

register_family_rules("ef", choice("task.format", FORMATS))

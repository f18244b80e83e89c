"""TSC's config rules, registered with the core on import (``tasks.register_families``)."""

from __future__ import annotations

from recurrent_attention.config_checks import choice, register_family_rules
from recurrent_attention.tasks.tsc.head import EMBEDDINGS, HEADS

register_family_rules("tsc", choice("task.head", HEADS), choice("task.embedding", EMBEDDINGS))

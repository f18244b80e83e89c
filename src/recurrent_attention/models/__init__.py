"""Backbones behind one interface: ``forward(x, state)``, ``init_state(batch)``, ``step(x_t, state)``."""

from recurrent_attention.models.aaren import Aaren
from recurrent_attention.models.base import Backbone
from recurrent_attention.models.transformer import Transformer

__all__ = ["Aaren", "Backbone", "Transformer"]

"""Backbones behind one interface: ``forward(x, state)``, ``init_state(batch)``, ``step(x_t, state)``."""

from recurrent_attention.models.aaren import Aaren
from recurrent_attention.models.base import Backbone
from recurrent_attention.models.crt import CompactRecurrentTransformer
from recurrent_attention.models.ncgru import GRU, NCGRU
from recurrent_attention.models.transformer import Transformer
from recurrent_attention.models.transformer_xl import TransformerXL

__all__ = ["GRU", "NCGRU", "Aaren", "Backbone", "CompactRecurrentTransformer", "Transformer", "TransformerXL"]

"""Small layers shared by task heads (embeddings, encodings)."""

from recurrent_attention.layers.positional import sinusoidal_positions

__all__ = ["sinusoidal_positions"]

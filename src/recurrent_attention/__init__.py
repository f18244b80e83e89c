"""recurrent-attention: Aaren, Transformer, Transformer-XL and CRT backbones behind one interface."""

__version__ = "0.1.0"

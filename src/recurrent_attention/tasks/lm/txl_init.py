"""Transformer-XL's initialisation of a language model, for the LM task's ``compat=reference``.

Transcribed from Transformer-XL's ``pytorch/train.py`` (``weights_init``, ``init_weight``,
``init_bias`` at its defaults ``--init normal --init_std 0.02``), which it applies to the whole model
(``model.apply``) and then once more to the word embedding:

- every ``Linear``: weight ``N(0, 0.02)``, bias 0;
- the word ``Embedding``: ``N(0, 0.02)`` (the tied output weight is that same tensor);
- every ``LayerNorm``: weight ``N(1, 0.02)``, bias 0;
- the relative-position biases ``r_w_bias``, ``r_r_bias``: ``N(0, 0.02)``;
- the adaptive softmax (``ProjectedAdaptiveLogSoftmax``): cluster weight ``N(0, 0.02)``, cluster
  bias 0, and the output biases 0 (its ``out_layers`` are ``Linear``). With ``div_val`` 1 and
  ``d_embed = d_model`` it has no projections, so its ``proj_init_std`` rule has nothing to set.

CRT's memory and positional RNNs are not in Transformer-XL's code and its paper gives no
initialisation for them: they keep their own (:mod:`recurrent_attention.models.ncgru`), so the
GRU / NCGRU pairs of CRT's Tables 9-12 start from their cells' initialisations alone. Modules of no
class above (Aaren's query, say) are left as built.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import nn

from recurrent_attention.models.ncgru import GRU, GatedRecurrence
from recurrent_attention.models.transformer_xl import RelativeAttention
from recurrent_attention.tasks.lm.head import AdaptiveSoftmax

INIT_STD = 0.02
# The recurrent cells Transformer-XL's code does not have.
OWN_INIT = (GatedRecurrence, GRU)


def _transformer_xl_modules(module: nn.Module) -> Iterator[nn.Module]:
    """``module`` and its descendants, less the subtrees of :data:`OWN_INIT`, in registration order."""
    if isinstance(module, OWN_INIT):
        return
    yield module
    for child in module.children():
        yield from _transformer_xl_modules(child)


@torch.no_grad()
def transformer_xl_init(model: nn.Module) -> None:
    """Re-initialise ``model`` (a language model: embedding, backbone, softmax) by Transformer-XL's rules.

    Each parameter is drawn once, in registration order, so a seed gives one model (tensors shared
    between modules, the layers' ``r_w_bias``, the tied embedding, are not drawn twice).
    """
    done: set[int] = set()

    def normal(tensor: torch.Tensor | None, mean: float = 0.0) -> None:
        if tensor is not None and id(tensor) not in done:
            done.add(id(tensor))
            nn.init.normal_(tensor, mean, INIT_STD)

    def zero(tensor: torch.Tensor | None) -> None:
        if tensor is not None and id(tensor) not in done:
            done.add(id(tensor))
            nn.init.zeros_(tensor)

    for module in _transformer_xl_modules(model):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            normal(module.weight)
            zero(getattr(module, "bias", None))
        elif isinstance(module, nn.LayerNorm):
            normal(module.weight, mean=1.0)
            zero(module.bias)
        elif isinstance(module, RelativeAttention):
            normal(module.r_w_bias)
            normal(module.r_r_bias)
        elif isinstance(module, AdaptiveSoftmax):
            normal(module.cluster_weight)
            zero(module.cluster_bias)
            zero(module.bias)

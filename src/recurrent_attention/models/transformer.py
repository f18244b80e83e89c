"""Causal multi-head softmax attention (PyTorch SDPA) with a KV cache as its state."""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from recurrent_attention.models.blocks import HeadProjections, LayerStack


class KVCache(NamedTuple):
    """Keys and values of every token seen so far in ``(B, H, capacity, d_head)`` buffers.

    The first ``length`` positions are this state's tokens (``None``: every position, as
    :meth:`CausalSelfAttention.forward` returns them). A deployed step keeps spare capacity past
    them and writes each token in place (:mod:`recurrent_attention.deploy.kv_cache`; ``written``
    is its record of how far shared buffers are filled); this model reads only the tokens.
    """

    k: Tensor
    v: Tensor
    length: int | None = None
    written: list[int] | None = None

    @property
    def size(self) -> int:
        """Tokens in this state."""
        return self.k.shape[-2] if self.length is None else self.length

    def tokens(self) -> tuple[Tensor, Tensor]:
        """Keys and values ``(B, H, size, d_head)`` of this state's tokens (views of the buffers)."""
        n = self.size
        return self.k[..., :n, :], self.v[..., :n, :]


class CausalSelfAttention(nn.Module):
    """Each token attends to itself and every earlier token (including cached ones)."""

    def __init__(self, d_model: int, n_heads: int, attn_dropout: float = 0.0, qkv_bias: bool = True) -> None:
        super().__init__()
        self.proj = HeadProjections(d_model, n_heads, qkv_bias)
        self.attn_dropout = attn_dropout

    def forward(self, x: Tensor, cache: KVCache | None = None) -> tuple[Tensor, KVCache]:
        q, k, v = self.proj.heads_qkv(x)
        dropout = self.attn_dropout if self.training else 0.0
        if cache is None or cache.size == 0:
            out = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=True)
        else:
            cached_k, cached_v = cache.tokens()
            k, v = torch.cat([cached_k, k], dim=-2), torch.cat([cached_v, v], dim=-2)
            n_new, n_all = q.shape[-2], k.shape[-2]
            # New token i sits at absolute position n_all - n_new + i and sees keys up to there.
            visible = torch.ones(n_new, n_all, dtype=torch.bool, device=x.device).tril(n_all - n_new)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=visible, dropout_p=dropout)
        return self.proj.merge_heads(out), KVCache(k, v)

    def step(self, x_t: Tensor, cache: KVCache) -> tuple[Tensor, KVCache]:
        """One token through :meth:`forward`: the cache grows by concatenation, with autograd."""
        out, cache = self.forward(x_t.unsqueeze(-2), cache)
        return out.squeeze(-2), cache

    def init_state(
        self, batch_size: int, device: torch.device | None = None, dtype: torch.dtype | None = None
    ) -> KVCache:
        dtype = dtype or self.proj.qkv.weight.dtype
        empty = torch.zeros(batch_size, self.proj.n_heads, 0, self.proj.d_head, device=device, dtype=dtype)
        return KVCache(empty, empty.clone())


class Transformer(LayerStack):
    """Decoder-only causal Transformer; state = per-layer KV cache (memory grows with N).

    Its deployed step (fused q/k/v, a preallocated cache written in place), the baseline Aaren's
    streaming is measured against, is :class:`recurrent_attention.deploy.LeanStepper`'s.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        n_layers: int,
        d_ff: int,
        dropout: float = 0.1,
        attn_dropout: float | None = None,
        activation: str = "gelu",
        norm_first: bool = False,
        final_norm: bool = True,
        qkv_bias: bool = True,
        norm_eps: float = 1e-5,
    ) -> None:
        attn_dropout = dropout if attn_dropout is None else attn_dropout
        mixers = [CausalSelfAttention(d_model, n_heads, attn_dropout, qkv_bias) for _ in range(n_layers)]
        super().__init__(mixers, d_model, d_ff, dropout, activation, norm_first, final_norm, norm_eps)

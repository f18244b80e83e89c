"""Causal multi-head softmax attention (PyTorch SDPA) with a KV cache as its state."""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from recurrent_attention.models.blocks import HeadProjections, LayerStack


class KVCache(NamedTuple):
    """Keys and values of every token seen so far, ``(B, H, T, d_head)``: grows with T."""

    k: Tensor
    v: Tensor


class CausalSelfAttention(nn.Module):
    """Each token attends to itself and every earlier token (including cached ones)."""

    def __init__(self, d_model: int, n_heads: int, attn_dropout: float = 0.0, qkv_bias: bool = True) -> None:
        super().__init__()
        self.proj = HeadProjections(d_model, n_heads, qkv_bias)
        self.attn_dropout = attn_dropout

    def forward(self, x: Tensor, cache: KVCache | None = None) -> tuple[Tensor, KVCache]:
        q, k, v = (
            self.proj.split_heads(p(x)) for p in (self.proj.q_proj, self.proj.k_proj, self.proj.v_proj)
        )
        dropout = self.attn_dropout if self.training else 0.0
        if cache is None or cache.k.shape[-2] == 0:
            out = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=True)
        else:
            k, v = torch.cat([cache.k, k], dim=-2), torch.cat([cache.v, v], dim=-2)
            n_new, n_all = q.shape[-2], k.shape[-2]
            # New token i sits at absolute position n_all - n_new + i and sees keys up to there.
            visible = torch.ones(n_new, n_all, dtype=torch.bool, device=x.device).tril(n_all - n_new)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=visible, dropout_p=dropout)
        return self.proj.merge_heads(out), KVCache(k, v)

    def step(self, x_t: Tensor, cache: KVCache) -> tuple[Tensor, KVCache]:
        out, cache = self.forward(x_t.unsqueeze(-2), cache)
        return out.squeeze(-2), cache

    def init_state(
        self, batch_size: int, device: torch.device | None = None, dtype: torch.dtype | None = None
    ) -> KVCache:
        dtype = dtype or self.proj.q_proj.weight.dtype
        empty = torch.zeros(batch_size, self.proj.n_heads, 0, self.proj.d_head, device=device, dtype=dtype)
        return KVCache(empty, empty.clone())


class Transformer(LayerStack):
    """Decoder-only causal Transformer; state = per-layer KV cache (memory grows with N)."""

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

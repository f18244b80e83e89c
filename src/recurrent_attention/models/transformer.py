"""Causal multi-head softmax attention (PyTorch SDPA) with a KV cache as its state."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from recurrent_attention.models.blocks import HeadProjections, LayerStack, addmm_weights


class KVCache(NamedTuple):
    """Keys and values of every token seen so far in ``(B, H, capacity, d_head)`` buffers.

    The first ``length`` positions are this state's tokens (``None``: every position, as
    :meth:`CausalSelfAttention.forward` returns them). :meth:`append`, the lean eval step's, writes
    the next token in place and doubles the capacity when full, as a deployed KV cache does, instead
    of copying the whole cache every token. ``written`` is shared by every state over the same
    buffers and says how far they are filled, so stepping twice from one state (a branch) copies
    instead of overwriting the other branch's token.
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

    @classmethod
    def with_capacity(cls, k: Tensor, v: Tensor, capacity: int) -> KVCache:
        """A cache holding ``k``, ``v`` ``(B, H, N, d_head)`` in buffers of ``capacity >= N`` positions."""
        n = k.shape[-2]
        return cls(*(_moved(t, n, capacity) for t in (k, v)), n, [n])

    def append(self, k_t: Tensor, v_t: Tensor) -> KVCache:
        """This cache and one more token, keys and values ``(B, H, d_head)`` (no autograd)."""
        n, capacity = self.size, self.k.shape[-2]
        if self.written is None or self.written[0] != n or n == capacity:
            grown = self.with_capacity(*self.tokens(), capacity if n < capacity else max(16, 2 * n))
            k, v, written = grown.k, grown.v, grown.written
        else:
            k, v, written = self.k, self.v, self.written
        k[..., n, :] = k_t
        v[..., n, :] = v_t
        written[0] = n + 1
        return KVCache(k, v, n + 1, written)


def _moved(tokens: Tensor, n: int, capacity: int) -> Tensor:
    buffer = tokens.new_empty(*tokens.shape[:-2], capacity, tokens.shape[-1])
    buffer[..., :n, :] = tokens
    return buffer


def _lean_attention_mix(
    qkv_weight: Tensor,
    qkv_bias: Tensor,
    out_weight: Tensor,
    out_bias: Tensor,
    head_shape: tuple[int, int],
    x: Tensor,
    cache: KVCache,
) -> tuple[Tensor, KVCache]:
    """:meth:`CausalSelfAttention.step` on laid-out weights: one fused q/k/v ``addmm``, the token
    written into the cache in place, and one query attending to every cached key (no mask needed)."""
    batch = x.shape[0]
    q, k, v = torch.addmm(qkv_bias, x, qkv_weight).view(batch, 3, *head_shape).unbind(1)
    cache = cache.append(k, v)
    out = F.scaled_dot_product_attention(q.unsqueeze(-2), *cache.tokens())
    return torch.addmm(out_bias, out.view(batch, -1), out_weight), cache


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

    def lean_weights(self) -> tuple[Tensor, Tensor, Tensor, Tensor, tuple[int, int]]:
        """``(W_qkv^T, b_qkv, W_out^T, b_out, (heads, d_head))``: q/k/v as one ``addmm``, laid out now."""
        p = self.proj
        qkv = addmm_weights(p.qkv.weight, p.qkv.bias)
        return (*qkv, *addmm_weights(p.out_proj.weight, p.out_proj.bias), (p.n_heads, p.d_head))

    def lean_mixer(self) -> Callable[[Tensor, KVCache], tuple[Tensor, KVCache]]:
        """:meth:`step` for a ``(B, d_model)`` token in eval mode, on weights laid out now."""
        return partial(_lean_attention_mix, *self.lean_weights())

    def init_state(
        self, batch_size: int, device: torch.device | None = None, dtype: torch.dtype | None = None
    ) -> KVCache:
        dtype = dtype or self.proj.qkv.weight.dtype
        empty = torch.zeros(batch_size, self.proj.n_heads, 0, self.proj.d_head, device=device, dtype=dtype)
        return KVCache(empty, empty.clone())


class Transformer(LayerStack):
    """Decoder-only causal Transformer; state = per-layer KV cache (memory grows with N).

    In eval mode without gradients :meth:`step` takes :class:`LayerStack`'s lean path with
    :meth:`CausalSelfAttention.lean_mixer` (fused q/k/v, a preallocated cache written in place),
    the baseline a deployed Transformer is: Aaren's streaming is measured against it.
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

"""A deployed Transformer's KV cache: preallocated buffers written in place, doubled when full.

The model's own step (:meth:`~recurrent_attention.models.transformer.CausalSelfAttention.step`)
grows its :class:`~recurrent_attention.models.transformer.KVCache` by concatenation, copying the
whole cache every token. A deployed decoder does not: :func:`append` writes the next token into
spare capacity and copies only when the buffers are full (doubling them). The two hold the same
tokens (``KVCache.tokens``), so either step continues from the other's state.
"""

from __future__ import annotations

from torch import Tensor

from recurrent_attention.models.transformer import KVCache


def with_capacity(k: Tensor, v: Tensor, capacity: int) -> KVCache:
    """A cache holding ``k``, ``v`` ``(B, H, N, d_head)`` in buffers of ``capacity >= N`` positions."""
    n = k.shape[-2]
    return KVCache(*(_moved(t, n, capacity) for t in (k, v)), n, [n])


def append(cache: KVCache, k_t: Tensor, v_t: Tensor) -> KVCache:
    """``cache`` and one more token, keys and values ``(B, H, d_head)`` (no autograd).

    ``cache.written`` is shared by every state over the same buffers and says how far they are
    filled, so stepping twice from one state (a branch) copies instead of overwriting the other
    branch's token.
    """
    n, capacity = cache.size, cache.k.shape[-2]
    if cache.written is None or cache.written[0] != n or n == capacity:
        grown = with_capacity(*cache.tokens(), capacity if n < capacity else max(16, 2 * n))
        k, v, written = grown.k, grown.v, grown.written
    else:
        k, v, written = cache.k, cache.v, cache.written
    k[..., n, :] = k_t
    v[..., n, :] = v_t
    written[0] = n + 1
    return KVCache(k, v, n + 1, written)


def _moved(tokens: Tensor, n: int, capacity: int) -> Tensor:
    buffer = tokens.new_empty(*tokens.shape[:-2], capacity, tokens.shape[-1])
    buffer[..., :n, :] = tokens
    return buffer

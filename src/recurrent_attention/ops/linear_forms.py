"""Causal linear attention's three forms, on features: the sums ``S_i``, ``z_i`` three ways.

For positive features ``q_i = phi(Q_i)``, ``k_i = phi(K_i)`` and values ``v_i`` (per head, the
feature map is the model's: :mod:`~recurrent_attention.models.linear_attention`), every output is

    o_i = q_i^T S_i / (q_i^T z_i + eps),   S_i = S_0 + sum_{j<=i} k_j v_j^T,   z_i = z_0 + sum_{j<=i} k_j

from a carried state ``(S_0, z_0)`` of constant size. The forms agree to float64 precision:

- :func:`recurrent`: token by token (:func:`recurrent_step`, the form a streamed step takes);
- :func:`parallel`: every ``S_i`` and ``z_i`` as cumulative sums (memory ``N x d_head^2`` per head);
- :func:`chunked` (what training runs): chunks of ``chunk_size`` tokens, all at once: inside a chunk
  the masked products ``(q k^T ⊙ causal) v``, across chunks the state before each chunk as a
  cumulative sum of the chunks' ``k^T v`` (memory ``N x chunk_size + N / chunk_size x d_head^2``);
  ``z`` computed with ``S``, as its last column.

Shapes: ``q, k, v (..., N, d_head)``; a state holds ``s (..., d_head, d_head)`` and
``z (..., d_head)``. ``eps`` is the reference implementation's 1e-6 (fast-transformers'
``CausalLinearAttention``). The chunked form's speed against the Transformer's attention (SDPA):
``results/bench/bench.md`` (``make bench``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

EPS = 1e-6


class LinearState(NamedTuple):
    """Per head: ``s (..., d_head, d_head) = sum k_j v_j^T`` and ``z (..., d_head) = sum k_j``."""

    s: Tensor
    z: Tensor


def _normalised(numerator: Tensor, denominator: Tensor) -> Tensor:
    return numerator / (denominator.unsqueeze(-1) + EPS)


def recurrent_step(q: Tensor, k: Tensor, v: Tensor, state: LinearState) -> tuple[Tensor, LinearState]:
    """One token: features ``q, k`` and values ``v`` ``(..., d_head)``; the state absorbs the token first."""
    s = state.s + k.unsqueeze(-1) * v.unsqueeze(-2)
    z = state.z + k
    out = _normalised(torch.einsum("...d,...de->...e", q, s), (q * z).sum(-1))
    return out, LinearState(s, z)


def recurrent(
    q: Tensor, k: Tensor, v: Tensor, state: LinearState, chunk_size: int
) -> tuple[Tensor, LinearState]:
    """Token by token over ``(..., N, d_head)`` inputs (``chunk_size`` unused)."""
    del chunk_size
    outputs = []
    for t in range(q.shape[-2]):
        out, state = recurrent_step(q[..., t, :], k[..., t, :], v[..., t, :], state)
        outputs.append(out)
    return torch.stack(outputs, dim=-2) if outputs else v.clone(), state


def parallel(
    q: Tensor, k: Tensor, v: Tensor, state: LinearState, chunk_size: int
) -> tuple[Tensor, LinearState]:
    """Every ``S_i``, ``z_i`` at once as cumulative sums from the carried state (``chunk_size`` unused)."""
    del chunk_size
    if q.shape[-2] == 0:
        return v.clone(), state
    s = state.s.unsqueeze(-3) + torch.einsum("...nd,...ne->...nde", k, v).cumsum(-3)
    z = state.z.unsqueeze(-2) + k.cumsum(-2)
    out = _normalised(torch.einsum("...nd,...nde->...ne", q, s), (q * z).sum(-1))
    return out, LinearState(s[..., -1, :, :], z[..., -1, :])


def chunked(
    q: Tensor, k: Tensor, v: Tensor, state: LinearState, chunk_size: int
) -> tuple[Tensor, LinearState]:
    """Chunks of ``chunk_size`` tokens, every chunk at once: masked products inside a chunk, and the
    state before each chunk (the carried state, then the chunks' ``k^T v`` summed up).

    ``S`` and ``z`` are both sums of ``k_j`` times something (``v_j``, and 1), so they are computed
    as one: the values get a last column of ones, ``z`` rides as the last column of ``S``, and one
    product gives numerator and denominator together (fwd+bwd ~15 % faster than two). The last
    chunk is filled up with zero features and values, which add nothing to any sum."""
    n = q.shape[-2]
    if n == 0:
        return v.clone(), state
    v = torch.cat([v, v.new_ones(*v.shape[:-1], 1)], dim=-1)
    fill = -n % chunk_size
    if fill:
        q, k, v = (F.pad(t, (0, 0, 0, fill)) for t in (q, k, v))
    q, k, v = (t.reshape(*t.shape[:-2], -1, chunk_size, t.shape[-1]) for t in (q, k, v))
    k_t = k.transpose(-1, -2)  # chunks: (..., n_chunks, C, d_head), v (..., n_chunks, C, d_head + 1)
    carried = torch.cat([state.s, state.z.unsqueeze(-1)], dim=-1)
    # (..., n_chunks + 1, d_head, d_head + 1): [S | z] before each chunk, and after the last one
    sums = torch.cat([carried.unsqueeze(-3), k_t @ v], dim=-3).cumsum(-3)
    weights = (q @ k_t).tril()  # (..., n_chunks, C, C): q_i·k_j for j <= i in the chunk
    both = q @ sums[..., :-1, :, :] + weights @ v  # numerator | denominator
    out = _normalised(both[..., :-1], both[..., -1]).flatten(-3, -2)[..., :n, :]
    return out, LinearState(sums[..., -1, :, :-1], sums[..., -1, :, -1])


FORMS: dict[str, Callable[[Tensor, Tensor, Tensor, LinearState, int], tuple[Tensor, LinearState]]] = {
    "chunked": chunked,
    "parallel": parallel,
    "recurrent": recurrent,
}
"""The forms by the name ``model.path`` gives."""

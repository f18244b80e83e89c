"""Causal linear attention (Katharopoulos et al. 2020, "Transformers are RNNs"), ELU+1 feature map.

Softmax's ``exp(q·k)`` is replaced by ``phi(q)·phi(k)`` with ``phi(x) = elu(x) + 1`` (positive, so
every weight is positive and the normaliser never vanishes). The output at token ``i`` (their
equations 4-6, per head) is then

    o_i = phi(q_i)^T S_i / (phi(q_i)^T z_i + eps),
    S_i = sum_{j<=i} phi(k_j) v_j^T,   z_i = sum_{j<=i} phi(k_j)

so the state ``(S, z)`` per layer and head has a constant size, ``d_head x d_head`` and ``d_head``:
the closest relative of Aaren (also a constant-size state, but of a softmax with a learned query).
``eps`` is the reference implementation's 1e-6 (fast-transformers' ``CausalLinearAttention``).

``path`` picks how ``forward`` computes the sums, one of the three forms in
:mod:`~recurrent_attention.ops.linear_forms` (beside Aaren's in ``ops/``), which agree to float64
precision: ``chunked`` (default; chunks of ``chunk_size`` tokens, masked products inside a chunk, the
state summed across), ``parallel`` (cumulative sums) and ``recurrent`` (token by token, the form
:meth:`LinearAttention.step` takes).

The blocks around it are every backbone's (:class:`~recurrent_attention.models.blocks.LayerStack`).
There is no attention matrix to drop, so there is no attention-probability dropout.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from recurrent_attention.models.blocks import HeadProjections, LayerStack
from recurrent_attention.ops.linear_forms import FORMS, LinearState, recurrent_step


def feature_map(x: Tensor) -> Tensor:
    """``elu(x) + 1``: positive features, so the attention weights are positive (the paper's choice).

    Taken of a contiguous copy: on the heads' strided view of the projection, ``elu``'s backward gives
    its gradient other strides in eager mode than torch.compile's trace assumes, and the compiled
    backward (``aot_eager``) fails on a ``view`` of it."""
    return F.elu(x.contiguous()) + 1


class LinearAttention(nn.Module):
    """Multi-head causal linear attention on the shared q/k/v/output projections."""

    def __init__(
        self, d_model: int, n_heads: int, path: str = "chunked", chunk_size: int = 64, qkv_bias: bool = True
    ) -> None:
        super().__init__()
        if path not in FORMS:
            raise ValueError(f"model.path={path!r}: choose one of {', '.join(sorted(FORMS))}")
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
            raise ValueError(f"model.chunk_size={chunk_size!r}: use a positive integer")
        self.proj = HeadProjections(d_model, n_heads, qkv_bias)
        self.path, self.chunk_size = path, chunk_size

    def forward(self, x: Tensor, state: LinearState | None = None) -> tuple[Tensor, LinearState]:
        q, k, v = self.proj.heads_qkv(x)
        if state is None:
            state = self.init_state(x.shape[0], x.device, x.dtype)
        out, state = FORMS[self.path](feature_map(q), feature_map(k), v, state, self.chunk_size)
        return self.proj.merge_heads(out), state

    def step(self, x_t: Tensor, state: LinearState) -> tuple[Tensor, LinearState]:
        q, k, v = (part.squeeze(-2) for part in self.proj.heads_qkv(x_t.unsqueeze(-2)))
        out, state = recurrent_step(feature_map(q), feature_map(k), v, state)
        return self.proj.out_proj(out.flatten(-2)), state

    def init_state(
        self, batch_size: int, device: torch.device | None = None, dtype: torch.dtype | None = None
    ) -> LinearState:
        heads, d_head = self.proj.n_heads, self.proj.d_head
        factory = {"device": device, "dtype": dtype or self.proj.qkv.weight.dtype}
        return LinearState(
            torch.zeros(batch_size, heads, d_head, d_head, **factory),
            torch.zeros(batch_size, heads, d_head, **factory),
        )


class LinearTransformer(LayerStack):
    """Linear-attention layers in the residual blocks every backbone shares; state = ``(S, z)`` per layer."""

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        n_layers: int,
        d_ff: int,
        dropout: float = 0.1,
        activation: str = "gelu",
        norm_first: bool = False,
        final_norm: bool = True,
        path: str = "chunked",
        chunk_size: int = 64,
        qkv_bias: bool = True,
        norm_eps: float = 1e-5,
        attn_dropout: float | None = None,
    ) -> None:
        # attn_dropout is accepted as Aaren's is, for the value presets and LM set for every model;
        # linear attention has no attention probabilities to drop.
        del attn_dropout
        mixers = [LinearAttention(d_model, n_heads, path, chunk_size, qkv_bias) for _ in range(n_layers)]
        super().__init__(mixers, d_model, d_ff, dropout, activation, norm_first, final_norm, norm_eps)

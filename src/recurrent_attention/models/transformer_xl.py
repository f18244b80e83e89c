"""Transformer-XL (Dai et al. 2019): relative positional attention and segment-level memory.

Each layer attends over its cached inputs of earlier segments (``mem_len`` detached hidden states,
the memory) followed by the current segment. Scores are ``(q + u)·k + (q + v)·R_{i-j}`` with
learned biases ``u = r_w_bias`` and ``v = r_r_bias`` (shared by all layers, as in the original)
and sinusoidal relative encodings ``R`` of the distance i - j, computed for every key at once and
aligned by the relative shift. The block is post-norm with ReLU feed-forward, as the original.
The original's q/k/v projection has no biases and its post-norm stack no LayerNorm after the last
block; ``qkv_bias``, ``final_norm`` and ``norm_eps`` change that for a protocol that asks otherwise
(THP's encoder: no biases, eps 1e-6, no final norm), with the defaults keeping the original.

State = one memory tensor ``(B, m, d_model)`` per layer, ``m <= mem_len``. ``step`` is ``forward``
on a one-token segment, so it equals ``forward`` as long as every earlier token is still in the
memory (at most ``mem_len`` tokens); beyond that the window slides, as in the original evaluation.
With ``mem_len=0`` (the default) every segment is seen alone: Transformer-XL's code with no memory,
which is the CRT paper's baseline Transformer (``model=transformer model.relative_positions=true``).

``relative_positions=False`` drops the position terms (``r_net``, ``u``, ``v``): the scores are
``q·k`` alone, Transformer-XL's block for a caller that encodes positions itself (CRT's positional
RNN, whose paper writes the score ``E^T W_q^T W_k E``). ``shared_position_dropout`` (the default)
draws the dropout mask of the relative encodings once per forward for every layer, as Transformer-XL's
code does (``pos_emb = self.drop(pos_emb)`` before its layers); ``False`` draws one per layer, this
project's earlier form, kept for the runs made with it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from recurrent_attention.models.blocks import LayerStack


def relative_sinusoids(n_keys: int, d_model: int, clamp_len: int | None, device: torch.device) -> Tensor:
    """``(n_keys, d_model)`` encodings of the distances ``n_keys - 1, ..., 0`` (sin half, cos half)."""
    distances = torch.arange(n_keys - 1, -1, -1.0, device=device)
    if clamp_len is not None:
        distances = distances.clamp(max=clamp_len)
    inv_freq = 1.0 / (10000 ** (torch.arange(0.0, d_model, 2.0, device=device) / d_model))
    angles = torch.outer(distances, inv_freq)
    return torch.cat([angles.sin(), angles.cos()], dim=-1)


def rel_shift(scores: Tensor) -> Tensor:
    """Align ``(..., q, k)`` scores computed against distances ``k-1..0`` to query-key pairs.

    After the shift, entry ``[i, j]`` holds the score for distance ``(k - q) + i - j`` wherever
    ``j <= (k - q) + i``; the entries above that diagonal are garbage and must be masked.
    """
    *lead, q, k = scores.shape
    padded = torch.cat([scores.new_zeros(*lead, q, 1), scores], dim=-1)
    return padded.view(*lead, k + 1, q)[..., 1:, :].reshape(*lead, q, k)


class RelativeAttention(nn.Module):
    """Multi-head attention over ``[memory; segment]`` with relative positions; state = memory.

    Without the biases ``r_w_bias``, ``r_r_bias`` (both None) it has no position terms and no
    ``r_net``: content scores ``q·k`` alone.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_head: int,
        mem_len: int,
        r_w_bias: nn.Parameter | None,
        r_r_bias: nn.Parameter | None,
        dropout: float = 0.1,
        attn_dropout: float = 0.0,
        clamp_len: int | None = None,
        qkv_bias: bool = False,
    ) -> None:
        super().__init__()
        if (r_w_bias is None) is not (r_r_bias is None):
            raise ValueError("RelativeAttention takes both position biases (r_w_bias, r_r_bias) or neither")
        self.n_heads, self.d_head, self.mem_len, self.clamp_len = n_heads, d_head, mem_len, clamp_len
        self.qkv = nn.Linear(d_model, 3 * n_heads * d_head, bias=qkv_bias)
        self.relative = r_w_bias is not None
        if self.relative:
            self.r_net = nn.Linear(d_model, n_heads * d_head, bias=False)
        self.out = nn.Linear(n_heads * d_head, d_model, bias=False)
        self.r_w_bias, self.r_r_bias = r_w_bias, r_r_bias
        self.pos_dropout = nn.Dropout(dropout)
        self.attn_dropout = nn.Dropout(attn_dropout)

    def _heads(self, x: Tensor) -> Tensor:
        return x.unflatten(-1, (self.n_heads, self.d_head)).transpose(-3, -2)

    def forward(
        self, x: Tensor, memory: Tensor | None = None, positions: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """``positions``: the relative encodings of distances ``K' - 1 .. 0`` (``K' >=`` this layer's
        keys), dropout applied, shared by the stack; None draws this layer's own."""
        n_query = x.shape[1]
        keys_in = x if memory is None else torch.cat([memory, x], dim=1)
        n_keys = keys_in.shape[1]
        n_mem = n_keys - n_query
        q, k, v = (self._heads(t) for t in self.qkv(keys_in).chunk(3, dim=-1))
        q = q[..., n_mem:, :]
        if self.relative:
            if positions is None:
                sinusoids = relative_sinusoids(n_keys, x.shape[-1], self.clamp_len, x.device)
                positions = self.pos_dropout(sinusoids.to(x.dtype))
            # the last n_keys rows are the distances n_keys - 1 .. 0
            r = self.r_net(positions[-n_keys:]).unflatten(-1, (self.n_heads, self.d_head)).transpose(0, 1)
            content = (q + self.r_w_bias[:, None]) @ k.transpose(-1, -2)
            position = rel_shift((q + self.r_r_bias[:, None]) @ r.transpose(-1, -2))  # r: (H, K, d_head)
            scores = (content + position) * self.d_head**-0.5
        else:
            scores = (q @ k.transpose(-1, -2)) * self.d_head**-0.5
        # Query i (absolute position n_mem + i) sees keys 0 .. n_mem + i.
        hidden = torch.ones(n_query, n_keys, dtype=torch.bool, device=x.device).triu(1 + n_mem)
        scores = scores.masked_fill(hidden, float("-inf"))
        attended = self.attn_dropout(F.softmax(scores, dim=-1)) @ v
        new_memory = keys_in[:, -self.mem_len :].detach() if self.mem_len > 0 else keys_in[:, :0].detach()
        return self.out(attended.transpose(1, 2).flatten(-2)), new_memory

    def step(self, x_t: Tensor, memory: Tensor) -> tuple[Tensor, Tensor]:
        out, memory = self.forward(x_t.unsqueeze(1), memory)
        return out.squeeze(1), memory

    def init_state(
        self, batch_size: int, device: torch.device | None = None, dtype: torch.dtype | None = None
    ) -> Tensor:
        d_model = self.out.out_features
        return torch.zeros(batch_size, 0, d_model, device=device, dtype=dtype or self.qkv.weight.dtype)


class TransformerXL(LayerStack):
    """Stack of relative-attention blocks (post-norm by default, as the original); state = memories.

    ``final_norm=None`` (the default) puts a LayerNorm after the last block only when the blocks are
    pre-norm: post-norm blocks already end in one, and the original has no other.
    ``relative_positions=False``: no position terms (the module docstring);
    ``shared_position_dropout``: one dropout mask on the relative encodings for all layers.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        n_layers: int,
        d_ff: int,
        mem_len: int = 0,
        dropout: float = 0.1,
        attn_dropout: float = 0.0,
        activation: str = "relu",
        norm_first: bool = False,
        d_head: int | None = None,
        clamp_len: int | None = None,
        final_norm: bool | None = None,
        qkv_bias: bool = False,
        norm_eps: float = 1e-5,
        relative_positions: bool = True,
        shared_position_dropout: bool = True,
    ) -> None:
        d_head = d_head or d_model // n_heads
        r_w_bias = nn.Parameter(torch.randn(n_heads, d_head) * 0.02) if relative_positions else None
        r_r_bias = nn.Parameter(torch.randn(n_heads, d_head) * 0.02) if relative_positions else None
        mixers = [
            RelativeAttention(
                d_model,
                n_heads,
                d_head,
                mem_len,
                r_w_bias,
                r_r_bias,
                dropout,
                attn_dropout,
                clamp_len,
                qkv_bias=qkv_bias,
            )
            for _ in range(n_layers)
        ]
        # Post-norm blocks already end in a LayerNorm; pre-norm needs one after the last block.
        final_norm = norm_first if final_norm is None else final_norm
        super().__init__(mixers, d_model, d_ff, dropout, activation, norm_first, final_norm, norm_eps)
        self.mem_len, self.clamp_len = mem_len, clamp_len
        self.shared_position_dropout = shared_position_dropout and relative_positions
        self.position_dropout = nn.Dropout(dropout)

    def forward(
        self, x: Tensor, state: list[Tensor] | None = None, reinject: Tensor | None = None
    ) -> tuple[Tensor, list[Tensor]]:
        if not self.shared_position_dropout:
            return super().forward(x, state, reinject)
        # Transformer-XL's _forward: pos_emb = self.drop(pos_emb), once, then every layer reads it.
        # Every layer's memory holds as many tokens (the last mem_len of its inputs).
        n_keys = x.shape[1] + (state[0].shape[1] if state else 0)
        sinusoids = relative_sinusoids(n_keys, self.d_model, self.clamp_len, x.device).to(x.dtype)
        return super().forward(x, state, reinject, positions=self.position_dropout(sinusoids))

    def step(
        self, x_t: Tensor, state: list[Tensor], reinject: Tensor | None = None
    ) -> tuple[Tensor, list[Tensor]]:
        """``forward`` on a one-token segment (each layer's step is that too), so that the layers
        share one dropout mask here as well."""
        y, state = self.forward(x_t.unsqueeze(1), state, None if reinject is None else reinject.unsqueeze(1))
        return y.squeeze(1), state

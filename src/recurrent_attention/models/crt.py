"""Compact Recurrent Transformer (Mucllari et al. 2025): one persistent memory vector between segments.

A sequence is processed in segments of ``seg_len`` tokens. Each segment is prefixed by one memory
token ``m`` and goes through a causal Transformer (the same blocks as the baseline, with no
absolute or relative position terms in attention: A_ij = x_i^T W_q^T W_k x_j):

1. positions: a positional RNN reads ``[m; x_1..x_n]`` from its carried state; its outputs are
   added to those tokens, so order is encoded recurrently, across segment boundaries too;
2. attention: causal over ``[m; x_1..x_n]``; the memory token is updated like any token in every
   layer, and its output in the last layer is dropped (the segment's outputs are ``y_1..y_n``);
3. memory: a memory RNN (GRU or NCGRU) reads ``y_1..y_n`` starting from ``m``; its last hidden
   state is the next segment's memory token.

State = ``(memory, positional RNN state, buffer)``. ``forward`` splits ``x`` into segments and,
with ``bptt=True``, keeps the graph through the memory so gradients reach earlier segments (the
caller truncates by detaching the state; the LM module does so every ``task.bptt_segments``
segments); with ``bptt=False`` the state is detached at every segment boundary. A trailing
partial segment is kept in ``buffer`` (at most ``seg_len - 1`` tokens, so the state is bounded)
and completed by the next call; ``step`` appends one token to the buffer and recomputes that
partial segment, which is exactly ``forward``'s output for the token.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from recurrent_attention.models.base import Backbone
from recurrent_attention.models.ncgru import make_rnn
from recurrent_attention.models.transformer import Transformer


class CRTState(NamedTuple):
    """Memory token ``(B, d)``, positional RNN state ``(B, d)``, inputs of the open segment ``(B, k, d)``."""

    memory: Tensor
    position: Tensor
    buffer: Tensor


class CompactRecurrentTransformer(Backbone):
    def __init__(
        self,
        d_model: int,
        n_heads: int,
        n_layers: int,
        d_ff: int,
        seg_len: int,
        rnn: str = "ncgru",
        position_rnn: str = "gru",
        bptt: bool = True,
        dropout: float = 0.1,
        attn_dropout: float | None = None,
        activation: str = "gelu",
        norm_first: bool = False,
        ncgru_inverse: str = "neumann",
    ) -> None:
        super().__init__()
        self.d_model, self.seg_len, self.bptt = d_model, seg_len, bptt
        self.transformer = Transformer(
            d_model, n_heads, n_layers, d_ff, dropout, attn_dropout, activation, norm_first, final_norm=True
        )
        options = {"inverse": ncgru_inverse} if rnn == "ncgru" else {}
        self.memory_rnn = make_rnn(rnn, d_model, d_model, **options)
        position_options = {"inverse": ncgru_inverse} if position_rnn == "ncgru" else {}
        self.position_rnn = make_rnn(position_rnn, d_model, d_model, **position_options)

    def init_state(
        self, batch_size: int, device: torch.device | None = None, dtype: torch.dtype | None = None
    ) -> CRTState:
        dtype = dtype or next(self.parameters()).dtype
        zeros = torch.zeros(batch_size, self.d_model, device=device, dtype=dtype)
        return CRTState(
            zeros, zeros.clone(), torch.zeros(batch_size, 0, self.d_model, device=device, dtype=dtype)
        )

    def _segment(self, x: Tensor, memory: Tensor, position: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """One segment ``x (B, n, d)`` -> outputs ``(B, n, d)``, next memory, positional state after x."""
        tokens = torch.cat([memory.unsqueeze(1), x], dim=1)
        encodings, position = self.position_rnn(tokens, position)
        hidden, _ = self.transformer(tokens + encodings)
        outputs = hidden[:, 1:]
        _, memory = self.memory_rnn(outputs, memory)
        return outputs, memory, position

    def forward(self, x: Tensor, state: CRTState | None = None) -> tuple[Tensor, CRTState]:
        state = state if state is not None else self.init_state(x.shape[0], x.device, x.dtype)
        memory, position, buffer = state
        n_buffered = buffer.shape[1]
        tokens = torch.cat([buffer, x], dim=1) if n_buffered else x
        outputs = []
        for start in range(0, tokens.shape[1], self.seg_len):
            segment = tokens[:, start : start + self.seg_len]
            if not self.bptt:
                memory, position = memory.detach(), position.detach()
            y, next_memory, next_position = self._segment(segment, memory, position)
            outputs.append(y)
            if segment.shape[1] == self.seg_len:
                memory, position, buffer = next_memory, next_position, tokens[:, :0]
            else:
                buffer = segment
        y = torch.cat(outputs, dim=1)[:, n_buffered:]
        return y, CRTState(memory, position, buffer)

    def step(self, x_t: Tensor, state: CRTState) -> tuple[Tensor, CRTState]:
        y, state = self.forward(x_t.unsqueeze(1), state)
        return y[:, -1], state

"""Compact Recurrent Transformer (Mucllari et al. 2025): one persistent memory vector between segments.

A sequence is processed in segments of ``seg_len`` tokens. Each segment is prefixed by one memory
token ``m`` and goes through a causal Transformer (the same blocks as the baseline, with no
absolute or relative position terms in attention: A_ij = x_i^T W_q^T W_k x_j):

1. positions: a positional RNN reads ``[m; x_1..x_n]`` from a zero state; its outputs are added
   to those tokens, so order (and the memory token's place) is encoded recurrently;
2. attention: causal over ``[m; x_1..x_n]``; the memory token is updated like any token in every
   layer, and its output in the last layer is dropped (the segment's outputs are ``y_1..y_n``);
3. memory: a memory RNN (GRU or NCGRU) reads ``y_1..y_n`` starting from ``m``; its last hidden
   state is the next segment's memory token.

The positional RNN starts from zero in every segment by default (``reset_positions=True``): the
paper has a segment depend on earlier ones "through the memory token" (its gradient analysis
follows no other path) and calls the positional RNN an encoding of "the position of a token in a
segment". ``reset_positions=False`` carries the positional state across segments instead, which
opens a second, content-dependent path from earlier segments and a second carried vector.

The blocks take the Transformer's options (``final_norm``, ``qkv_bias``, ``norm_eps``; defaults as
the Transformer's), so a protocol that fixes them (THP's encoder for event forecasting) holds for
CRT as for the baseline. ``txl_blocks=True`` builds Transformer-XL's blocks instead (its code, which
the CRT paper's baseline is: no output bias in attention, one dropout mask on the relative
encodings for all layers), without position terms while the positional RNN is on: the score is
then the paper's ``E^T W_q^T W_k E`` (with ``qkv_bias=False``). In ``model=paper/crt`` (CRT as the
paper's text describes it, under either protocol) every row of Table 8 builds these blocks, so the
rows differ only in the part each removes.

Both parts can be switched off (CRT Table 8's ablation): ``memory_token=False`` drops the memory
token and its RNN, so every segment is processed alone; ``recurrent_positions=False`` drops the
positional RNN and the caller adds the Transformer's sinusoidal positions instead (the LM config
derives ``absolute_positions`` from this switch). With both off the model is the plain
Transformer applied segment by segment, with the same parameters and the same initial weights.
``relative_positions=True`` (only without the positional RNN, with ``txl_blocks``) gives those
blocks Transformer-XL's relative attention, with no memory: the paper's baseline Transformer has relative
positions (its section 3) and Table 8 starts from it, so in ``model=paper/crt`` the rows without
the RNN positional encoding keep the baseline's positions, and with both parts off the model is that
baseline (``model=paper/transformer``), weight for weight.

State = ``(memory, positional RNN state, buffer)``; a part that is off (or reset) keeps its entry
at zero. ``forward`` splits ``x`` into segments and, with ``bptt=True``, keeps the graph through
the memory so gradients reach earlier segments (the caller truncates by detaching the state; the
LM module does so every ``task.bptt_segments`` segments); with ``bptt=False`` the state is
detached at every segment boundary. A trailing partial segment is kept in ``buffer`` (at most
``seg_len - 1`` tokens, so the state is bounded) and completed by the next call; ``step`` appends
one token to the buffer and recomputes that partial segment, which is exactly ``forward``'s
output for the token.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor, nn

from recurrent_attention.models.base import Backbone
from recurrent_attention.models.ncgru import make_rnn
from recurrent_attention.models.transformer import Transformer
from recurrent_attention.models.transformer_xl import TransformerXL


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
        memory_token: bool = True,
        recurrent_positions: bool = True,
        reset_positions: bool = True,
        relative_positions: bool = False,
        txl_blocks: bool = False,
        final_norm: bool = True,
        qkv_bias: bool = True,
        norm_eps: float = 1e-5,
    ) -> None:
        super().__init__()
        if relative_positions and recurrent_positions:
            raise ValueError(
                "model.relative_positions=true replaces the positional RNN: "
                "set model.recurrent_positions=false"
            )
        if relative_positions and not txl_blocks:
            raise ValueError(
                "model.relative_positions=true is Transformer-XL's attention: set model.txl_blocks=true"
            )
        self.d_model, self.seg_len, self.bptt = d_model, seg_len, bptt
        self.reset_positions = reset_positions
        # Built first so that, with both parts off, the initial weights are the plain Transformer's.
        blocks = {
            "dropout": dropout,
            "attn_dropout": dropout if attn_dropout is None else attn_dropout,
            "activation": activation,
            "norm_first": norm_first,
            "final_norm": final_norm,
            "qkv_bias": qkv_bias,
            "norm_eps": norm_eps,
        }
        if txl_blocks:
            blocks["relative_positions"] = relative_positions
        self.transformer = (TransformerXL if txl_blocks else Transformer)(
            d_model, n_heads, n_layers, d_ff, **blocks
        )
        self.memory_rnn = self._rnn(rnn, ncgru_inverse) if memory_token else None
        self.position_rnn = self._rnn(position_rnn, ncgru_inverse) if recurrent_positions else None

    def _rnn(self, kind: str, ncgru_inverse: str) -> nn.Module:
        options = {"inverse": ncgru_inverse} if kind == "ncgru" else {}
        return make_rnn(kind, self.d_model, self.d_model, **options)

    def init_state(
        self, batch_size: int, device: torch.device | None = None, dtype: torch.dtype | None = None
    ) -> CRTState:
        dtype = dtype or next(self.parameters()).dtype
        zeros = torch.zeros(batch_size, self.d_model, device=device, dtype=dtype)
        return CRTState(
            zeros, zeros.clone(), torch.zeros(batch_size, 0, self.d_model, device=device, dtype=dtype)
        )

    def _segment(self, x: Tensor, memory: Tensor, position: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """One segment ``x (B, n, d)`` -> outputs ``(B, n, d)``, next memory, next positional state."""
        tokens = x if self.memory_rnn is None else torch.cat([memory.unsqueeze(1), x], dim=1)
        if self.position_rnn is not None:
            start = torch.zeros_like(position) if self.reset_positions else position
            encodings, end = self.position_rnn(tokens, start)
            tokens = tokens + encodings
            position = position if self.reset_positions else end
        hidden, _ = self.transformer(tokens)
        if self.memory_rnn is None:
            return hidden, memory, position
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

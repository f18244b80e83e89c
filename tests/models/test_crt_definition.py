"""CRT held to its written-out definition (the paper's section 3), token by token, in every
configuration the class supports: values and gradients.

The definition, per segment ``x_1..x_n`` with memory ``m`` (zero before the first segment):
1. memory token: the Transformer reads ``[m; x_1..x_n]`` (``[x_1..x_n]`` without a memory token);
2. recurrent positions: a positional RNN steps over those tokens from a zero state (or, with
   ``reset_positions=False``, from where the previous segment left it), and its hidden state at each
   token is *added* to that token;
3. Transformer: causal, so each token's output is the Transformer's output at the last of the
   tokens up to it; the memory token's output is dropped;
4. memory update: a memory RNN steps over the segment's Transformer outputs ``y_1..y_n``, starting
   from the previous memory ``m``; its last hidden state is the next segment's memory.
A trailing partial segment is computed the same way and changes no memory. With ``bptt=False``
the memory (and carried positions) are detached at each segment boundary.

Nothing here calls CRT's own segment code: each RNN is stepped one token at a time
(``rnn(x_t[:, None], h)``) and the Transformer is run on each prefix of the segment's tokens
separately. So a CRT whose memory RNN read the segment's inputs, started from zeros,
or whose positions replaced the tokens, fails here.
"""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from recurrent_attention.models.crt import CompactRecurrentTransformer

D = 8
SEG_LEN = 3
N = 8  # two full segments and a partial one


def naive_crt(model: CompactRecurrentTransformer, x: Tensor) -> Tensor:
    """CRT's outputs for ``x (B, N, d)`` by the definition above, one token at a time."""
    batch = x.shape[0]
    memory = x.new_zeros(batch, D)
    carried_position = x.new_zeros(batch, D)
    outputs: list[Tensor] = []
    for start in range(0, x.shape[1], SEG_LEN):
        segment = [x[:, t] for t in range(start, min(start + SEG_LEN, x.shape[1]))]
        if not model.bptt:
            memory, carried_position = memory.detach(), carried_position.detach()
        tokens = ([memory] if model.memory_rnn is not None else []) + segment
        if model.position_rnn is not None:
            h = x.new_zeros(batch, D) if model.reset_positions else carried_position
            encoded = []
            for token in tokens:
                _, h = model.position_rnn(token[:, None], h)
                encoded.append(token + h)
            tokens = encoded
            next_position = h
        hidden = [
            model.transformer(torch.stack(tokens[: t + 1], dim=1))[0][:, -1] for t in range(len(tokens))
        ]
        if model.memory_rnn is not None:
            hidden = hidden[1:]
        outputs.extend(hidden)
        if len(segment) == SEG_LEN:
            if model.memory_rnn is not None:
                h = memory
                for y_t in hidden:
                    _, h = model.memory_rnn(y_t[:, None], h)
                memory = h
            if model.position_rnn is not None and not model.reset_positions:
                carried_position = next_position
    return torch.stack(outputs, dim=1)


CONFIGS = {
    "ncgru": {},
    "gru": {"rnn": "gru"},
    "gru_eq4": {"rnn": "gru_eq4", "position_rnn": "gru_eq4"},
    "ncgru positions": {"position_rnn": "ncgru"},
    "carried positions": {"reset_positions": False},
    "no bptt": {"bptt": False},
    "pre-norm": {"norm_first": True},
    "no memory token": {"memory_token": False},
    "no positional rnn": {"recurrent_positions": False},
    "relative positions": {"recurrent_positions": False, "relative_positions": True, "txl_blocks": True},
    "memory + relative positions": {
        "rnn": "gru",
        "recurrent_positions": False,
        "relative_positions": True,
        "txl_blocks": True,
    },
    # the paper's reading (model=paper/crt): Transformer-XL's blocks, no biases, no final norm
    "txl blocks": {"txl_blocks": True, "qkv_bias": False, "final_norm": False, "rnn": "gru_eq4"},
    "txl blocks, no memory token": {"txl_blocks": True, "qkv_bias": False, "memory_token": False},
    "ncgru cayley inverse": {"ncgru_inverse": "exact"},
}


def _model(options: dict) -> CompactRecurrentTransformer:
    torch.manual_seed(0)
    kwargs = dict(d_model=D, n_heads=2, n_layers=2, d_ff=16, seg_len=SEG_LEN, dropout=0.0) | options
    return CompactRecurrentTransformer(**kwargs).double().train()


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_crt_equals_its_written_out_definition(name: str) -> None:
    model = _model(CONFIGS[name])
    x = torch.randn(2, N, D, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    upstream = torch.randn(2, N, D, dtype=torch.float64, generator=torch.Generator().manual_seed(2))

    def values_and_gradients(run) -> tuple[Tensor, list[Tensor]]:
        model.zero_grad()
        inputs = x.clone().requires_grad_()
        out = run(inputs)
        (out * upstream).sum().backward()
        grads = [inputs.grad] + [
            p.grad if p.grad is not None else torch.zeros_like(p) for p in model.parameters()
        ]
        return out.detach(), grads

    ours, our_grads = values_and_gradients(lambda inputs: model(inputs)[0])
    truth, true_grads = values_and_gradients(lambda inputs: naive_crt(model, inputs))
    torch.testing.assert_close(ours, truth, rtol=1e-10, atol=1e-10)
    for ours_g, true_g in zip(our_grads, true_grads, strict=True):
        torch.testing.assert_close(ours_g, true_g, rtol=1e-9, atol=1e-9)


def test_the_definition_sees_segment_one_in_segment_three() -> None:
    """The test above is only as good as its definition: the memory must matter in it (a naive CRT
    that dropped the memory would agree with a CRT that dropped it too)."""
    model = _model({})
    x = torch.randn(1, N, D, dtype=torch.float64)
    changed = x.clone()
    changed[:, 0] += 1.0
    with torch.no_grad():
        late = naive_crt(model, x)[:, 2 * SEG_LEN :]
        late_changed = naive_crt(model, changed)[:, 2 * SEG_LEN :]
    assert (late - late_changed).abs().max() > 1e-6

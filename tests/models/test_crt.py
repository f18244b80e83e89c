"""CRT: causal inside a segment, memory carries segment 1 into segment 2, BPTT through the memory."""

from __future__ import annotations

import pytest
import torch

from recurrent_attention.models.crt import CompactRecurrentTransformer


def _model(seg_len: int = 5, rnn: str = "ncgru", bptt: bool = True) -> CompactRecurrentTransformer:
    torch.manual_seed(0)
    return CompactRecurrentTransformer(
        d_model=16, n_heads=2, n_layers=2, d_ff=32, seg_len=seg_len, rnn=rnn, bptt=bptt, dropout=0.0
    ).eval()


@pytest.mark.parametrize("rnn", ["ncgru", "gru"])
def test_causal_inside_a_segment(rnn):
    model = _model(seg_len=8, rnn=rnn)
    x = torch.randn(2, 8, 16)
    y, _ = model(x)
    for t in (0, 3, 7):
        changed = x.clone()
        changed[:, t] += 1.0
        y_changed, _ = model(changed)
        assert torch.equal(y[:, :t], y_changed[:, :t])
        assert not torch.allclose(y[:, t], y_changed[:, t])


def test_memory_from_segment_one_changes_segment_two():
    model = _model()
    x2 = torch.randn(2, 5, 16)
    _, state_a = model(torch.randn(2, 5, 16))
    _, state_b = model(torch.randn(2, 5, 16))
    y_a, _ = model(x2, state_a)
    y_b, _ = model(x2, state_b)
    assert not torch.allclose(y_a, y_b, atol=1e-4)
    assert state_a.buffer.shape[1] == 0  # a complete segment leaves nothing open


@pytest.mark.parametrize("bptt", [True, False])
def test_gradient_reaches_segment_one_only_with_bptt(bptt):
    model = _model(bptt=bptt)
    x1 = torch.randn(1, 5, 16, requires_grad=True)
    _, state = model(x1)
    y2, _ = model(torch.randn(1, 5, 16), state)
    y2.sum().backward()
    reached = x1.grad is not None and x1.grad.abs().sum() > 0
    assert reached == bptt


def test_long_input_equals_segment_by_segment_and_step_by_step():
    model = _model(seg_len=4)
    x = torch.randn(2, 11, 16)
    y, state = model(x)
    pieces, piece_state = [], None
    for start in range(0, 11, 4):
        piece, piece_state = model(x[:, start : start + 4], piece_state)
        pieces.append(piece)
    assert torch.allclose(y, torch.cat(pieces, dim=1), atol=1e-5)
    step_state = model.init_state(2)
    for t in range(11):
        y_t, step_state = model.step(x[:, t], step_state)
        assert torch.allclose(y_t, y[:, t], atol=1e-5)
        assert step_state.buffer.shape[1] == (t + 1) % 4  # bounded: the open segment only
    assert torch.allclose(step_state.memory, state.memory, atol=1e-5)

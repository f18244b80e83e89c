"""CRT: memory carries segment 1 into segment 2, BPTT through the memory, a bounded open segment;
the Table 8 switches remove exactly their part, and a reset positional RNN links no segments.
The contract every backbone keeps (causality, step, carried state) is test_backbone_contract's."""

from __future__ import annotations

import pytest
import torch

from recurrent_attention.models.crt import CompactRecurrentTransformer
from recurrent_attention.models.transformer import Transformer


def _model(
    seg_len: int = 5, rnn: str = "ncgru", bptt: bool = True, reset_positions: bool = True
) -> CompactRecurrentTransformer:
    torch.manual_seed(0)
    return CompactRecurrentTransformer(
        d_model=16,
        n_heads=2,
        n_layers=2,
        d_ff=32,
        seg_len=seg_len,
        rnn=rnn,
        bptt=bptt,
        dropout=0.0,
        reset_positions=reset_positions,
    ).eval()


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


def test_step_keeps_only_the_open_segment():
    """The state stays bounded: at most ``seg_len - 1`` inputs of the open segment, emptied when it
    completes (test_backbone_contract holds step to ``forward``)."""
    model = _model(seg_len=4)
    state = model.init_state(2)
    with torch.no_grad():
        for t in range(11):
            _, state = model.step(torch.randn(2, 16), state)
            assert state.buffer.shape[1] == (t + 1) % 4


def _gru_parameters(d: int) -> int:
    """nn.GRU(d, d): three gates, each with input and hidden weights and two biases."""
    return 3 * (2 * d * d + 2 * d)


def _ncgru_parameters(d: int) -> int:
    """NCGRU(d, d): input projection (3 gates + bias), 2 hidden gates, skew matrix, modReLU bias."""
    return (3 * d * d + 3 * d) + 2 * d * d + d * d + d


@pytest.mark.parametrize("memory_token", [True, False])
@pytest.mark.parametrize("recurrent_positions", [True, False])
def test_each_switch_removes_exactly_its_rnn(memory_token, recurrent_positions):
    torch.manual_seed(0)
    model = CompactRecurrentTransformer(
        d_model=16,
        n_heads=2,
        n_layers=2,
        d_ff=32,
        seg_len=5,
        memory_token=memory_token,
        recurrent_positions=recurrent_positions,
    )
    transformer = Transformer(16, 2, 2, 32)
    expected = sum(p.numel() for p in transformer.parameters())
    expected += _ncgru_parameters(16) if memory_token else 0
    expected += _gru_parameters(16) if recurrent_positions else 0
    assert sum(p.numel() for p in model.parameters()) == expected
    assert (model.memory_rnn is not None) == memory_token
    assert (model.position_rnn is not None) == recurrent_positions


def test_both_parts_off_is_the_transformer_segment_by_segment():
    torch.manual_seed(0)
    transformer = Transformer(16, 2, 2, 32, dropout=0.0).eval()
    torch.manual_seed(0)
    model = CompactRecurrentTransformer(
        16, 2, 2, 32, seg_len=5, dropout=0.0, memory_token=False, recurrent_positions=False
    ).eval()
    theirs = transformer.state_dict()
    ours = model.transformer.state_dict()
    assert ours.keys() == theirs.keys()
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)  # same initial weights too
    x = torch.randn(2, 10, 16)
    y, _ = model(x)
    alone = torch.cat([transformer(x[:, :5])[0], transformer(x[:, 5:])[0]], dim=1)
    assert torch.allclose(y, alone, atol=1e-6)


def _with_constant_memory(model: CompactRecurrentTransformer) -> CompactRecurrentTransformer:
    """Zero every weight of the memory GRU: from a zero state its output stays zero, whatever it reads."""
    with torch.no_grad():
        for p in model.memory_rnn.parameters():
            p.zero_()
    return model


def _segment_two_outputs(model: CompactRecurrentTransformer) -> tuple[torch.Tensor, torch.Tensor]:
    """Segment 2's outputs after two different first segments."""
    torch.manual_seed(1)
    x1_a, x1_b, x2 = torch.randn(2, 5, 16), torch.randn(2, 5, 16), torch.randn(2, 5, 16)
    _, state_a = model(x1_a)
    _, state_b = model(x1_b)
    return model(x2, state_a)[0], model(x2, state_b)[0]


def _ablation_model(memory_token: bool, reset_positions: bool) -> CompactRecurrentTransformer:
    torch.manual_seed(0)
    return CompactRecurrentTransformer(
        16,
        2,
        2,
        32,
        seg_len=5,
        rnn="gru",
        dropout=0.0,
        memory_token=memory_token,
        reset_positions=reset_positions,
    ).eval()


@pytest.mark.parametrize("reset_positions", [True, False])
def test_with_the_memory_held_constant_only_a_carried_positional_state_links_segments(reset_positions):
    y_a, y_b = _segment_two_outputs(_with_constant_memory(_ablation_model(True, reset_positions)))
    if reset_positions:
        assert torch.equal(y_a, y_b)
    else:
        assert not torch.allclose(y_a, y_b, atol=1e-4)


@pytest.mark.parametrize("reset_positions", [True, False])
def test_without_memory_token_segments_are_independent_only_when_positions_reset(reset_positions):
    model = _ablation_model(False, reset_positions)
    y_a, y_b = _segment_two_outputs(model)
    assert torch.equal(y_a, y_b) == reset_positions
    _, state = model(torch.randn(2, 5, 16))
    assert torch.equal(state.memory, torch.zeros(2, 16))  # nothing is carried where the part is off
    assert torch.equal(state.position, torch.zeros(2, 16)) == reset_positions


def test_with_reset_positions_the_memory_still_links_segments():
    y_a, y_b = _segment_two_outputs(_ablation_model(True, reset_positions=True))
    assert not torch.allclose(y_a, y_b, atol=1e-4)


def test_memory_on_the_baselines_relative_attention_steps_as_it_runs():
    """Table 8's "Transformer + RNN memory" under the paper's models: the memory token in
    Transformer-XL's relative attention (no memory of its own) still links segments, and ``step``
    equals ``forward``; relative positions replace the positional RNN, never join it."""
    torch.manual_seed(0)
    options = {
        "seg_len": 3,
        "dropout": 0.0,
        "recurrent_positions": False,
        "relative_positions": True,
        "txl_blocks": True,
    }
    model = CompactRecurrentTransformer(16, 2, 2, 32, **options).eval()
    x = torch.randn(2, 7, 16)
    with torch.no_grad():
        y, _ = model(x)
        alone, _ = model(x[:, 3:6])
        stepped, state = [], model.init_state(2)
        for t in range(7):
            y_t, state = model.step(x[:, t], state)
            stepped.append(y_t)
    assert not torch.allclose(y[:, 3:6], alone, atol=1e-4)  # segment 1 reaches segment 2
    torch.testing.assert_close(torch.stack(stepped, dim=1), y, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match=r"model\.recurrent_positions=false"):
        CompactRecurrentTransformer(16, 2, 2, 32, seg_len=3, relative_positions=True, txl_blocks=True)
    with pytest.raises(ValueError, match=r"model\.txl_blocks=true"):
        CompactRecurrentTransformer(
            16, 2, 2, 32, seg_len=3, recurrent_positions=False, relative_positions=True
        )


@pytest.mark.parametrize("inverse", ["exact", "neumann"])
def test_ncgru_inverse_reaches_both_ncgru_cells(inverse: str) -> None:
    model = CompactRecurrentTransformer(
        8, 2, 1, 16, 4, rnn="ncgru", position_rnn="ncgru", ncgru_inverse=inverse
    )
    assert model.memory_rnn.inverse == model.position_rnn.inverse == inverse


def test_init_state_takes_the_models_dtype() -> None:
    model = _model().double()
    assert all(t.dtype == torch.float64 for t in model.init_state(2))
    assert all(t.dtype == torch.float32 for t in model.init_state(2, dtype=torch.float32))

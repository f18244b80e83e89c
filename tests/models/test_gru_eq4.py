"""CRT's equation (4) GRU: a step by hand, and why nn.GRU is not it."""

from __future__ import annotations

import math

import pytest
import torch

from recurrent_attention.models.ncgru import GRU, NCGRU, EquationFourGRU, make_rnn

# Hand-picked weights, rows per hidden unit: W_* (2 x 2 inputs), U_* (2 x 2), one bias per gate.
W = {"r": [[0.1, 0.2], [-0.3, 0.4]], "u": [[0.5, -0.1], [0.2, 0.3]], "c": [[-0.2, 0.1], [0.4, -0.5]]}
U = {"r": [[0.3, -0.2], [0.1, 0.4]], "u": [[-0.1, 0.2], [0.3, -0.3]], "c": [[0.6, -0.4], [0.2, 0.5]]}
B = {"r": [0.1, -0.1], "u": [0.0, 0.2], "c": [0.05, -0.05]}


def _matvec(m: list[list[float]], v: list[float]) -> list[float]:
    return [sum(a * b for a, b in zip(row, v, strict=True)) for row in m]


def _sigmoid(z: float) -> float:
    return 1.0 / (1.0 + math.exp(-z))


def _step_by_hand(x: list[float], h: list[float]) -> list[float]:
    """Equation (4) in plain floats: the reset gate multiplies h BEFORE U_c."""
    r, u = (
        [_sigmoid(a + b + c) for a, b, c in zip(_matvec(W[g], x), _matvec(U[g], h), B[g], strict=True)]
        for g in "ru"
    )
    reset_h = [ri * hi for ri, hi in zip(r, h, strict=True)]
    c_in = zip(_matvec(W["c"], x), _matvec(U["c"], reset_h), B["c"], strict=True)
    c = [math.tanh(a + b + bias) for a, b, bias in c_in]
    return [(1 - ui) * hi + ui * ci for ui, hi, ci in zip(u, h, c, strict=True)]


def _exact(values: list) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


def _cell() -> EquationFourGRU:
    cell = EquationFourGRU(2, 2).double()
    with torch.no_grad():
        cell.input_proj.weight.copy_(_exact(W["r"] + W["u"] + W["c"]))
        cell.input_proj.bias.copy_(_exact(B["r"] + B["u"] + B["c"]))
        cell.gate_proj.weight.copy_(_exact(U["r"] + U["u"]))
        cell.candidate_proj.weight.copy_(_exact(U["c"]))
    return cell


def test_two_steps_match_equation_4_by_hand() -> None:
    xs, h0 = [[1.0, -2.0], [0.5, 0.25]], [0.5, -0.25]
    h1 = _step_by_hand(xs[0], h0)
    h2 = _step_by_hand(xs[1], h1)
    outputs, last = _cell()(_exact([xs]), _exact([h0]))
    torch.testing.assert_close(outputs[0], _exact([h1, h2]), rtol=0, atol=1e-15)
    torch.testing.assert_close(last[0], _exact(h2), rtol=0, atol=1e-15)


def test_nn_gru_with_the_same_weights_is_another_cell() -> None:
    """nn.GRU puts the reset after U_h (r * (U_h h)): with equation (4)'s weights and zero second
    biases it gives another state, so a GRU row built on it is not the paper's GRU."""
    x, h0 = [1.0, -2.0], [0.5, -0.25]
    torch_gru = torch.nn.GRUCell(2, 2).double()
    with torch.no_grad():
        torch_gru.weight_ih.copy_(_exact(W["r"] + W["u"] + W["c"]))
        torch_gru.bias_ih.copy_(_exact(B["r"] + B["u"] + B["c"]))
        torch_gru.weight_hh.copy_(_exact(U["r"] + U["u"] + U["c"]))
        torch_gru.bias_hh.zero_()
    torch_h1 = torch_gru(_exact([x]), _exact([h0]))[0]
    assert (torch_h1 - _exact(_step_by_hand(x, h0))).abs().max() > 1e-3


def test_one_bias_per_gate_as_table_1_counts() -> None:
    """Table 1's CRT term (12 + ...)d² + (6 + ...)d is two GRUs of 6d² + 3d; nn.GRU has 6d² + 6d."""
    d = 7
    count = sum(p.numel() for p in make_rnn("gru_eq4", d, d).parameters())
    assert count == 6 * d**2 + 3 * d
    assert sum(p.numel() for p in make_rnn("gru", d, d).parameters()) == 6 * d**2 + 6 * d


def test_make_rnn_builds_the_cell_each_kind_names() -> None:
    assert isinstance(make_rnn("gru", 3, 4), GRU)
    assert isinstance(make_rnn("gru_eq4", 3, 4), EquationFourGRU)
    assert isinstance(make_rnn("ncgru", 3, 4, inverse="exact"), NCGRU)
    assert make_rnn("ncgru", 3, 4, inverse="exact").inverse == "exact"
    with pytest.raises(ValueError, match=r"model.rnn=.lstm.: choose one of gru, gru_eq4, ncgru"):
        make_rnn("lstm", 3, 4)

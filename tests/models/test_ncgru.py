"""NCGRU: W stays orthogonal through optimiser steps; the Neumann inverse and its gradient are exact."""

from __future__ import annotations

import pytest
import torch
from torch.utils import flop_counter

from recurrent_attention.models.ncgru import GRU, NCGRU, EquationFourGRU, mod_relu, neumann_inverse


def _orthogonality_error(W: torch.Tensor) -> float:
    return float((W.mT @ W - torch.eye(W.shape[0])).abs().max())


def _train_steps(cell: NCGRU, steps: int, lr: float) -> None:
    torch.manual_seed(1)
    optimizer = torch.optim.Adam(cell.parameters(), lr=lr)
    x = torch.randn(4, 6, cell.input_size)
    for _ in range(steps):
        outputs, _ = cell(x)
        loss = (outputs - 0.5).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def test_w_stays_orthogonal_after_optimizer_steps_with_neumann_refresh():
    torch.manual_seed(0)
    cell = NCGRU(5, 16, inverse="neumann")
    initial_inverse = cell.inverse_matrix.clone()
    _train_steps(cell, steps=30, lr=1e-3)
    with torch.no_grad():
        W = cell.recurrent_matrix()  # refreshes the inverse after the last step
        assert _orthogonality_error(W) < 1e-5
        eye, A = torch.eye(16), cell.skew_matrix()
        assert torch.allclose(W, torch.linalg.solve(eye + A, eye - A) * cell.signs, atol=1e-5)
        # The trained A with the initial inverse: without the refresh W would drift from orthogonal.
        assert _orthogonality_error(initial_inverse @ (eye - A) * cell.signs) > 1e-3


def test_exact_and_neumann_inverses_agree_for_small_a():
    torch.manual_seed(0)
    P = torch.randn(12, 12, dtype=torch.float64) * 0.03
    A = P - P.mT
    B = torch.eye(12, dtype=torch.float64) + A
    series = neumann_inverse(torch.eye(12, dtype=torch.float64), B, terms=20)
    # With M = I the refresh is the classic series sum (-A)^k.
    by_hand = sum(torch.linalg.matrix_power(-A, k) for k in range(20))
    assert torch.allclose(series, by_hand, atol=1e-14)
    assert torch.allclose(series, torch.linalg.inv(B), atol=1e-12)


def test_neumann_and_exact_cells_agree_in_outputs_and_gradients():
    torch.manual_seed(0)
    neumann = NCGRU(3, 8, inverse="neumann").double()
    exact = NCGRU(3, 8, inverse="exact").double()
    exact.load_state_dict(neumann.state_dict())
    x = torch.randn(2, 5, 3, dtype=torch.float64)
    out_n, h_n = neumann(x)
    out_e, h_e = exact(x)
    assert torch.allclose(out_n, out_e, atol=1e-10) and torch.allclose(h_n, h_e, atol=1e-10)
    # The custom backward (dM = -M dA M) equals autograd through torch.linalg.solve.
    out_n.sum().backward()
    out_e.sum().backward()
    assert torch.allclose(neumann.skew.grad, exact.skew.grad, atol=1e-9)
    assert neumann.skew.grad.abs().max() > 0


def test_mod_relu_by_hand():
    z = torch.tensor([-2.0, -0.5, 0.0, 0.3, 1.0])
    b = torch.tensor([-1.0, -1.0, 0.5, 0.2, -2.0])
    assert torch.equal(mod_relu(z, b), torch.tensor([-1.0, -0.0, 0.0, 0.5, 0.0]))


def test_gru_wrapper_matches_cell_loop():
    torch.manual_seed(0)
    gru = GRU(3, 4)
    cell = torch.nn.GRUCell(3, 4)
    cell.load_state_dict({k.removesuffix("_l0"): v for k, v in gru.rnn.state_dict().items()})
    x, h = torch.randn(2, 5, 3), torch.randn(2, 4)
    outputs, last = gru(x, h)
    for t in range(5):
        h = cell(x[:, t], h)
        assert torch.allclose(outputs[:, t], h, atol=1e-6)
    assert torch.allclose(last, h, atol=1e-6)


def test_gru_is_nn_gru_drawn_from_the_same_seed_and_its_kernel() -> None:
    """The GRU holds nn.GRU's parameters outside an nn.GRU (for torch.compile): the same names, the
    same initial draw from a seed (earlier runs' weights), the same outputs and gradients."""
    torch.manual_seed(3)
    reference = torch.nn.GRU(3, 4, batch_first=True)
    torch.manual_seed(3)
    gru = GRU(3, 4)
    assert list(gru.rnn.state_dict()) == list(reference.state_dict())
    for ours, theirs in zip(gru.rnn.parameters(), reference.parameters(), strict=True):
        assert torch.equal(ours, theirs)
    x, h = torch.randn(2, 5, 3), torch.randn(2, 4)
    outputs, last = gru(x, h)
    expected, expected_last = reference(x, h.unsqueeze(0))
    assert torch.equal(outputs, expected) and torch.equal(last, expected_last.squeeze(0))
    (outputs.sum() + last.sum()).backward()
    (expected.sum() + expected_last.sum()).backward()
    for ours, theirs in zip(gru.rnn.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(ours.grad, theirs.grad)
    assert torch.equal(gru(x)[0], reference(x)[0])  # no initial state: zeros


def _forward_flops(cell: NCGRU, x: torch.Tensor) -> int:
    with flop_counter.FlopCounterMode(display=False) as counter:
        cell(x)
    return counter.get_total_flops()


@pytest.mark.parametrize("inverse", ["neumann", "exact"])
def test_inference_reuses_the_cayley_matrix_until_the_weights_change(inverse: str) -> None:
    torch.manual_seed(0)
    d = 16
    cell = NCGRU(5, d, inverse=inverse).double().eval()
    x = torch.randn(2, 3, 5, dtype=torch.float64)
    with torch.no_grad():
        first, second = _forward_flops(cell, x), _forward_flops(cell, x)
        cached = cell.recurrent_matrix()
        assert cell.recurrent_matrix() is cached
        if inverse == "neumann":  # (flop_counter has no formula for the exact solve)
            # The product (I + A)^-1 (I - A), 2 d^3 FLOPs, is not rebuilt.
            assert first - second == 2 * d**3
        cell.skew.add_(1e-4 * torch.randn(d, d, dtype=torch.float64))  # what an optimiser step does
        if inverse == "neumann":  # rebuilt, after refreshing the stored inverse
            assert _forward_flops(cell, x) - second > 2 * d**3
        assert cell.recurrent_matrix() is not cached
        eye, A = torch.eye(d, dtype=torch.float64), cell.skew_matrix()
        fresh = torch.linalg.solve(eye + A, eye - A) * cell.signs
        torch.testing.assert_close(cell.recurrent_matrix(), fresh, rtol=1e-9, atol=1e-12)
    # With gradients the matrix is rebuilt (part of the graph) and still correct.
    torch.testing.assert_close(cell.recurrent_matrix(), fresh, rtol=1e-9, atol=1e-12)
    assert cell.recurrent_matrix().requires_grad


def test_loading_weights_invalidates_the_cached_matrix() -> None:
    torch.manual_seed(0)
    cell, other = NCGRU(3, 8).double(), NCGRU(3, 8).double()
    with torch.no_grad():
        before = cell.recurrent_matrix()
        cell.load_state_dict(other.state_dict())
        torch.testing.assert_close(cell.recurrent_matrix(), other.recurrent_matrix())
        assert not torch.allclose(before, cell.recurrent_matrix())


@pytest.mark.parametrize("inverse", ["neumann", "exact"])
def test_ncgru_equals_equation_4_with_the_scaled_cayley_matrix_written_out(inverse: str) -> None:
    """The cell against equation (4) by hand: ``W = (I + A)^-1 (I - A) D`` from the parameter's upper
    triangle (``A = P - P^T``), ``D`` = -1 on the first ``round(0.5 d)`` units and +1 after, modReLU as
    Phi, from a given and from a zero state; values and the skew parameter's gradient."""
    torch.manual_seed(3)
    cell = NCGRU(3, 6, inverse=inverse).double()
    cell.refresh_inverse()  # the stored inverse, drawn in float32, to float64's precision
    x, h0 = torch.randn(2, 4, 3, dtype=torch.float64), torch.randn(2, 6, dtype=torch.float64)
    P = cell.skew.detach().clone().requires_grad_()
    A = P.triu(1) - P.triu(1).mT
    eye = torch.eye(6, dtype=torch.float64)
    D = torch.diag(torch.tensor([-1.0, -1.0, -1.0, 1.0, 1.0, 1.0], dtype=torch.float64))
    W = torch.linalg.inv(eye + A) @ (eye - A) @ D
    W_in, b_in = cell.input_proj.weight.detach().split(6), cell.input_proj.bias.detach().split(6)
    U_r, U_u = cell.gate_proj.weight.detach().split(6)
    for start in (h0, None):
        h, expected = (torch.zeros(2, 6, dtype=torch.float64) if start is None else start), []
        for t in range(4):
            r = torch.sigmoid(x[:, t] @ W_in[0].T + b_in[0] + h @ U_r.T)
            u = torch.sigmoid(x[:, t] @ W_in[1].T + b_in[1] + h @ U_u.T)
            z = x[:, t] @ W_in[2].T + b_in[2] + (r * h) @ W.T
            candidate = torch.sign(z) * torch.relu(z.abs() + cell.mod_bias.detach())
            h = (1 - u) * h + u * candidate
            expected.append(h)
        outputs, last = cell(x, start)
        torch.testing.assert_close(outputs, torch.stack(expected, 1), rtol=1e-10, atol=1e-10)
        torch.testing.assert_close(last, h, rtol=1e-10, atol=1e-10)
    outputs.sum().backward()
    torch.stack(expected, 1).sum().backward()
    torch.testing.assert_close(cell.skew.grad, P.grad, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("terms", [1, 2, 3])
def test_the_neumann_refresh_sums_exactly_its_terms(terms: int) -> None:
    """``terms`` terms of ``sum_k (-A)^k`` (from M = I), not one more or fewer: with a large A the
    truncation shows."""
    P = torch.randn(5, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(1)) * 0.3
    A = P - P.mT
    eye = torch.eye(5, dtype=torch.float64)
    by_hand = sum(torch.linalg.matrix_power(-A, k) for k in range(terms))
    torch.testing.assert_close(neumann_inverse(eye, eye + A, terms), by_hand, rtol=0, atol=1e-14)


@pytest.mark.parametrize(
    ("kept", "expected"),
    [
        (0.875, 1 - 0.125**4),  # ||I - M B||_F = 0.125 * 2 = 0.25 < 0.5: four terms of the series
        (0.75, 1.0),  # 0.25 * 2 = 0.5, not below it: the exact inverse
        (0.5, 1.0),  # 0.5 * 2 = 1: the exact inverse
    ],
)
def test_the_refresh_takes_four_terms_below_half_a_residual_and_the_exact_inverse_from_there(
    kept: float, expected: float
) -> None:
    """A = 0 (B = I) and a stored inverse M = c I, so the residual is (1 - c) I, of Frobenius norm
    2 (1 - c) for d = 4, and the default four terms of the series give ``c sum_{k<4} (1 - c)^k =
    1 - (1 - c)^4`` on the diagonal, by hand (every number is exact in binary). No config sets
    ``neumann_terms``: four is what every NCGRU runs."""
    cell = NCGRU(2, 4).double()
    with torch.no_grad():
        cell.skew.zero_()
        cell.inverse_matrix.copy_(kept * torch.eye(4, dtype=torch.float64))
    cell.refresh_inverse()
    assert torch.equal(cell.inverse_matrix, expected * torch.eye(4, dtype=torch.float64))


def test_the_inverse_is_refreshed_once_per_change_of_the_skew_parameter() -> None:
    """The refresh runs at the first forward after A changed in place, not at every forward."""
    torch.manual_seed(0)
    cell = NCGRU(3, 8)
    for _ in range(2):
        with torch.no_grad():
            cell.skew.add_(1e-3)  # what an optimiser step does
        before = cell.inverse_matrix._version
        cell.recurrent_matrix()
        refreshed = cell.inverse_matrix._version
        assert refreshed > before
        cell.recurrent_matrix()
        assert cell.inverse_matrix._version == refreshed


def _assert_uniform(values: torch.Tensor, bound: float) -> None:
    """Drawn from U(-bound, bound): none outside, and both ends reached within 5 % (thousands of draws)."""
    assert values.numel() >= 1000
    assert values.abs().max() <= bound
    assert values.min() < -0.95 * bound and values.max() > 0.95 * bound


@pytest.mark.parametrize("cell_class", [NCGRU, EquationFourGRU])
def test_gate_and_candidate_weights_start_uniform_within_one_over_root_d(cell_class: type) -> None:
    """PyTorch's GRU initialisation, U(-1/sqrt(d), 1/sqrt(d)) (d = 64: 1/8), for the W's, U_r, U_u,
    the biases and (equation (4)'s) U_c; NCGRU's modReLU bias from U(-0.01, 0.01)."""
    torch.manual_seed(0)
    cell = cell_class(16, 64)
    for p in (cell.input_proj.weight, cell.input_proj.bias.repeat(8), cell.gate_proj.weight):
        _assert_uniform(p.detach(), 1 / 8)
    if cell_class is EquationFourGRU:
        _assert_uniform(cell.candidate_proj.weight.detach(), 1 / 8)
    else:
        _assert_uniform(cell.mod_bias.detach().repeat(16), 0.01)


def test_the_skew_parameter_starts_as_its_strict_upper_triangle_with_std_half_over_root_d() -> None:
    """A = P - P^T from P's strictly upper triangle, drawn N(0, (0.5 / sqrt(d))^2): every entry above the
    diagonal nonzero, none on or below it, and the sample std within 5 % of 0.5 / 8 (d = 64: 2016 draws)."""
    torch.manual_seed(0)
    skew = NCGRU(3, 64).skew.detach()
    upper = torch.ones(64, 64, dtype=torch.bool).triu(1)
    assert (skew[upper] != 0).all() and (skew[~upper] == 0).all()
    assert abs(skew[upper].std() / (0.5 / 8) - 1) < 0.05


@pytest.mark.parametrize(("hidden", "fraction", "negative"), [(6, 0.5, 3), (7, 0.5, 4), (8, 0.25, 2)])
def test_the_cayley_signs_are_minus_one_on_the_first_round_fraction_d_units(
    hidden: int, fraction: float, negative: int
) -> None:
    """D's -1 entries: the first ``round(fraction d)`` (0.5 the default), then +1."""
    cell = NCGRU(3, hidden) if fraction == 0.5 else NCGRU(3, hidden, negative_fraction=fraction)
    expected = torch.cat([-torch.ones(negative), torch.ones(hidden - negative)])
    assert torch.equal(cell.signs, expected)

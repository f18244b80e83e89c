"""The recurrent cells of the Compact Recurrent Transformer: its equation (4), NCGRU and PyTorch's GRU.

CRT's GRU is its equation (4) (appendix B):

    r_t = sigma(W_r x_t + U_r h_{t-1} + b_r)        u_t = sigma(W_u x_t + U_u h_{t-1} + b_u)
    c_t = Phi(W_c x_t + U_c (r_t * h_{t-1}) + b_c)  h_t = (1 - u_t) * h_{t-1} + u_t * c_t

with the reset gate applied BEFORE U_c and one bias per gate (Table 1's ``(6 + 4L) d`` parameter
term counts exactly these: 3d per GRU, two GRUs). ``nn.GRU`` differs in both (``r * (U_h h + b_hn)``,
two biases per gate), so :class:`EquationFourGRU` (Phi = tanh, U_c a plain matrix) is the paper's
GRU and :class:`GRU` (``nn.GRU``, fused) is kept as the project's earlier reading.

NCGRU (Mucllari et al. 2022) is the same loop whose ``U_c`` is the scaled Cayley transform
``W = (I + A)^-1 (I - A) D`` of a skew-symmetric ``A`` (D a fixed diagonal of ±1), so W is
orthogonal and repeated multiplication by it neither explodes nor vanishes; Phi is modReLU.
Inverting ``I + A`` at every forward would cost O(d^3); instead
``M ≈ (I + A)^-1`` is kept as a buffer and refreshed after each optimiser step by a truncated
Neumann series around the previous M (the change of A per step is small, so a few terms give an
inverse exact to float precision). The gradient through M is the exact one, ``dM = -M dA M``.
Without gradients (inference), W itself is cached until the weights change: rebuilding it costs
``2 d^3`` FLOPs per forward, which at short segments is a large share of a CRT forward.

Nothing here reads a value back to the host (a GPU training step never waits for it), and the
training forward is one graph for ``torch.compile``: the refresh's choice between the series and
the exact inverse is made on the device (:meth:`NCGRU.refresh_inverse`), and the compiled graph,
which cannot read a parameter's version counter without breaking, refreshes at every forward.
:class:`GRU` calls ``nn.GRU``'s kernel on parameters held outside the ``nn.GRU`` module, which
``torch.compile`` refuses to trace.

Every cell has one interface: ``outputs, h_last = cell(x (B, N, d_in), h0 (B, d_hidden))``.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def neumann_inverse(M: Tensor, B: Tensor, terms: int) -> Tensor:
    """Approximate ``B^-1`` from a nearby inverse ``M`` with ``terms`` terms of the Neumann series.

    ``B^-1 = (M B)^-1 M = sum_k (I - M B)^k M``: with ``M = I`` this is the classic series of
    ``(I + A)^-1``; with M the previous step's inverse the residual is tiny and also absorbs any
    error left by earlier refreshes (the update is self-correcting).
    """
    residual = torch.eye(B.shape[-1], dtype=B.dtype, device=B.device) - M @ B
    term, total = M, M
    for _ in range(terms - 1):
        term = residual @ term
        total = total + term
    return total


class _InverseWithGradient(torch.autograd.Function):
    """Returns the stored inverse ``M`` of ``I + A`` and back-propagates ``dM = -M dA M`` into A."""

    @staticmethod
    def forward(ctx: Any, A: Tensor, M: Tensor) -> Tensor:
        ctx.save_for_backward(M)
        return M.clone()

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        (M,) = ctx.saved_tensors
        return -M.mT @ grad @ M.mT, None


def mod_relu(z: Tensor, bias: Tensor) -> Tensor:
    """``sign(z) relu(|z| + b)``: keeps the sign (phase) and thresholds the magnitude."""
    return torch.sign(z) * F.relu(z.abs() + bias)


class GatedRecurrence(nn.Module, ABC):
    """Equation (4)'s loop; subclasses give ``U_c`` (:meth:`candidate_matrix`) and ``Phi``.

    ``input_proj`` holds ``W_r, W_u, W_c`` and the one bias per gate ``b_r, b_u, b_c``;
    ``gate_proj`` holds ``U_r, U_u`` (no bias: equation (4) has none there).
    """

    def __init__(self, input_size: int, hidden_size: int) -> None:
        super().__init__()
        self.input_size, self.hidden_size = input_size, hidden_size
        self.input_proj = nn.Linear(input_size, 3 * hidden_size)  # reset, update, candidate
        self.gate_proj = nn.Linear(hidden_size, 2 * hidden_size, bias=False)  # U_r, U_u

    def reset_gates(self) -> None:
        """PyTorch's GRU initialisation, U(-1/sqrt(d), 1/sqrt(d)), for the W's, U_r, U_u and biases."""
        bound = 1.0 / math.sqrt(self.hidden_size)
        for p in (self.input_proj.weight, self.input_proj.bias, self.gate_proj.weight):
            nn.init.uniform_(p, -bound, bound)

    @abstractmethod
    def candidate_matrix(self) -> Tensor:
        """``U_c (hidden, hidden)``."""

    @abstractmethod
    def candidate_activation(self, z: Tensor) -> Tensor:
        """``Phi``."""

    def forward(self, x: Tensor, h: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """``x (B, N, input_size)``, ``h (B, hidden)`` -> outputs ``(B, N, hidden)`` and the last state."""
        if h is None:
            h = x.new_zeros(x.shape[0], self.hidden_size)
        U_c = self.candidate_matrix()
        inputs = self.input_proj(x)
        outputs = []
        for t in range(x.shape[1]):
            in_r, in_u, in_c = inputs[:, t].chunk(3, dim=-1)
            gate_r, gate_u = self.gate_proj(h).chunk(2, dim=-1)
            r, u = torch.sigmoid(in_r + gate_r), torch.sigmoid(in_u + gate_u)
            candidate = self.candidate_activation(in_c + (r * h) @ U_c.mT)
            h = (1 - u) * h + u * candidate
            outputs.append(h)
        return torch.stack(outputs, dim=1), h


class EquationFourGRU(GatedRecurrence):
    """CRT's GRU as its equation (4) writes it: a plain ``U_c`` after the reset gate, ``Phi = tanh``."""

    def __init__(self, input_size: int, hidden_size: int) -> None:
        super().__init__(input_size, hidden_size)
        self.candidate_proj = nn.Linear(hidden_size, hidden_size, bias=False)  # U_c
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.reset_gates()
        bound = 1.0 / math.sqrt(self.hidden_size)
        nn.init.uniform_(self.candidate_proj.weight, -bound, bound)

    def candidate_matrix(self) -> Tensor:
        return self.candidate_proj.weight

    def candidate_activation(self, z: Tensor) -> Tensor:
        return torch.tanh(z)


class NCGRU(GatedRecurrence):
    """Equation (4) with an orthogonal (scaled Cayley) ``U_c`` and modReLU as ``Phi``.

    ``inverse="neumann"`` keeps ``(I + A)^-1`` by the truncated Neumann refresh (``neumann_terms``
    terms; when the residual is too large for the series to converge, e.g. after a large step or a
    checkpoint load, the inverse is recomputed exactly); ``inverse="exact"`` solves every forward.
    The refresh runs at the next forward after the skew parameter changed in place (every
    optimiser does that), so no task needs a hook to keep W orthogonal; under ``torch.compile`` it
    runs at every training forward (a refresh of an up-to-date inverse returns it unchanged).
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        inverse: str = "neumann",
        neumann_terms: int = 4,
        negative_fraction: float = 0.5,
    ) -> None:
        if inverse not in ("neumann", "exact"):
            raise ValueError(f"inverse={inverse!r}: choose neumann or exact")
        super().__init__(input_size, hidden_size)
        self.inverse, self.neumann_terms = inverse, neumann_terms
        # A = P - P^T from the strictly upper triangle of P (the lower triangle gets no gradient).
        self.skew = nn.Parameter(torch.zeros(hidden_size, hidden_size))
        self.mod_bias = nn.Parameter(torch.empty(hidden_size).uniform_(-0.01, 0.01))
        n_negative = round(negative_fraction * hidden_size)
        signs = torch.ones(hidden_size)
        signs[:n_negative] = -1.0
        self.register_buffer("signs", signs)
        self.register_buffer("inverse_matrix", torch.eye(hidden_size))
        self._seen_version: int | None = None
        self._cached_matrix: Tensor | None = None
        self._cached_key: tuple | None = None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.reset_gates()
        bound = 1.0 / math.sqrt(self.hidden_size)
        with torch.no_grad():
            # A small random skew matrix: W starts near the ±1 diagonal, a well-conditioned rotation.
            self.skew.copy_(torch.randn(self.hidden_size, self.hidden_size).triu(1) * bound * 0.5)
            self.inverse_matrix.copy_(torch.linalg.inv(self._identity_plus_skew()))
        self._seen_version = self.skew._version

    def skew_matrix(self) -> Tensor:
        upper = self.skew.triu(1)
        return upper - upper.mT

    def _identity_plus_skew(self) -> Tensor:
        eye = torch.eye(self.hidden_size, dtype=self.skew.dtype, device=self.skew.device)
        return eye + self.skew_matrix()

    @torch.no_grad()
    def refresh_inverse(self) -> None:
        """Bring the stored ``(I + A)^-1`` up to date with the current A (truncated Neumann series).

        The series converges when ``||I - M B|| < 1`` in a sub-multiplicative norm; the Frobenius
        norm bounds the spectral one from above, so ``< 0.5`` in it is a safe test that needs no
        SVD. Where it fails (a large step, a loaded checkpoint) the exact inverse is taken. Both are
        formed and ``torch.where`` picks one on the device, so the step never waits for the test
        (``inv_ex`` skips the error check that would: ``I + A`` with A skew is always invertible).
        """
        B = self._identity_plus_skew()
        M = self.inverse_matrix
        eye = torch.eye(self.hidden_size, dtype=B.dtype, device=B.device)
        converges = torch.linalg.matrix_norm(eye - M @ B) < 0.5
        exact = torch.linalg.inv_ex(B).inverse
        self.inverse_matrix.copy_(torch.where(converges, neumann_inverse(M, B, self.neumann_terms), exact))
        if not torch.compiler.is_compiling():
            self._seen_version = self.skew._version

    def _weights_key(self) -> tuple:
        """Changes whenever W could: an in-place update, a load, or a move to another device or dtype."""
        return tuple(
            (t._version, t.data_ptr(), t.dtype, t.device)
            for t in (self.skew, self.inverse_matrix, self.signs)
        )

    def recurrent_matrix(self) -> Tensor:
        """``W = (I + A)^-1 (I - A) D``: differentiable in A; without gradients, cached until A changes."""
        if torch.is_grad_enabled() and self.skew.requires_grad:
            return self._build_recurrent_matrix()
        if self._cached_matrix is None or self._cached_key != self._weights_key():
            self._cached_matrix = self._build_recurrent_matrix()
            self._cached_key = self._weights_key()
        return self._cached_matrix

    def _build_recurrent_matrix(self) -> Tensor:
        A = self.skew_matrix()
        eye = torch.eye(self.hidden_size, dtype=A.dtype, device=A.device)
        if self.inverse == "exact":
            cayley = torch.linalg.solve_ex(eye + A, eye - A).result  # no error check: no host sync
        else:
            if torch.compiler.is_compiling() or self.skew._version != self._seen_version:
                self.refresh_inverse()
            cayley = _InverseWithGradient.apply(A, self.inverse_matrix) @ (eye - A)
        return cayley * self.signs

    def candidate_matrix(self) -> Tensor:
        return self.recurrent_matrix()

    def candidate_activation(self, z: Tensor) -> Tensor:
        return mod_relu(z, self.mod_bias)


class GRUWeights(nn.Module):
    """``nn.GRU(input_size, hidden_size)``'s parameters under its names (``weight_ih_l0``, ...),
    drawn as it draws them (same order, same bound), so that checkpoints and seeds carry over;
    a plain module, because ``torch.compile`` refuses to trace through an ``nn.GRU``."""

    def __init__(self, input_size: int, hidden_size: int) -> None:
        super().__init__()
        self.weight_ih_l0 = nn.Parameter(torch.empty(3 * hidden_size, input_size))
        self.weight_hh_l0 = nn.Parameter(torch.empty(3 * hidden_size, hidden_size))
        self.bias_ih_l0 = nn.Parameter(torch.empty(3 * hidden_size))
        self.bias_hh_l0 = nn.Parameter(torch.empty(3 * hidden_size))
        bound = 1.0 / math.sqrt(hidden_size)
        for weight in self.parameters():
            nn.init.uniform_(weight, -bound, bound)


class GRU(nn.Module):
    """PyTorch's GRU (reset after ``U_h``, two biases per gate): not equation (4).

    ``nn.GRU``'s own kernel (``torch.gru``; cuDNN's on a GPU) over its parameters, held outside an
    ``nn.GRU`` module, which ``torch.compile`` refuses to trace (the kernel itself it traces).
    """

    def __init__(self, input_size: int, hidden_size: int) -> None:
        super().__init__()
        self.input_size, self.hidden_size = input_size, hidden_size
        self.rnn = GRUWeights(input_size, hidden_size)

    def forward(self, x: Tensor, h: Tensor | None = None) -> tuple[Tensor, Tensor]:
        h = x.new_zeros(1, x.shape[0], self.hidden_size) if h is None else h.unsqueeze(0).contiguous()
        weights = (self.rnn.weight_ih_l0, self.rnn.weight_hh_l0, self.rnn.bias_ih_l0, self.rnn.bias_hh_l0)
        # has_biases, num_layers, dropout, train, bidirectional, batch_first: nn.GRU's call
        outputs, last = torch.gru(x, h, weights, True, 1, 0.0, self.training, False, True)
        return outputs, last.squeeze(0)


RNN_KINDS = ("gru", "gru_eq4", "ncgru")


def make_rnn(kind: str, input_size: int, hidden_size: int, **ncgru_options: object) -> nn.Module:
    """A cell by name (the model configs choose it): ``gru`` (nn.GRU), ``gru_eq4``, ``ncgru``."""
    if kind == "gru":
        return GRU(input_size, hidden_size)
    if kind == "gru_eq4":
        return EquationFourGRU(input_size, hidden_size)
    if kind == "ncgru":
        return NCGRU(input_size, hidden_size, **ncgru_options)
    raise ValueError(f"model.rnn={kind!r}: choose one of {', '.join(RNN_KINDS)}")

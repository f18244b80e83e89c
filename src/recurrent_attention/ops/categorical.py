"""The log-probability of observed classes under a linear softmax head, in cache-sized chunks on a CPU.

The math is :func:`class_log_likelihood_plain`: ``log_softmax(hidden @ W.T + b)`` at each row's
target class, with the argmax. With many classes (Wikipedia's 8227 edit marks) the ``(rows,
classes)`` logits are far larger than a CPU's cache, and the plain form passes over them about ten
times (the matmul's write, the log-softmax and its backward, the zero-filled gather gradient): on a
2-core CPU that was three quarters of a Wiki training step. :class:`ChunkedClassLogLikelihood` keeps
only the per-row log-normaliser from the forward pass and recomputes each chunk's logits in the
backward one, so every pass over the logits stays in cache. It costs one more matmul and no
``(rows, classes)`` tensor in memory. Tests hold the two forms equal, values and gradients.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import once_differentiable

CHUNK_LOGITS = 1 << 18
"""Logits per chunk, about 1 MB in float32: 31 rows of Wiki's 8227 marks (32 rows was the fastest of
32 to 512 measured here); a head of a few classes takes its rows in one chunk."""


def class_log_likelihood_plain(
    hidden: Tensor, weight: Tensor, bias: Tensor | None, target: Tensor
) -> tuple[Tensor, Tensor]:
    """``(rows, d)`` hidden states, ``(classes, d)`` weight, ``(rows,)`` targets -> the targets'
    log-probabilities and the most probable classes, ``(rows,)`` each."""
    log_probs = torch.log_softmax(F.linear(hidden, weight, bias), dim=-1)
    return log_probs.gather(-1, target.unsqueeze(-1)).squeeze(-1), log_probs.argmax(dim=-1)


class ChunkedClassLogLikelihood(torch.autograd.Function):
    """:func:`class_log_likelihood_plain` chunk by chunk, its backward ``g * (onehot - softmax)``
    recomputed per chunk; the argmax is returned as a second, non-differentiable output."""

    @staticmethod
    def forward(
        ctx: Any, hidden: Tensor, weight: Tensor, bias: Tensor, target: Tensor, chunk: int
    ) -> tuple[Tensor, Tensor]:
        rows = len(hidden)
        chosen = hidden.new_empty(rows)
        log_norm = hidden.new_empty(rows)
        best = target.new_empty(rows)
        for start in range(0, rows, chunk):
            part = slice(start, start + chunk)
            logits = torch.addmm(bias, hidden[part], weight.t())
            log_norm[part] = torch.logsumexp(logits, dim=-1)
            chosen[part] = logits.gather(-1, target[part].unsqueeze(-1)).squeeze(-1)
            best[part] = logits.argmax(dim=-1)
        ctx.save_for_backward(hidden, weight, bias, target, log_norm)
        ctx.chunk = chunk
        ctx.mark_non_differentiable(best)
        return chosen - log_norm, best

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: Tensor, _: Tensor) -> tuple[Tensor, Tensor, Tensor, None, None]:
        hidden, weight, bias, target, log_norm = ctx.saved_tensors
        grad_hidden = torch.empty_like(hidden)
        grad_weight = torch.zeros_like(weight)
        grad_bias = torch.zeros_like(bias)
        for start in range(0, len(hidden), ctx.chunk):
            part = slice(start, start + ctx.chunk)
            rows_grad = grad[part].unsqueeze(-1)
            # d/dlogits of g * (logit_target - logsumexp) = g * (onehot - softmax)
            grad_logits = torch.addmm(bias, hidden[part], weight.t())
            grad_logits.sub_(log_norm[part].unsqueeze(-1)).exp_().mul_(-rows_grad)
            grad_logits.scatter_add_(-1, target[part].unsqueeze(-1), rows_grad)
            torch.mm(grad_logits, weight, out=grad_hidden[part])
            grad_weight.addmm_(grad_logits.t(), hidden[part])
            grad_bias.add_(grad_logits.sum(dim=0))
        return grad_hidden, grad_weight, grad_bias, None, None


def class_log_likelihood(
    hidden: Tensor, weight: Tensor, bias: Tensor | None, target: Tensor, chunk: int | None = None
) -> tuple[Tensor, Tensor]:
    """:func:`class_log_likelihood_plain`, on a CPU in chunks of ``chunk`` rows (by default
    :data:`CHUNK_LOGITS` logits); elsewhere the plain form (one large kernel suits a GPU better than
    a loop), and so without a bias or under autocast (whose casts are the plain form's)."""
    if hidden.device.type != "cpu" or bias is None or torch.is_autocast_enabled("cpu"):
        return class_log_likelihood_plain(hidden, weight, bias, target)
    rows = chunk or max(1, CHUNK_LOGITS // len(weight))
    return ChunkedClassLogLikelihood.apply(hidden, weight, bias, target, rows)

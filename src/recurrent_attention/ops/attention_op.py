"""Aaren's chunked prefix attention as one ``torch.library`` custom op, and the choice of path.

``torch.compile`` and ``torch.export`` cannot trace :func:`~.prefix_attention.attention_chunked`
as it is: its kernels are autograd functions with hand-written backwards (the CPU one in C++), and
on the CPU it reads the scores to pick a kernel. Under a tracer :func:`prefix_attention` therefore
calls ``recurrent_attention::chunked_prefix_attention``, which the tracer sees as one op (its
shapes from :func:`_fake`); the op runs ``attention_chunked`` itself, C++ kernel included. Its
backward is a second op that runs the forward again with autograd on and differentiates it, since
an op's outputs cannot carry the kernels' saved tensors: a compiled step pays one more forward of
the attention (the rest of the step is what compiling speeds). Eager calls skip the op and keep the
saved tensors. Its autograd leaves the state's ``m`` without gradient: it is a stabiliser that
cancels in the outputs (as everywhere in :mod:`.prefix_attention`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import Tensor

from recurrent_attention.ops.prefix_attention import PATHS, attention_chunked
from recurrent_attention.ops.scan import ScanState, compute_dtype

OP = "recurrent_attention::chunked_prefix_attention"


def _state(m: Tensor | None, u: Tensor | None, w: Tensor | None) -> ScanState | None:
    return None if m is None else ScanState(m, u, w)


@torch.library.custom_op(OP, mutates_args=())
def chunked_prefix_attention(
    scores: Tensor, values: Tensor, m: Tensor | None, u: Tensor | None, w: Tensor | None
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``attention_chunked(scores, values, state)`` as ``(out, m, u, w)``, each contiguous (the
    layout :func:`_fake` promises the tracer)."""
    out, final = attention_chunked(scores, values, _state(m, u, w))
    return out.contiguous(), final.m.contiguous(), final.u.contiguous(), final.w.contiguous()


@chunked_prefix_attention.register_fake
def _fake(
    scores: Tensor, values: Tensor, m: Tensor | None, u: Tensor | None, w: Tensor | None
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    dtype, batch = compute_dtype(values.dtype), scores.shape[:-1]
    return (
        values.new_empty(values.shape),
        scores.new_empty(batch, dtype=dtype),
        scores.new_empty(batch, dtype=dtype),
        values.new_empty((*batch, values.shape[-1]), dtype=dtype),
    )


@contextlib.contextmanager
def _autograd_on() -> Iterator[None]:
    """Autograd recording inside an op's implementation. The dispatcher calls it below autograd,
    with autograd's dispatch keys excluded, so ``enable_grad`` alone records only the autograd
    functions (which check grad mode, not the keys), not the plain ops between them: those keys are
    put back for the duration, as torch's own higher-order ops do."""
    excluded = torch._C._dispatch_tls_local_exclude_set()
    for key in _AUTOGRAD_KEYS:
        excluded = excluded.remove(key)
    included = torch._C._dispatch_tls_local_include_set()
    with torch._C._ForceDispatchKeyGuard(included, excluded), torch.enable_grad():
        yield


_AUTOGRAD_KEYS = (
    torch._C.DispatchKey.AutogradFunctionality,
    torch._C.DispatchKey.AutogradOther,
    torch._C.DispatchKey.AutogradNestedTensor,
)


@torch.library.custom_op(f"{OP}_backward", mutates_args=())
def chunked_prefix_attention_backward(
    scores: Tensor,
    values: Tensor,
    m: Tensor | None,
    u: Tensor | None,
    w: Tensor | None,
    grad_out: Tensor,
    grad_u: Tensor,
    grad_w: Tensor,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Gradients of ``out``, ``u``, ``w`` to ``scores``, ``values``, ``u``, ``w`` by running the
    forward again with autograd on; without a state the last two are empty. Contiguous whatever
    the inputs' strides, as :func:`_fake_backward` says. Gradients of unused outputs come as zeros
    (the op's autograd materialises them)."""
    with _autograd_on():
        inputs = (scores, values) if m is None else (scores, values, u, w)
        leaves = [t.detach().requires_grad_() for t in inputs]
        state = None if m is None else ScanState(m, *leaves[2:])
        out, final = attention_chunked(leaves[0], leaves[1], state)
        grads = torch.autograd.grad(
            (out, final.u, final.w),
            leaves,
            (grad_out, grad_u, grad_w),
            allow_unused=True,
            materialize_grads=True,
        )
    if m is None:
        grads = (*grads, scores.new_empty(0), scores.new_empty(0))
    return tuple(grad.contiguous() for grad in grads)


@chunked_prefix_attention_backward.register_fake
def _fake_backward(
    scores: Tensor,
    values: Tensor,
    m: Tensor | None,
    u: Tensor | None,
    w: Tensor | None,
    grad_out: Tensor,
    grad_u: Tensor,
    grad_w: Tensor,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    state = (
        (scores.new_empty(0), scores.new_empty(0))
        if m is None
        else (u.new_empty(u.shape), w.new_empty(w.shape))
    )
    return scores.new_empty(scores.shape), values.new_empty(values.shape), *state


def _setup_context(ctx, inputs: tuple, output: tuple) -> None:
    ctx.save_for_backward(*inputs)


def _backward(ctx, grad_out: Tensor, _grad_m: Tensor, grad_u: Tensor, grad_w: Tensor) -> tuple:
    scores, values, m, u, w = ctx.saved_tensors
    grad_scores, grad_values, grad_carry_u, grad_carry_w = chunked_prefix_attention_backward(
        scores, values, m, u, w, grad_out, grad_u, grad_w
    )
    if m is None:
        return grad_scores, grad_values, None, None, None
    return grad_scores, grad_values, None, grad_carry_u, grad_carry_w


chunked_prefix_attention.register_autograd(_backward, setup_context=_setup_context)


def _chunked(scores: Tensor, values: Tensor, state: ScanState | None = None) -> tuple[Tensor, ScanState]:
    """The chunked path: the op under a tracer, ``attention_chunked`` itself in eager mode."""
    if not torch.compiler.is_compiling():
        return attention_chunked(scores, values, state)
    out, *final = chunked_prefix_attention(scores, values, *(state or (None, None, None)))
    return out, ScanState(*final)


_DISPATCH = {**PATHS, "chunked": _chunked}


def prefix_attention(
    scores: Tensor, values: Tensor, state: ScanState | None = None, path: str = "chunked"
) -> tuple[Tensor, ScanState]:
    """Dispatch to one of the three equivalent paths by name (``scan``, ``recurrent``, ``chunked``)."""
    try:
        fn = _DISPATCH[path]
    except KeyError:
        raise ValueError(f"unknown prefix-attention path {path!r}; choose one of {sorted(PATHS)}") from None
    return fn(scores, values, state)

"""Aaren: attention with a learned query per head, computed as a many-to-many RNN.

Each layer replaces causal self-attention by ``o_k = softmax(q·k_{1:k}) v_{1:k}`` with a query
``q`` that is a learned token (projected by the same query matrix a Transformer has), so the only
new parameters are one ``d_model`` vector per layer. The state per layer and head is ``(m, u, w)``
(:class:`~recurrent_attention.ops.ScanState`): constant size whatever the number of tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from recurrent_attention.models.blocks import HeadProjections, LayerStack, addmm_weights
from recurrent_attention.ops import PATHS, ScanState, attention_step, empty_state, native, prefix_attention


class AarenAttention(nn.Module):
    """Prefix attention from a learned query; ``path`` picks scan, recurrent or chunked.

    The query is a parameter, so the scores never need the keys: per head,
    ``s = (x W_k^T + b_k)·q / sqrt(d_head) = x·(W_k^T q) / sqrt(d_head) + b_k·q / sqrt(d_head)``.
    :meth:`value_score_projection` stacks those ``n_heads`` rows under the value projection's and
    builds the matrix from the fused q/k/v parameter and the query (so the gradients reach ``W_q``,
    ``W_k``, their biases and the query exactly as through the unfused form): values and scores
    are then one matrix product of the tokens, in training as in :meth:`step`. Without gradients
    the matrix is built once and reused until a parameter changes.
    """

    def __init__(self, d_model: int, n_heads: int, path: str = "chunked", qkv_bias: bool = True) -> None:
        super().__init__()
        if path not in PATHS:
            raise ValueError(f"model.path={path!r}: choose one of {sorted(PATHS)}")
        self.proj = HeadProjections(d_model, n_heads, qkv_bias)
        self.query = nn.Parameter(torch.randn(d_model) * d_model**-0.5)
        self.path = path
        self._step_cache: tuple[tuple[Tensor, ...], list[int], tuple[Tensor, Tensor | None]] | None = None
        self.register_load_state_dict_post_hook(self._clear_step_cache)

    def value_score_projection(self) -> tuple[Tensor, Tensor | None]:
        """``(W, b)``, ``W (d_model + H, d_model)``: values then scores ``(..., d_model + H) = x W^T + b``;
        ``b`` is None without ``qkv_bias``.

        On CPU in float32/float64 this is one compiled call each way (:mod:`~recurrent_attention.ops.native`),
        whose parameters must then be of the query's dtype; :meth:`torch_value_score_projection` otherwise.
        """
        compiled = native.value_score_projection(self.query)
        if compiled is None:
            return self.torch_value_score_projection()
        return compiled(self.query, self.proj.qkv.weight, self.proj.qkv.bias, self.proj.n_heads)

    def torch_value_score_projection(self) -> tuple[Tensor, Tensor | None]:
        """:meth:`value_score_projection` in PyTorch ops (any device and dtype; the reference in tests)."""
        heads, d_head = self.proj.n_heads, self.proj.d_head
        (query_weight, query_bias), (key_weight, key_bias), (value_weight, value_bias) = self.proj.parts()
        q = F.linear(self.query, query_weight, query_bias).view(heads, d_head) * d_head**-0.5
        weight = torch.cat([value_weight, (key_weight.view(heads, d_head, -1) * q.unsqueeze(-1)).sum(1)])
        if value_bias is None:
            return weight, None
        return weight, torch.cat([value_bias, (key_bias.view(heads, d_head) * q).sum(-1)])

    def _fused_step_projection(self) -> tuple[Tensor, Tensor | None]:
        """:meth:`value_score_projection`, cached when no grad.

        The cache holds the parameters it was built from and their version counters, so an
        in-place update (an optimiser step, ``load_state_dict``) rebuilds it; moving the module
        (``.to``, ``.double``) or loading with ``assign=True`` clears it.
        """
        if torch.is_grad_enabled():
            return self.value_score_projection()
        cache = self._step_cache
        if cache is None or cache[1] != [p._version for p in cache[0]]:
            parameters = tuple(self.parameters())
            cache = self._step_cache = (
                parameters,
                [p._version for p in parameters],
                self.value_score_projection(),
            )
        return cache[2]

    def _clear_step_cache(self, *_: object) -> None:
        self._step_cache = None

    def _apply(self, fn: Callable[[Tensor], Tensor], recurse: bool = True) -> AarenAttention:
        self._clear_step_cache()
        return super()._apply(fn, recurse)

    def _scores_and_values(self, x: Tensor, weight: Tensor, bias: Tensor | None) -> tuple[Tensor, Tensor]:
        """Scores ``(..., H, N)`` and values ``(..., H, N, d_head)`` of tokens ``x (..., N, d_model)``
        from one product with the values-and-scores projection ``(weight, bias)``."""
        values, scores = F.linear(x, weight, bias).split([self.proj.d_model, self.proj.n_heads], dim=-1)
        return scores.transpose(-1, -2), self.proj.split_heads(values)

    def forward(self, x: Tensor, state: ScanState | None = None) -> tuple[Tensor, ScanState]:
        scores, v = self._scores_and_values(x, *self.value_score_projection())
        out, state = prefix_attention(scores, v, state, self.path)
        return self.proj.merge_heads(out), state

    def step(self, x_t: Tensor, state: ScanState) -> tuple[Tensor, ScanState]:
        weight, bias = self._fused_step_projection()
        projected = F.linear(x_t, weight, bias)  # (B, d_model + H): values, then scores
        d_model = weight.shape[1]
        values = projected[..., :d_model].unflatten(-1, (self.proj.n_heads, self.proj.d_head))
        out, state = attention_step(projected[..., d_model:], values, state)
        return self.proj.out_proj(out.flatten(-2)), state

    def lean_weights(self) -> tuple[Tensor, Tensor, Tensor, Tensor, tuple[int, int]]:
        """``(W_mix^T, b_mix, W_out^T, b_out, (heads, d_head))``: values then scores as one ``addmm``."""
        mix = addmm_weights(*self.value_score_projection())
        out = addmm_weights(self.proj.out_proj.weight, self.proj.out_proj.bias)
        return (*mix, *out, (self.proj.n_heads, self.proj.d_head))

    def lean_mixer(self) -> Callable[[Tensor, ScanState], tuple[Tensor, ScanState]]:
        """:meth:`step` for a ``(B, d_model)`` token in eval mode, on weights laid out now."""
        return partial(_lean_aaren_mix, *self.lean_weights())

    def init_state(
        self, batch_size: int, device: torch.device | None = None, dtype: torch.dtype | None = None
    ) -> ScanState:
        dtype = torch.float64 if dtype == torch.float64 else torch.float32
        return empty_state((batch_size, self.proj.n_heads), self.proj.d_head, device, dtype)


def _lean_aaren_mix(
    mix_weight: Tensor,
    mix_bias: Tensor,
    out_weight: Tensor,
    out_bias: Tensor,
    head_shape: tuple[int, int],
    x: Tensor,
    state: ScanState,
) -> tuple[Tensor, ScanState]:
    """:meth:`AarenAttention.step` on laid-out weights (``mix_weight``: values, then scores)."""
    projected = torch.addmm(mix_bias, x, mix_weight)
    d_model = mix_weight.shape[0]
    values = projected[:, :d_model].view(-1, *head_shape)
    # Scores of finite tokens are finite: the state update needs no guard against -inf.
    out, state = attention_step(projected[:, d_model:], values, state, finite_scores=True)
    return torch.addmm(out_bias, out.view(-1, d_model), out_weight), state


class Aaren(LayerStack):
    """Stacked Aaren layers in the same residual blocks as :class:`~.transformer.Transformer`.

    In eval mode without gradients :meth:`step` takes :class:`LayerStack`'s lean path with
    :meth:`AarenAttention.lean_mixer`: per-token latency is what Aaren is for. For a CPU
    float32/float64 token that path runs as one compiled call (``AarenStepper`` in
    :mod:`~recurrent_attention.ops.native`, on the same laid-out weights) where the kernels are built;
    the two agree to rounding and tests hold them together.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        n_layers: int,
        d_ff: int,
        dropout: float = 0.1,
        activation: str = "gelu",
        norm_first: bool = False,
        final_norm: bool = True,
        path: str = "chunked",
        attn_dropout: float | None = None,
        qkv_bias: bool = True,
        norm_eps: float = 1e-5,
    ) -> None:
        # attn_dropout is accepted so model configs stay interchangeable; Aaren has no attention
        # matrix to drop (the residual and feed-forward dropout still apply).
        del attn_dropout
        mixers = [AarenAttention(d_model, n_heads, path, qkv_bias) for _ in range(n_layers)]
        super().__init__(mixers, d_model, d_ff, dropout, activation, norm_first, final_norm, norm_eps)
        self._compiled_step: object | None = None

    def step(
        self, x_t: Tensor, state: list[ScanState], reinject: Tensor | None = None
    ) -> tuple[Tensor, list[ScanState]]:
        # the compiled step has no reinjection: with one, take the layer stack's own step
        stepped = None if reinject is not None else self._try_compiled_step(x_t, state)
        if stepped is None:
            return super().step(x_t, state, reinject)
        y_t, flat = stepped
        return y_t, [ScanState(*flat[i : i + 3]) for i in range(0, len(flat), 3)]

    def _try_compiled_step(self, x_t: Tensor, state: list[ScanState]) -> tuple[Tensor, list[Tensor]] | None:
        """``(y_t, flat state)`` from the compiled step, or None where it does not apply.

        The compiled step checks the token, the state, grad mode and its weights' version counters
        itself (``try_step``): at one token each Python operation here costs several µs of a ~100 µs
        step. Only when it declines is the layout checked (and the step rebuilt) here.
        """
        if self.training or torch.compiler.is_compiling() or torch.jit.is_tracing():
            return None
        flat = [t for layer in state for t in layer]
        stepper = self._compiled_step
        stepped = None if stepper is None else stepper.try_step(x_t, flat)
        if stepped is None and (stepper := self._compiled_stepper(x_t, state)) is not None:
            stepped = stepper.try_step(x_t, flat)
        return stepped

    def _compiled_stepper(self, x_t: Tensor, state: list[ScanState]) -> object | None:
        """The compiled step for this token and state, built (again) from the lean layout; None
        where the lean path would not run, the kernels are unavailable, or dtypes differ."""
        dtype = self.blocks[0].mixer.query.dtype
        if self.training or torch.is_grad_enabled() or x_t.dim() != 2 or x_t.dtype != dtype:
            return None
        if any(layer.m.dtype != dtype for layer in state):
            return None
        stepper_class = native.aaren_stepper(x_t)
        if stepper_class is None:
            return None
        blocks, final_norm = self._lean_blocks()
        self._compiled_step = _build_stepper(stepper_class, self, blocks, final_norm)
        return self._compiled_step

    def _clear_lean_layout(self, *_: object) -> None:
        """Also drop the compiled step: it holds the parameters it was built from, and a conversion or
        a load with ``assign=True`` replaces them without changing their version counters."""
        super()._clear_lean_layout()
        self._compiled_step = None


def _build_stepper(stepper_class: type, model: Aaren, blocks: list, final_norm: tuple | None) -> object:
    """An ``AarenStepper`` on the weights the Python lean step lays out (the mixers' own
    :meth:`AarenAttention.lean_weights`, the layout's feed-forward and norms)."""
    weights, eps = [], []
    for lean, block in zip(blocks, model.blocks, strict=True):
        weights += block.mixer.lean_weights()[:4]
        weights += [lean.ff_in_weight, lean.ff_in_bias, lean.ff_out_weight, lean.ff_out_bias]
        for norm in (lean.norm_mix, lean.norm_ff):
            _, weight, bias, norm_eps = norm
            weights += [weight, bias]
            eps.append(norm_eps)
    activation = model.blocks[0].ff[1]
    gelu = isinstance(activation, nn.GELU)
    if gelu and activation.approximate != "none":
        raise ValueError("the compiled Aaren step computes the exact GELU")
    _, final_weight, final_bias, final_eps = final_norm if final_norm is not None else (None, None, None, 0.0)
    proj = model.blocks[0].mixer.proj
    return stepper_class(
        [w.detach() for w in weights],
        eps,
        model.blocks[0].norm_first,
        gelu,
        final_weight if final_weight is None else final_weight.detach(),
        final_bias if final_bias is None else final_bias.detach(),
        final_eps,
        proj.n_heads,
        proj.d_head,
        list(model.parameters()),
    )

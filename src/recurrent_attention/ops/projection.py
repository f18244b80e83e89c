"""Aaren's values-and-scores projection by its compiled CPU form, where one applies.

:meth:`~recurrent_attention.models.aaren.AarenAttention.torch_value_score_projection` is the math;
at the sizes Aaren trains at on a CPU its dozen small ops cost more in dispatch than in arithmetic,
so the model asks here first, as the prefix attention does for its kernel
(:mod:`~recurrent_attention.ops.prefix_attention`). Tests hold the two equal, values and gradients.
"""

from __future__ import annotations

from torch import Tensor

from recurrent_attention.ops import native


def compiled_value_score_projection(
    query: Tensor, qkv_weight: Tensor, qkv_bias: Tensor | None, n_heads: int
) -> tuple[Tensor, Tensor | None] | None:
    """``(W, b)`` from the compiled kernel (eager CPU float32/float64, the parameters of the query's
    dtype, the kernels built), or None where it does not apply."""
    kernel = native.value_score_projection(query)
    return None if kernel is None else kernel(query, qkv_weight, qkv_bias, n_heads)

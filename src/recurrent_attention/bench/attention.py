"""Forward+backward time of each prefix-attention path, and of linear attention's chunked form,
against causal SDPA at growing N.

SDPA computes full causal attention (a query per token); Aaren's operator has one query per head,
so both produce N outputs per head from the same scores/values budget. Linear attention
(``linear_chunked``) takes SDPA's own queries, keys and values through its feature map and chunked
form (:mod:`~recurrent_attention.ops.linear_forms`, at the model's default chunk size): the training
path a linear-attention layer runs where a Transformer's runs SDPA. Shapes: (B, H, N, d_head).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import partial

import torch
import torch.nn.functional as F

from recurrent_attention.bench.timing import time_call
from recurrent_attention.models.linear_attention import feature_map
from recurrent_attention.ops import attention_chunked, attention_recurrent, attention_scan
from recurrent_attention.ops.linear_forms import LinearState, chunked

LINEAR_CHUNK = 64
"""Linear attention's chunk size: the model's default (``conf/model/linear_attention.yaml``)."""


@dataclass
class OperatorTiming:
    path: str
    n: int
    seconds: float | None  # None: skipped (see note)
    note: str = ""


def _fwd_bwd_sdpa(q, k, v) -> None:
    F.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()


def _fwd_bwd_prefix(fn, scores, v) -> None:
    fn(scores, v)[0].sum().backward()


def _fwd_bwd_linear(q, k, v) -> None:
    batch_shape, d_head = q.shape[:-2], q.shape[-1]
    empty = LinearState(q.new_zeros(*batch_shape, d_head, d_head), q.new_zeros(*batch_shape, d_head))
    chunked(feature_map(q), feature_map(k), v, empty, LINEAR_CHUNK)[0].sum().backward()


PREFIX_PATHS = {"chunked": attention_chunked, "scan": attention_scan, "recurrent": attention_recurrent}


def operator_timings(
    lengths: list[int],
    batch: int = 32,
    heads: int = 4,
    d_head: int = 32,
    device: str = "cpu",
    dtype: torch.dtype = torch.float32,
    max_recurrent_n: int = 2048,
    max_scan_elements: int = 2**29,
    progress=None,
) -> list[OperatorTiming]:
    """Time SDPA and every prefix path at each N; skip the slow reference paths beyond their limits."""
    dev = torch.device(device)
    results = []
    for n in lengths:
        gen = torch.Generator(device="cpu").manual_seed(n)
        q, k, v = (
            torch.randn(batch, heads, n, d_head, generator=gen).to(dev, dtype).requires_grad_()
            for _ in range(3)
        )
        scores = torch.randn(batch, heads, n, generator=gen).to(dev, dtype).requires_grad_()
        budget = 3.0 if n <= 2048 else 1.0
        if progress:
            progress(f"N={n} sdpa")
        results.append(OperatorTiming("sdpa", n, time_call(partial(_fwd_bwd_sdpa, q, k, v), dev, budget)))
        # next to SDPA, on its tensors, before the Aaren paths' many allocations change the heap
        if progress:
            progress(f"N={n} linear_chunked")
        seconds = time_call(partial(_fwd_bwd_linear, q, k, v), dev, budget)
        results.append(OperatorTiming("linear_chunked", n, seconds))
        for name, fn in PREFIX_PATHS.items():
            if name == "recurrent" and n > max_recurrent_n:
                results.append(
                    OperatorTiming(name, n, None, f"skipped: python loop beyond N={max_recurrent_n}")
                )
                continue
            if name == "scan" and batch * heads * n * d_head * n.bit_length() > max_scan_elements:
                results.append(
                    OperatorTiming(name, n, None, "skipped: log2(N) saved copies exceed memory cap")
                )
                continue
            if progress:
                progress(f"N={n} {name}")
            seconds = time_call(partial(_fwd_bwd_prefix, fn, scores, v), dev, budget)
            results.append(OperatorTiming(name, n, seconds))
    return results


def as_rows(timings: list[OperatorTiming]) -> list[dict]:
    return [asdict(t) for t in timings]

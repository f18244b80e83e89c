"""Forward+backward time of each prefix-attention path against causal SDPA at growing N.

SDPA computes full causal attention (a query per token); Aaren's operator has one query per head,
so both produce N outputs per head from the same scores/values budget. Shapes: (B, H, N, d_head).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import partial

import torch
import torch.nn.functional as F

from recurrent_attention.bench.timing import time_call
from recurrent_attention.ops import attention_chunked, attention_recurrent, attention_scan


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

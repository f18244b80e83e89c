"""Perplexity accumulated exactly over every token of a split."""

from __future__ import annotations

import math

from torch import Tensor


def perplexity(nll_sum: float, n_tokens: int) -> float:
    """``exp(mean NLL per token)``, the NLL in nats."""
    return math.exp(nll_sum / n_tokens)


class NLLTotals:
    """Running NLL sum (float64) and token count, so the result is the mean over the whole split."""

    def __init__(self) -> None:
        self.nll, self.count = 0.0, 0

    def update(self, nll: Tensor) -> None:
        self.nll += float(nll.detach().double().sum())
        self.count += nll.numel()

    def compute(self) -> dict[str, float]:
        if self.count == 0:
            raise RuntimeError("no tokens were accumulated")
        return {"loss": self.nll / self.count, "ppl": perplexity(self.nll, self.count)}

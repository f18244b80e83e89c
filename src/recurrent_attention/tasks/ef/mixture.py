"""The mixture of log-normals over the next inter-event time (Shchur et al. 2020; Meta TPP's head).

Kept as a plain object over tensors, not ``torch.distributions``, so that the log-survival uses
``log_ndtr`` (stable far in the tail, where Meta TPP's clamped ``1 - cdf`` saturates) and so that
tests can check every formula against scipy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)
# Meta TPP clamps a CDF to [c, 1 - c] before taking log(1 - cdf) for the last interval (prob_dists.py).
META_TPP_CDF_CLAMP = 1e-5


def clamped_log_survival(cdf: float) -> float:
    """Meta TPP's ``log(1 - cdf)`` of one CDF value, clamped as :meth:`LogNormalMixture.log_survival_clamped`
    clamps each component's: for the scorers outside the model (the history-free baseline, Sin's process)."""
    return math.log(1.0 - min(max(cdf, META_TPP_CDF_CLAMP), 1.0 - META_TPP_CDF_CLAMP))


@dataclass
class LogNormalMixture:
    """Components on the last axis: ``log_weights``, ``mu``, ``sigma`` all ``(..., K)``.

    Component k is ``LogNormal(mu_k, sigma_k)``: ``log x ~ Normal(mu_k, sigma_k)``.
    """

    log_weights: Tensor
    mu: Tensor
    sigma: Tensor

    def _standardised(self, x: Tensor) -> tuple[Tensor, Tensor]:
        log_x = torch.log(x).unsqueeze(-1)
        return log_x, (log_x - self.mu) / self.sigma

    def log_prob(self, x: Tensor) -> Tensor:
        """Log-density at ``x (...)`` (positive), shape ``(...)``."""
        log_x, z = self._standardised(x)
        component = -log_x - torch.log(self.sigma) - HALF_LOG_2PI - 0.5 * z.square()
        return torch.logsumexp(self.log_weights + component, dim=-1)

    def log_survival(self, x: Tensor) -> Tensor:
        """``log P(X > x)`` at ``x (...)`` (positive), shape ``(...)``."""
        _, z = self._standardised(x)
        return torch.logsumexp(self.log_weights + torch.special.log_ndtr(-z), dim=-1)

    def log_survival_clamped(self, x: Tensor, low: float = META_TPP_CDF_CLAMP) -> Tensor:
        """Meta TPP's log survival: each component's CDF clamped to ``[low, 1 - low]``, then ``log(1 - cdf)``.

        The clamp changes values only; gradients are those of the unclamped CDF, as Meta TPP's
        ``clamp_preserve_gradients`` does. Used where its NLL is reproduced (the protocol's ``nll=meta_tpp``).
        """
        _, z = self._standardised(x)
        cdf = torch.special.ndtr(z)
        cdf = cdf + (cdf.clamp(low, 1.0 - low) - cdf).detach()
        return torch.logsumexp(self.log_weights + torch.log1p(-cdf), dim=-1)

    def mean(self) -> Tensor:
        """``sum_k w_k exp(mu_k + sigma_k^2 / 2)``, computed in log space, shape ``(...)``."""
        return torch.exp(torch.logsumexp(self.log_weights + self.mu + 0.5 * self.sigma.square(), dim=-1))

    def __getitem__(self, index: object) -> LogNormalMixture:
        """Index the batch dimensions (everything but the component axis)."""
        return LogNormalMixture(self.log_weights[index], self.mu[index], self.sigma[index])

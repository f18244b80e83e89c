"""The log-normal mixture's density, survival and mean against scipy."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from recurrent_attention.tasks.ef.mixture import LogNormalMixture


def random_mixture(
    rng: np.random.Generator, k: int = 8
) -> tuple[LogNormalMixture, np.ndarray, np.ndarray, np.ndarray]:
    weights = rng.dirichlet(np.ones(k))
    mu, sigma = rng.normal(0, 1, k), rng.uniform(0.2, 1.5, k)
    mixture = LogNormalMixture(torch.tensor(np.log(weights)), torch.tensor(mu), torch.tensor(sigma))
    return mixture, weights, mu, sigma


def scipy_components(mu: np.ndarray, sigma: np.ndarray) -> list:
    return [stats.lognorm(s=s, scale=np.exp(m)) for m, s in zip(mu, sigma, strict=True)]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_log_prob_and_survival_match_scipy(seed: int) -> None:
    rng = np.random.default_rng(seed)
    mixture, weights, mu, sigma = random_mixture(rng)
    x = np.array([1e-3, 0.05, 0.7, 1.0, 3.3, 40.0])
    components = scipy_components(mu, sigma)
    pdf = sum(w * c.pdf(x) for w, c in zip(weights, components, strict=True))
    sf = sum(w * c.sf(x) for w, c in zip(weights, components, strict=True))
    xt = torch.tensor(x)
    np.testing.assert_allclose(mixture.log_prob(xt).numpy(), np.log(pdf), rtol=1e-10)
    np.testing.assert_allclose(mixture.log_survival(xt).numpy(), np.log(sf), rtol=1e-9, atol=1e-13)


def test_mean_matches_scipy() -> None:
    mixture, weights, mu, sigma = random_mixture(np.random.default_rng(3))
    expected = sum(w * c.mean() for w, c in zip(weights, scipy_components(mu, sigma), strict=True))
    assert float(mixture.mean()) == pytest.approx(expected, rel=1e-12)


def test_batched_components_broadcast() -> None:
    """Batch dimensions in front of the component axis, each with its own mixture."""
    rng = np.random.default_rng(4)
    mixtures = [random_mixture(rng, k=3) for _ in range(2)]
    stacked = LogNormalMixture(
        torch.stack([m.log_weights for m, *_ in mixtures]),
        torch.stack([m.mu for m, *_ in mixtures]),
        torch.stack([m.sigma for m, *_ in mixtures]),
    )
    x = torch.tensor([0.4, 2.0], dtype=torch.float64)
    for i, (m, *_) in enumerate(mixtures):
        assert float(stacked.log_prob(x)[i]) == pytest.approx(float(m.log_prob(x[i])), rel=1e-12)
        assert float(stacked[i].mean()) == pytest.approx(float(m.mean()), rel=1e-12)

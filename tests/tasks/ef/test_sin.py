"""The sin generator's empirical intensity against the formula it documents."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate

from recurrent_attention.tasks.ef.sin import SinIntensity, generate_sin


def test_integral_matches_quadrature() -> None:
    shape = SinIntensity(a=1.5, b=-0.7, period=3.0, t_end=10.0)
    for t0, t1 in [(0.0, 1.0), (0.3, 7.9), (2.0, 10.0)]:
        expected, _ = integrate.quad(shape, t0, t1)
        assert float(shape.integral(t0, t1)) == pytest.approx(expected, rel=1e-10)


def test_event_counts_per_bin_follow_the_intensity() -> None:
    """Mean count per bin over many sequences = int lambda over the bin, within 4.5 Poisson std errors."""
    shape = SinIntensity()
    n = 1500
    sequences = generate_sin(n_sequences=n, seed=7)
    edges = np.linspace(0.0, shape.t_end, 33)  # 4 bins per period: the sine's shape is visible
    counts = sum(np.histogram(s.times, bins=edges)[0] for s in sequences) / n
    expected = shape.integral(edges[:-1], edges[1:])
    z = (counts - expected) / np.sqrt(expected / n)
    assert np.abs(z).max() < 4.5, f"bins off the intensity: z = {np.round(z, 1)}"
    # The test can tell the sine apart from a constant rate with the same mean.
    flat = np.full_like(expected, shape.a * (edges[1] - edges[0]))
    assert np.abs((counts - flat) / np.sqrt(flat / n)).max() > 10


def test_sequences_are_sorted_inside_the_window_and_reproducible() -> None:
    first, again = generate_sin(5, seed=3), generate_sin(5, seed=3)
    for s, t in zip(first, again, strict=True):
        np.testing.assert_array_equal(s.times, t.times)
        assert np.all(np.diff(s.times) >= 0) and s.times[-1] <= s.t_end == pytest.approx(32 * math.pi)
        assert np.all(s.marks == 0)


def test_negative_intensity_is_rejected() -> None:
    with pytest.raises(ValueError, match="non-negative"):
        SinIntensity(a=0.5, b=1.0)

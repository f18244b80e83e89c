"""The sin generator's empirical intensity against the formula it documents."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import integrate

from recurrent_attention.tasks.ef.formats import EventSequence
from recurrent_attention.tasks.ef.sin import SinIntensity, generate_sin, process_meta_tpp_nll


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


def test_process_nll_by_hand_for_a_constant_rate() -> None:
    """b = 0 is a Poisson process of rate a: density a exp(-a tau), survival exp(-a tau); one
    sequence of 3 events (one density, one survival term) and one of 1 (no term), over 4 events."""
    shape = SinIntensity(a=2.0, b=0.0)
    sequences = [
        EventSequence(np.array([1.0, 1.5, 3.0]), np.zeros(3, np.int64)),
        EventSequence(np.array([2.0]), np.zeros(1, np.int64)),
    ]
    expected = -((math.log(2.0) - 2.0 * 0.5) + (-2.0 * 1.5)) / 4
    assert process_meta_tpp_nll(sequences, shape) == pytest.approx(expected, rel=1e-12)


def test_process_nll_by_quadrature() -> None:
    shape = SinIntensity(a=1.2, b=0.9, period=5.0, t_end=20.0)
    times = np.array([0.4, 1.1, 2.9, 3.0, 6.5])
    expected = 0.0
    for t0, t1 in itertools.pairwise(times[:-1]):
        expected -= math.log(shape(t1)) - integrate.quad(shape, t0, t1)[0]
    expected += integrate.quad(shape, times[-2], times[-1])[0]  # -log survival of the last interval
    sequence = EventSequence(times, np.zeros(len(times), np.int64))
    assert process_meta_tpp_nll([sequence], shape) == pytest.approx(expected / len(times), rel=1e-9)


def test_the_generating_process_scores_below_a_wrong_amplitude() -> None:
    """On its own sequences the true intensity beats the same mean rate with another amplitude."""
    sequences = generate_sin(300, seed=5)
    truth = process_meta_tpp_nll(sequences, SinIntensity())
    assert truth < process_meta_tpp_nll(sequences, SinIntensity(b=0.0)) - 0.02
    assert truth < process_meta_tpp_nll(sequences, SinIntensity(b=0.5))

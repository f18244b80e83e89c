"""Event-by-event ``step`` predictions equal the parallel pass (float64), for each deployed backbone."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from recurrent_attention.models import Aaren, Transformer
from recurrent_attention.models.linear_attention import LinearTransformer
from recurrent_attention.tasks.ef.head import EventModel
from recurrent_attention.tasks.ef.stream import EventStream, parallel_predictions, stream_predictions

BACKBONES = {
    "aaren": lambda: Aaren(d_model=16, n_heads=2, n_layers=2, d_ff=32, dropout=0.1),
    "transformer": lambda: Transformer(d_model=16, n_heads=2, n_layers=2, d_ff=32, dropout=0.1),
    "linear_attention": lambda: LinearTransformer(d_model=16, n_heads=2, n_layers=2, d_ff=32, dropout=0.1),
}


@pytest.mark.parametrize("name", sorted(BACKBONES))
@pytest.mark.parametrize("n_marks", [1, 5])
def test_stream_equals_parallel(name: str, n_marks: int) -> None:
    torch.manual_seed(0)
    model = EventModel(BACKBONES[name](), n_marks).double()
    rng = np.random.default_rng(0)
    times = np.cumsum(rng.exponential(0.7, size=40))
    marks = rng.integers(0, n_marks, size=40)
    streamed = stream_predictions(model, times, marks)
    parallel = parallel_predictions(model, times, marks)
    assert not model.training
    for s, p in zip(streamed, parallel, strict=True):
        for a, b in [(s.mixture.log_weights, p.mixture.log_weights), (s.mixture.mu, p.mixture.mu)]:
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(s.mixture.sigma, p.mixture.sigma, rtol=1e-10, atol=1e-12)
        assert s.interval_mean == pytest.approx(p.interval_mean, rel=1e-10)
        assert s.time_mean == pytest.approx(p.time_mean, rel=1e-12)
        if n_marks > 1:
            torch.testing.assert_close(s.mark_logits, p.mark_logits, rtol=1e-10, atol=1e-12)
            assert s.mark == p.mark
        else:
            assert s.mark is None


def test_stream_predictions_depend_on_history() -> None:
    """Guard against a stream that ignores its state: a different past changes the next prediction."""
    torch.manual_seed(0)
    model = EventModel(BACKBONES["aaren"](), 3).double()
    a = stream_predictions(model, [0.0, 1.0, 1.5], [0, 1, 2])[-1]
    b = stream_predictions(model, [0.0, 0.2, 1.5], [2, 1, 2])[-1]
    assert abs(a.interval_mean - b.interval_mean) > 1e-6


def test_stream_rejects_events_out_of_order() -> None:
    stream = EventStream(EventModel(BACKBONES["aaren"](), 1))
    stream.observe(1.0)
    with pytest.raises(ValueError, match="time order"):
        stream.observe(0.5)


@pytest.mark.parametrize("name", sorted(BACKBONES))
@pytest.mark.parametrize("time_every_layer", [False, True])
def test_stream_steps_through_the_deployment_step(name: str, time_every_layer: bool) -> None:
    """In float32 the stream takes the backbone's fast step (compiled or lean, not the model's own),
    THP's every-layer encoding included, and still gives the parallel pass's predictions."""
    torch.manual_seed(0)
    model = EventModel(BACKBONES[name](), 5, time_every_layer=time_every_layer)
    rng = np.random.default_rng(1)
    times = np.cumsum(rng.exponential(0.7, size=30))
    marks = rng.integers(0, 5, size=30)
    stream = EventStream(model)
    assert stream.stepper is not model.backbone
    calls = []
    fast_step = stream.stepper.step
    stream.stepper.step = lambda *args, **kwargs: calls.append(kwargs) or fast_step(*args, **kwargs)
    streamed = [stream.observe(float(t), int(k)) for t, k in zip(times, marks, strict=True)]
    assert len(calls) == len(times)
    assert all(("reinject" in kwargs) == time_every_layer for kwargs in calls)
    parallel = parallel_predictions(model, times, marks)
    for s, p in zip(streamed, parallel, strict=True):
        torch.testing.assert_close(s.mixture.mu, p.mixture.mu, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(s.mark_logits, p.mark_logits, rtol=1e-4, atol=1e-5)

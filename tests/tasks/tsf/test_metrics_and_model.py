"""Test metrics against numpy; the forecaster's normalisation and causality."""

from __future__ import annotations

import numpy as np
import torch

from recurrent_attention.models import Aaren
from recurrent_attention.tasks.tsf.head import Forecaster
from recurrent_attention.tasks.tsf.metrics import ErrorTotals


def test_error_totals_equal_numpy_over_uneven_batches() -> None:
    rng = np.random.default_rng(0)
    predictions = [rng.normal(size=(n, 5, 3)) for n in (32, 32, 7)]
    targets = [rng.normal(size=p.shape) for p in predictions]
    totals = ErrorTotals()
    for p, t in zip(predictions, targets, strict=True):
        totals.update(torch.from_numpy(p).float(), torch.from_numpy(t).float())
    pred, true = np.concatenate(predictions), np.concatenate(targets)
    result = totals.compute()
    np.testing.assert_allclose(
        result["mse"], np.mean((pred.astype(np.float32) - true.astype(np.float32)) ** 2), rtol=1e-6
    )
    np.testing.assert_allclose(
        result["mae"], np.mean(np.abs(pred.astype(np.float32) - true.astype(np.float32))), rtol=1e-6
    )


def test_forecast_is_invariant_to_the_window_scale() -> None:
    """Input normalisation: shifting and scaling a window shifts and scales the forecast alike."""
    torch.manual_seed(0)
    model = Forecaster(Aaren(16, 2, 1, 32, dropout=0.0), 3, 4, seq_len=12, pred_len=5, dropout=0.0).eval()
    x, xm, ym = torch.randn(2, 12, 3), torch.randn(2, 12, 4), torch.randn(2, 5, 4)
    with torch.no_grad():
        base = model(x, xm, ym)
        moved = model(x * 7.0 + 100.0, xm, ym)
    torch.testing.assert_close(moved, base * 7.0 + 100.0, rtol=1e-4, atol=1e-3)


def test_placeholders_never_see_later_time_features() -> None:
    torch.manual_seed(0)
    model = Forecaster(Aaren(16, 2, 2, 32, dropout=0.0), 3, 4, seq_len=12, pred_len=5, dropout=0.0).eval()
    x, xm, ym = torch.randn(1, 12, 3), torch.randn(1, 12, 4), torch.randn(1, 5, 4)
    changed = ym.clone()
    changed[:, 3] += 1.0
    with torch.no_grad():
        a, b = model(x, xm, ym), model(x, xm, changed)
    assert torch.equal(a[:, :3], b[:, :3]) and not torch.allclose(a[:, 3], b[:, 3])

"""NLL per event, RMSE of the mixture mean and mark accuracy, accumulated exactly over a split.

``nll="per_predicted_event"``: NLL / number of predicted events; ``rmse="per_event"``: sqrt(mean
over predicted events of the squared error). ``"meta_tpp"`` reproduces Meta TPP (the ``reference``
protocol's, :mod:`.protocol`): its NLL (each last interval scored by its survival,
:mod:`.likelihood`) divided by every event including each sequence's unpredicted first one, and its
``MaskedRMSE``, which squares each sequence's SUM of errors before dividing by the number of
events. ``nll_meta_tpp``, Meta TPP's NLL whatever the protocol, is reported too, so
that tables can set the paper's NLL beside the same quantity. Accuracy is in percent, as in the
paper's tables.
"""

from __future__ import annotations

import math

from recurrent_attention.tasks.ef.likelihood import EventScores


class EventTotals:
    """Running float64 sums, so a split's metrics do not depend on how it was batched."""

    def __init__(self) -> None:
        self.nll = 0.0
        self.meta_tpp_nll = 0.0
        self.n_predicted = 0
        self.n_events = 0
        self.squared_error = 0.0
        self.squared_sequence_error = 0.0
        self.correct = 0
        self.marked = False

    def update(self, scores: EventScores, targets: dict) -> None:
        """Add one batch: ``targets`` is the batch dict (``intervals``, ``marks``, ``lengths``)."""
        target = scores.target
        error = (scores.mean.double() - targets["intervals"][:, 1:].double()) * target
        self.nll += float(scores.nll_sum().detach().double())
        self.meta_tpp_nll += float(scores.meta_tpp_nll_sum().detach().double())
        self.n_predicted += int(target.sum())
        self.n_events += int(targets["lengths"].sum())
        self.squared_error += float(error.detach().square().sum())
        self.squared_sequence_error += float(error.detach().sum(dim=1).square().sum())
        if scores.mark_pred is not None:
            self.correct += int(((scores.mark_pred == targets["marks"][:, 1:]) & target).sum())
            self.marked = True

    def compute(self, nll: str = "per_predicted_event", rmse: str = "per_event") -> dict[str, float]:
        """The split's metrics with the protocol's ``nll`` and ``rmse`` (``meta_tpp`` or ours)."""
        if self.n_predicted == 0:
            raise RuntimeError(
                "no predicted events were accumulated (every sequence has fewer than 2 events?)"
            )
        meta_tpp_nll = self.meta_tpp_nll / self.n_events
        squared = self.squared_sequence_error if rmse == "meta_tpp" else self.squared_error
        metrics = {
            "nll": meta_tpp_nll if nll == "meta_tpp" else self.nll / self.n_predicted,
            "rmse": math.sqrt(squared / self.n_predicted),
        }
        metrics["nll_meta_tpp"] = meta_tpp_nll
        if self.marked:
            metrics["acc"] = 100.0 * self.correct / self.n_predicted
        return metrics

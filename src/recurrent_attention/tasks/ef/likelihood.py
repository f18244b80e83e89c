"""Per-event log-likelihood terms of a padded batch, shared by training, evaluation and tests.

A sequence of N events contributes N - 1 predicted events: the first event is conditioning only
(its interval from an unknown start is not modelled, as in Meta TPP). Event i + 1 is scored under
the prediction made at event i. After the last event, the window end adds the survival term
``log P(tau > t_end - t_N)``; the readers put the window end at the last event (term 0) unless the
data defines a window (the synthetic ``sin`` set observes ``[0, 32 pi]``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from recurrent_attention.tasks.ef.head import EventModel
from recurrent_attention.tasks.ef.mixture import LogNormalMixture


@dataclass
class EventScores:
    """Everything the loss and the metrics need, for one batch.

    ``time_ll``, ``mark_ll``, ``mean`` and ``mark_pred`` are ``(B, N - 1)``: column i is the
    prediction for event i + 1; ``target`` marks the real (non-padding) ones. ``survival_ll`` is ``(B,)``.
    """

    time_ll: Tensor
    mark_ll: Tensor
    survival_ll: Tensor
    target: Tensor
    mean: Tensor
    mark_pred: Tensor | None

    def nll_sum(self) -> Tensor:
        """Negative log-likelihood of the whole batch (sum over sequences)."""
        return -(self.time_ll.sum() + self.mark_ll.sum() + self.survival_ll.sum())


def score_batch(model: EventModel, batch: dict[str, Tensor], time_eps: float = 0.0) -> EventScores:
    """Run the model over a padded batch and evaluate every term of the log-likelihood.

    ``time_eps`` is added to intervals before the log-density (Meta TPP adds 1e-12) so that
    simultaneous events (interval 0, e.g. StackOverflow's quantised times) have a finite density.
    """
    intervals, marks, mask = batch["intervals"], batch["marks"], batch["mask"]
    hidden = model(intervals, marks)
    mixture, logits = model.predict(hidden)
    target = mask[:, 1:]
    future = mixture[:, :-1]
    # Padding holds interval 1 so that every term stays finite; torch.where then drops it.
    next_interval = torch.where(target, intervals[:, 1:], torch.ones_like(intervals[:, 1:])) + time_eps
    zero = intervals.new_zeros(())
    time_ll = torch.where(target, future.log_prob(next_interval), zero)
    if logits is not None:
        log_probs = torch.log_softmax(logits[:, :-1], dim=-1)
        mark_ll = torch.where(target, log_probs.gather(-1, marks[:, 1:, None]).squeeze(-1), zero)
        mark_pred = logits[:, :-1].argmax(dim=-1)
    else:
        mark_ll, mark_pred = torch.zeros_like(time_ll), None
    survival_ll = _survival(mixture, batch["lengths"], batch["tail"])
    return EventScores(time_ll, mark_ll, survival_ll, target, future.mean(), mark_pred)


def _survival(mixture: LogNormalMixture, lengths: Tensor, tail: Tensor) -> Tensor:
    """``log P(tau > tail)`` under the prediction made at each sequence's last event (0 when tail is 0)."""
    rows = torch.arange(len(lengths), device=lengths.device)
    last = mixture[rows, lengths - 1]
    positive = tail > 0
    survival = last.log_survival(torch.where(positive, tail, torch.ones_like(tail)))
    return torch.where(positive, survival, tail.new_zeros(()))

"""Per-event log-likelihood terms of a padded batch, shared by training, evaluation and tests.

A sequence of N events contributes N - 1 predicted events: the first event is conditioning only
(its interval from an unknown start is not modelled, as in Meta TPP). Event i + 1 is scored under
the prediction made at event i. After the last event, the window end adds the survival term
``log P(tau > t_end - t_N)``; the readers put the window end at the last event (term 0) unless the
data defines a window (the synthetic ``sin`` set observes ``[0, 32 pi]``).

Meta TPP's NLL (the protocol's ``nll=meta_tpp``; BorealisAI/meta-tpp ``prob_dists.py`` LogNormalMixture and
``tpp_network.py`` TransformerMix) differs in one term: it treats each sequence's last event as the
end of the observation window ("ignore the last time as it is xmax"), so the last interval is scored
by its log survival (with its clamped CDF, :meth:`LogNormalMixture.log_survival_clamped`) instead of
its log density, and no window term is added; the last event's mark is still scored. That sum is
its training loss, and divided by ALL events (each first one included) its val/test NLL.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from recurrent_attention.ops.categorical import class_log_likelihood
from recurrent_attention.ops.host_reads import reads_are_free
from recurrent_attention.tasks.ef.head import EventModel
from recurrent_attention.tasks.ef.mixture import LogNormalMixture


@dataclass
class EventScores:
    """Everything the loss and the metrics need, for one batch.

    ``time_ll``, ``mark_ll``, ``mean`` and ``mark_pred`` are ``(B, N - 1)``: column i is the
    prediction for event i + 1; ``target`` marks the real (non-padding) ones. ``survival_ll`` (the
    window end), ``last_time_ll`` (the density term of each sequence's last event, already in
    ``time_ll``) and ``last_survival_ll`` (Meta TPP's survival term for that same interval) are
    ``(B,)``, 0 for a sequence of one event.
    """

    time_ll: Tensor
    mark_ll: Tensor
    survival_ll: Tensor
    target: Tensor
    mean: Tensor
    mark_pred: Tensor | None
    last_time_ll: Tensor
    last_survival_ll: Tensor

    def nll_sum(self) -> Tensor:
        """Negative log-likelihood of the whole batch (sum over sequences)."""
        return -(self.time_ll.sum() + self.mark_ll.sum() + self.survival_ll.sum())

    def meta_tpp_nll_sum(self) -> Tensor:
        """Meta TPP's loss: each last interval scored by its log survival, not its density; no window term."""
        time_ll = self.time_ll.sum() - self.last_time_ll.sum() + self.last_survival_ll.sum()
        return -(time_ll + self.mark_ll.sum())

    def protocol_nll_sum(self, nll: str) -> Tensor:
        """The summed NLL a protocol trains on (its ``nll``): ours or Meta TPP's (``meta_tpp``)."""
        return self.meta_tpp_nll_sum() if nll == "meta_tpp" else self.nll_sum()


def score_batch(model: EventModel, batch: dict[str, Tensor], time_eps: float = 0.0) -> EventScores:
    """Run the model over a padded batch and evaluate every term of the log-likelihood.

    ``time_eps`` is added to intervals before the log-density (Meta TPP adds 1e-12) so that
    simultaneous events (interval 0, e.g. StackOverflow's quantised times) have a finite density.
    """
    intervals, marks, mask = batch["intervals"], batch["marks"], batch["mask"]
    hidden = model(intervals, marks)
    mixture = model.time_head(hidden)
    target = mask[:, 1:]
    future = mixture[:, :-1]
    # Padding holds interval 1 so that every term stays finite; torch.where then drops it.
    next_interval = torch.where(target, intervals[:, 1:], torch.ones_like(intervals[:, 1:])) + time_eps
    zero = intervals.new_zeros(())
    time_ll = torch.where(target, future.log_prob(next_interval), zero)
    if model.mark_head is not None:
        mark_ll, mark_pred = _predicted_marks(model.mark_head, hidden[:, :-1], marks[:, 1:], target)
    else:
        mark_ll, mark_pred = torch.zeros_like(time_ll), None
    lengths = batch["lengths"]
    survival_ll = _survival(mixture, lengths, batch["tail"])
    last_time_ll, last_survival_ll = _last_interval(future, time_ll, next_interval, lengths)
    return EventScores(
        time_ll, mark_ll, survival_ll, target, future.mean(), mark_pred, last_time_ll, last_survival_ll
    )


def _predicted_marks(
    mark_head: nn.Linear, hidden: Tensor, next_marks: Tensor, target: Tensor
) -> tuple[Tensor, Tensor]:
    """Log-probability and argmax of each predicted event's mark, ``(B, N - 1)`` each, 0 at padding.

    On a CPU the head runs only where ``target`` holds a real event: a batch is padded to its
    longest sequence, and with Wiki's 8227 marks the logits of the padded positions cost most of an
    epoch. Selecting those rows reads the mask on the host, which elsewhere would stall the device
    every step (:func:`~recurrent_attention.ops.host_reads.reads_are_free`): there the head runs on
    every row and the padding is masked out. Its softmax goes through
    :func:`~recurrent_attention.ops.categorical.class_log_likelihood`, which keeps those logits in
    cache on a CPU.
    """
    if reads_are_free(hidden.device):
        scored, best = class_log_likelihood(
            hidden[target], mark_head.weight, mark_head.bias, next_marks[target]
        )
        mark_ll = scored.new_zeros(target.shape).masked_scatter(target, scored)
        mark_pred = torch.zeros_like(next_marks).masked_scatter(target, best)
        return mark_ll, mark_pred
    marks = torch.where(target, next_marks, 0)  # a padding mark may be any index: 0 is a class
    scored, best = class_log_likelihood(
        hidden.flatten(0, 1), mark_head.weight, mark_head.bias, marks.flatten()
    )
    return torch.where(target, scored.view(target.shape), 0.0), torch.where(
        target, best.view(target.shape), 0
    )


def _last_interval(
    future: LogNormalMixture, time_ll: Tensor, next_interval: Tensor, lengths: Tensor
) -> tuple[Tensor, Tensor]:
    """Density term and Meta TPP's clamped survival term of each sequence's last interval, ``(B,)`` each."""
    rows = torch.arange(len(lengths), device=lengths.device)
    column = (lengths - 2).clamp_min(0)
    predicted = lengths >= 2
    zero = time_ll.new_zeros(())
    survival = future[rows, column].log_survival_clamped(next_interval[rows, column])
    return (
        torch.where(predicted, time_ll[rows, column], zero),
        torch.where(predicted, survival, zero),
    )


def _survival(mixture: LogNormalMixture, lengths: Tensor, tail: Tensor) -> Tensor:
    """``log P(tau > tail)`` under the prediction made at each sequence's last event (0 when tail is 0)."""
    rows = torch.arange(len(lengths), device=lengths.device)
    last = mixture[rows, lengths - 1]
    positive = tail > 0
    survival = last.log_survival(torch.where(positive, tail, torch.ones_like(tail)))
    return torch.where(positive, survival, tail.new_zeros(()))

"""Next-event predictions for a growing event stream, one event at a time.

:class:`EventStream` feeds each arriving event through the backbone's fastest step
(:func:`~recurrent_attention.deploy.fast_stepper`, equal to ``backbone.step``): with Aaren the carried
state has a constant size however long the stream, with the Transformer it is a KV cache. Its
predictions equal those of the parallel pass over the whole sequence (tests check it), so a model
trained in parallel can be deployed on a live stream (``scripts/ef_stream.py`` streams a trained
run's test sequence: ``cli/ef_stream.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from recurrent_attention.deploy import fast_stepper
from recurrent_attention.models.base import State
from recurrent_attention.tasks.ef.head import EventModel
from recurrent_attention.tasks.ef.mixture import LogNormalMixture


@dataclass
class NextEvent:
    """The prediction made after observing the event at ``after``."""

    after: float
    mixture: LogNormalMixture
    mark_logits: Tensor | None

    @property
    def interval_mean(self) -> float:
        return float(self.mixture.mean())

    @property
    def time_mean(self) -> float:
        return self.after + self.interval_mean

    @property
    def mark(self) -> int | None:
        return None if self.mark_logits is None else int(self.mark_logits.argmax())


class EventStream:
    """Observe events in time order; each call returns the distribution of the next event."""

    def __init__(self, model: EventModel) -> None:
        self.model = model.eval()
        self.stepper = fast_stepper(model.backbone)
        parameter = next(model.parameters())
        self.state: State = self.stepper.init_state(1, parameter.device, parameter.dtype)
        self.last_time: float | None = None

    @torch.no_grad()
    def observe(self, time: float, mark: int = 0) -> NextEvent:
        if self.last_time is not None and time < self.last_time:
            raise ValueError(f"events must arrive in time order: {time} < {self.last_time}")
        parameter = next(self.model.parameters())
        interval = 0.0 if self.last_time is None else time - self.last_time
        interval_t = torch.tensor([interval], dtype=parameter.dtype, device=parameter.device)
        mark_t = torch.tensor([mark], device=parameter.device)
        hidden, self.state = self.model.step(interval_t, mark_t, self.state, self.stepper)
        mixture, logits = self.model.predict(hidden[0])
        self.last_time = time
        return NextEvent(time, mixture, logits)


@torch.no_grad()
def stream_predictions(model: EventModel, times: Sequence[float], marks: Sequence[int]) -> list[NextEvent]:
    """The prediction after each event of one sequence, computed event by event."""
    stream = EventStream(model)
    return [stream.observe(float(t), int(k)) for t, k in zip(times, marks, strict=True)]


@torch.no_grad()
def parallel_predictions(model: EventModel, times: Sequence[float], marks: Sequence[int]) -> list[NextEvent]:
    """The same predictions from one parallel pass over the whole sequence."""
    model.eval()
    parameter = next(model.parameters())
    times_t = torch.as_tensor(
        np.asarray(times, dtype=np.float64), dtype=parameter.dtype, device=parameter.device
    )
    intervals = torch.diff(times_t, prepend=times_t[:1])
    marks_t = torch.as_tensor(np.asarray(marks, dtype=np.int64), device=parameter.device)
    hidden = model(intervals[None], marks_t[None])[0]
    mixture, logits = model.predict(hidden)
    return [
        NextEvent(float(t), mixture[i], None if logits is None else logits[i]) for i, t in enumerate(times_t)
    ]

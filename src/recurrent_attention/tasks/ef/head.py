"""Event embedding and prediction heads around any backbone (THP encoder, Meta TPP decoder).

Event i is embedded as ``mark_embedding(k_i) + temporal_encoding(tau_i)`` where ``tau_i`` is the
time since the previous event (0 for the first event): Meta TPP feeds its ``times`` array, which
holds inter-event times, to THP's sinusoidal temporal encoding. THP (Meta TPP's ``thp/models.py``)
adds that encoding again before every layer; by default it is added once at the input, so that any
backbone fits, and ``time_every_layer=True`` (the ``reference`` protocol's) has a :class:`LayerStack` add it
before each later block as well (its ``reinject`` input), as Meta TPP does.
The backbone output at event i summarises the history up to and including event i and parameterises
the next event: a mixture of log-normals over ``tau_{i+1}`` and a categorical over ``k_{i+1}``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from recurrent_attention.errors import ConfigError
from recurrent_attention.models.base import Backbone, State
from recurrent_attention.models.blocks import LayerStack
from recurrent_attention.tasks.ef.mixture import LogNormalMixture

if TYPE_CHECKING:  # the training path does not import the deployment package
    from recurrent_attention.deploy import Stepper


def temporal_encoding(t: Tensor, d_model: int) -> Tensor:
    """THP's encoding ``t / 10000^(2 floor(j/2) / d)``, sin on even j, cos on odd j: ``(...) -> (..., d)``."""
    j = torch.arange(d_model, device=t.device)
    scale = torch.pow(10000.0, 2.0 * torch.div(j, 2, rounding_mode="floor") / d_model).to(t.dtype)
    angle = t.unsqueeze(-1) / scale
    return torch.where(j % 2 == 0, torch.sin(angle), torch.cos(angle))


class MixtureHead(nn.Module):
    """Meta TPP's decoder: ``Linear -> tanh -> Linear`` to K weights, locations and scales."""

    def __init__(self, d_model: int, n_components: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_model, d_model), nn.Tanh(), nn.Linear(d_model, 3 * n_components))

    def forward(self, hidden: Tensor) -> LogNormalMixture:
        weight_logits, mu, sigma_logits = self.net(hidden).chunk(3, dim=-1)
        return LogNormalMixture(F.log_softmax(weight_logits, dim=-1), mu, F.softplus(sigma_logits))


class EventModel(nn.Module):
    """Embedding -> backbone -> (time mixture, mark logits); no mark head for unmarked data (n_marks 1)."""

    def __init__(
        self, backbone: Backbone, n_marks: int, n_components: int = 8, time_every_layer: bool = False
    ) -> None:
        super().__init__()
        if time_every_layer and not isinstance(backbone, LayerStack):
            raise ConfigError(
                f"task.rules.time_every_layer=true (THP's temporal encoding before every layer) needs a "
                f"layer-stack backbone, not {type(backbone).__name__}: use model=transformer or model=aaren, "
                "or run the default protocol (task.compat=default)"
            )
        d_model = backbone.d_model
        self.backbone = backbone
        self.time_every_layer = time_every_layer
        self.n_marks = n_marks
        self.mark_embedding = nn.Embedding(n_marks, d_model)
        self.time_head = MixtureHead(d_model, n_components)
        self.mark_head = nn.Linear(d_model, n_marks) if n_marks > 1 else None

    def embed(self, intervals: Tensor, marks: Tensor) -> tuple[Tensor, Tensor]:
        """``intervals``, ``marks`` of shape ``(...)`` -> event embeddings and their temporal encodings,
        each ``(..., d_model)``."""
        time = temporal_encoding(intervals, self.backbone.d_model)
        return self.mark_embedding(marks) + time, time

    def forward(self, intervals: Tensor, marks: Tensor) -> Tensor:
        """``(B, N)`` events -> hidden ``(B, N, d_model)``; position i conditions the prediction of i + 1."""
        x, time = self.embed(intervals, marks)
        hidden, _ = self.backbone(x, reinject=time) if self.time_every_layer else self.backbone(x)
        return hidden

    def step(
        self, interval: Tensor, mark: Tensor, state: State, stepper: Stepper | None = None
    ) -> tuple[Tensor, State]:
        """One event per sequence, ``(B,)`` each -> ``(hidden (B, d_model), state)``, as ``forward`` gives.

        ``stepper`` steps the backbone in its place: a deployment form of it
        (:func:`recurrent_attention.deploy.fast_stepper`), tested equal to its own step."""
        x_t, time = self.embed(interval, mark)
        step = (stepper or self.backbone).step
        return step(x_t, state, reinject=time) if self.time_every_layer else step(x_t, state)

    def predict(self, hidden: Tensor) -> tuple[LogNormalMixture, Tensor | None]:
        """Next-event distribution from hidden states: the interval mixture and mark logits (or None)."""
        logits = self.mark_head(hidden) if self.mark_head is not None else None
        return self.time_head(hidden), logits

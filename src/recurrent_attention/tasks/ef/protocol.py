"""EF's protocol: which NLL and RMSE are trained and reported, which checkpoint is tested, and where
THP's temporal encoding enters (conf/task/ef/protocol/)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from recurrent_attention.tasks.protocol import TaskProtocol


@dataclass(frozen=True)
class EFProtocol(TaskProtocol):
    """``nll``: ``per_predicted_event`` (ours, :meth:`.EventScores.nll_sum` over the predicted events)
    or ``meta_tpp`` (each last interval scored by its survival, divided by every event), the training
    loss and ``nll``'s metric. ``rmse``: over events (``per_event``) or Meta TPP's ``MaskedRMSE``
    (``meta_tpp``: each sequence's summed error squared). ``checkpoint_metric``: what the tested
    checkpoint is the best of (``task.checkpoint.metric``, which ``train.py`` reads; early stopping
    follows ``val/nll`` under both). ``time_every_layer``: THP's temporal encoding before every
    encoder layer (a ``LayerStack`` backbone), else once at the input."""

    family = "ef"
    choices: ClassVar[dict[str, tuple[str, ...]]] = {
        "nll": ("per_predicted_event", "meta_tpp"),
        "rmse": ("per_event", "meta_tpp"),
        "checkpoint_metric": ("val/nll", "val/rmse"),
    }
    nll: str
    rmse: str
    checkpoint_metric: str
    time_every_layer: bool


# conf/task/ef/protocol/default.yaml, for a task built without a config (a test holds them equal)
DEFAULT = EFProtocol(
    nll="per_predicted_event", rmse="per_event", checkpoint_metric="val/nll", time_every_layer=False
)

"""TSC's protocol: how an epoch is selected, how splits are scaled, the value embedding and the
learning-rate schedule (conf/task/tsc/protocol/)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from recurrent_attention.tasks.protocol import TaskProtocol
from recurrent_attention.tasks.tsc.head import EMBEDDINGS


@dataclass(frozen=True)
class TSCProtocol(TaskProtocol):
    """``validation``: the epoch is selected on a stratified part of TRAIN (``train_split``) or on
    TEST (``test``: TSLib @a23cfce, which then trains on all of TRAIN). ``test_scaling``: TEST
    standardised with the training statistics (``train``) or its ``own``. ``selection_metric``: the
    monitored metric (``task.monitor.metric``); ``val/tslib_improvements`` counts an equal accuracy
    as an improvement, as TSLib's early stopping does, and the module logs it only then.
    ``embedding``: the default of ``task.embedding``. ``lr_scheduler``: the scheduler partial, or
    ``None`` for a constant rate (``task.module.scheduler`` reads it)."""

    family = "tsc"
    choices: ClassVar[dict[str, tuple[str, ...]]] = {
        "validation": ("train_split", "test"),
        "test_scaling": ("train", "own"),
        "selection_metric": ("val/acc", "val/tslib_improvements"),
        "embedding": EMBEDDINGS,
    }
    validation: str
    test_scaling: str
    selection_metric: str
    embedding: str
    lr_scheduler: Callable[..., Any] | None


# conf/task/tsc/protocol/default.yaml, for a task built without a config (a test holds them equal)
DEFAULT = TSCProtocol(
    validation="train_split",
    test_scaling="train",
    selection_metric="val/acc",
    embedding="linear",
    lr_scheduler=None,
)

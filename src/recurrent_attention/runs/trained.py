"""A run that took no optimiser step has no result: it is refused, never tested and summarised.

``trainer.max_epochs=0``, ``trainer.limit_train_batches=0`` and the like are refused up front by
``config_checks``; what only the data can tell (``task.batch_size`` larger than the training split,
whose incomplete last batch is dropped, so the loader is empty) is caught here, right after
``fit``: Lightning skips an empty loader with a warning and would test the random initialisation.
"""

from __future__ import annotations

from collections.abc import Sized
from typing import Any

import lightning as L
from omegaconf import DictConfig

from recurrent_attention.errors import ConfigError


class NothingTrainedError(ConfigError):
    """The run took no optimiser step; the message names the value that left nothing to train."""


def _training_samples(trainer: L.Trainer) -> int | None:
    """The training split's size, when the loader Lightning set up has a sized dataset."""
    loader: Any = trainer.train_dataloader
    dataset = getattr(loader, "dataset", None)
    return len(dataset) if isinstance(dataset, Sized) else None


def require_optimiser_steps(cfg: DictConfig, trainer: L.Trainer) -> None:
    """Raise :class:`NothingTrainedError` when ``fit`` took no optimiser step (a resumed run counts
    the steps of its earlier segments)."""
    if trainer.global_step > 0:
        return
    samples = _training_samples(trainer)
    batch_size = cfg.task.get("batch_size")
    if samples == 0:
        raise NothingTrainedError(
            "the training split is empty (0 samples), so nothing would be trained: "
            "use a longer data file or shorter task windows"
        )
    if samples is not None and batch_size is not None and samples < batch_size:
        raise NothingTrainedError(
            f"task.batch_size={batch_size} is larger than the training split ({samples} samples; an "
            f"incomplete batch is dropped), so nothing would be trained: use task.batch_size<={samples}"
        )
    raise NothingTrainedError(
        f"the run took no optimiser step (trainer.max_epochs={trainer.max_epochs}, "
        f"trainer.limit_train_batches={trainer.limit_train_batches}, {trainer.num_training_batches} "
        "training batches), so nothing would be trained: check those values and the training data"
    )

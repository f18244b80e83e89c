"""Exact resume: a killed run, started again, ends with the same metrics as one never killed.

Every random draw of a training epoch is made a function of (seed, epoch): shuffled loaders use
``EpochShuffle`` (the order of epoch ``e`` comes from its own generator seeded by (seed, e)), and
``ReproducibleEpochs`` reseeds Python, NumPy and torch right before the first batch of each epoch,
after the loader's iterator exists (Lightning creates it before or after ``on_train_epoch_start``
depending on whether the run was resumed, and creating one draws from the global generator).
An end-of-epoch checkpoint therefore needs nothing else. A checkpoint written mid-epoch (on
SIGTERM or Ctrl-C) also holds the RNG states and the number of batches done: on resume the
loader is advanced past them and the states are restored. That is exact for data loading in the
main process (``num_workers=0``, the default) and for tasks that carry no state from one batch to
the next; a language model's carried memory starts empty after a mid-epoch resume.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator, Sized
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities.exceptions import SIGTERMException
from torch.utils.data import RandomSampler

STATE_KEY = "reproducible_epochs"
CHECKPOINTS = "checkpoints"
LAST_NAME = "last"


def last_checkpoint_path(run_dir: str | Path) -> Path:
    """The run folder's resumable checkpoint: written after every epoch and on SIGTERM, read on restart."""
    return Path(run_dir) / CHECKPOINTS / f"{LAST_NAME}{ModelCheckpoint.FILE_EXTENSION}"


def epoch_seed(seed: int, epoch: int, stream: int = 0) -> int:
    """A 32-bit seed that depends on (seed, epoch, stream) and on nothing else."""
    return int(np.random.SeedSequence([seed, epoch, stream]).generate_state(1)[0])


class EpochShuffle(RandomSampler):
    """A shuffle whose order in epoch ``e`` is a function of (seed, e): ``set_epoch`` picks it.

    The seed is the run's (``PL_GLOBAL_SEED``, set by ``seed_everything``), the same one that
    Lightning's distributed sampler uses; being a ``RandomSampler``, it is replaced by that sampler
    under DDP.
    """

    def __init__(self, data_source: Sized) -> None:
        super().__init__(data_source)
        self.seed = int(os.environ.get("PL_GLOBAL_SEED", 0))
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        generator = torch.Generator().manual_seed(epoch_seed(self.seed, self.epoch))
        yield from torch.randperm(len(self.data_source), generator=generator).tolist()


def capture_rng_states() -> dict[str, Any]:
    """Every generator's state, in types that ``torch.load(weights_only=True)`` accepts."""
    kind, keys, position, has_gauss, cached_gaussian = np.random.get_state()
    states: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": (kind, torch.from_numpy(keys.astype(np.int64)), position, has_gauss, cached_gaussian),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def restore_rng_states(states: dict[str, Any]) -> None:
    random.setstate(states["python"])
    kind, keys, position, has_gauss, cached_gaussian = states["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), position, has_gauss, cached_gaussian))
    torch.set_rng_state(states["torch"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


def seed_all(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also every CUDA device


class ReproducibleEpochs(L.Callback):
    """Reseed at each epoch's first batch; on SIGTERM/Ctrl-C save a resumable ``last.ckpt``."""

    def __init__(self, seed: int, last_checkpoint: str | Path) -> None:
        self.seed = seed
        self.last_checkpoint = Path(last_checkpoint)
        self.batches_done = 0
        self._resume: dict[str, Any] | None = None

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.batches_done = 0

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if batch_idx == 0:
            seed_all(epoch_seed(self.seed, trainer.current_epoch, stream=1))

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self.batches_done = batch_idx + 1

    def on_save_checkpoint(
        self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        checkpoint[STATE_KEY] = {
            "epoch": trainer.current_epoch,
            "batches_done": self.batches_done,
            "rng": capture_rng_states(),
        }

    def on_load_checkpoint(
        self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        self._resume = checkpoint.get(STATE_KEY)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Mid-epoch resume: the loader skips the batches already done, the RNGs continue."""
        resume, self._resume = self._resume, None
        if not resume or not resume["batches_done"] or trainer.num_training_batches <= resume["batches_done"]:
            return
        loaders = trainer.fit_loop._combined_loader.flattened
        for loader in loaders:
            sampler = getattr(loader, "sampler", None)
            if hasattr(sampler, "set_epoch"):
                sampler.set_epoch(resume["epoch"])
        # Lightning restarts a plain DataLoader from its first batch (it only counts the batches
        # done), so the iterator it already made is advanced here.
        iterator = trainer.fit_loop._data_fetcher.iterator
        for _ in range(resume["batches_done"]):
            next(iterator)
        self.batches_done = resume["batches_done"]
        restore_rng_states(resume["rng"])

    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException
    ) -> None:
        if (
            isinstance(exception, (SIGTERMException, KeyboardInterrupt))
            and trainer.state.fn == TrainerFn.FITTING
        ):
            # the whole state, as last.ckpt always is (left unset, Lightning logs that it chose this)
            trainer.save_checkpoint(self.last_checkpoint, weights_only=False)


class LastCheckpoint(ModelCheckpoint):
    """``last.ckpt``, written at the end of every epoch, whether or not the monitored metric improved.

    ``ModelCheckpoint(save_last=True)`` cannot be trusted with this: from Lightning 2.6 it copies
    ``last.ckpt`` only when it also saves a top-k checkpoint, that is when the metric improves. A run
    killed after epochs without improvement then resumes from its best epoch and trains the later
    ones again (an ETTh1 paper-size epoch is 20 CPU-minutes, EF's patience 500 epochs), and a
    protocol that tests "the last checkpoint" (PI-ViT) would test the best. Lightning runs checkpoint
    callbacks after the others, in the order given, so placed after the best-checkpoint callback this
    one saves the state it has just updated.
    """

    def __init__(self, run_dir: str | Path) -> None:
        self.path = last_checkpoint_path(run_dir)
        super().__init__(
            dirpath=self.path.parent, filename=LAST_NAME, save_top_k=1, enable_version_counter=False
        )

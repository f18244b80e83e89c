"""What every task's LightningModule shares: a backbone, and an optimiser/scheduler from Hydra partials."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import lightning as L
import torch
from lightning.pytorch.overrides.distributed import UnrepeatedDistributedSampler
from lightning.pytorch.strategies import Strategy
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Sampler

from recurrent_attention.errors import ConfigError
from recurrent_attention.migration import migrate_checkpoint
from recurrent_attention.models.base import Backbone
from recurrent_attention.runs.resume import EpochShuffle

OptimizerFactory = Callable[..., torch.optim.Optimizer]
SchedulerFactory = Callable[[torch.optim.Optimizer], Any]


class TaskModule(L.LightningModule):
    """Base class: subclasses add a head, ``training_step``, ``validation_step``, ``test_step``.

    ``optimizer`` and ``scheduler`` are ``functools.partial`` objects (``_partial_: true`` in the
    config) so that the optimiser is built over this module's parameters, not the config's.
    ``scheduler_interval`` is ``epoch`` or ``step``, as Lightning understands it.
    """

    def __init__(
        self,
        backbone: Backbone,
        optimizer: OptimizerFactory,
        scheduler: SchedulerFactory | None = None,
        scheduler_interval: str = "epoch",
    ) -> None:
        super().__init__()
        self.backbone = backbone
        self.optimizer_factory = optimizer
        self.scheduler_factory = scheduler
        self.scheduler_interval = scheduler_interval

    def configure_optimizers(self) -> Any:
        optimizer = self.optimizer_factory(self.parameters())
        if self.scheduler_factory is None:
            return optimizer
        scheduler = self.build_scheduler(optimizer)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": self.scheduler_interval},
        }

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """A checkpoint in an older layout (q/k/v before they were fused) resumes or loads: its weights
        and optimiser state are brought to today's layout (:mod:`~recurrent_attention.migration`)
        before Lightning loads them. Subclasses that override this hook call it."""
        source = getattr(self._trainer, "ckpt_path", None) or "the checkpoint"
        migrate_checkpoint(self, checkpoint, str(source))

    def build_scheduler(self, optimizer: torch.optim.Optimizer) -> Any:
        """The scheduler partial applied to the optimiser; families needing more arguments override this."""
        return self.scheduler_factory(optimizer)

    def on_train_epoch_start(self) -> None:
        """Log the learning rate this epoch trains with: ``train/lr``, one value per epoch in metrics.csv.

        Every rank holds the same rate, so ``sync_dist`` (as the other epoch metrics) averages equal
        values: the number is unchanged, and Lightning's per-rank warning under DDP stays away.
        """
        rate = self.trainer.optimizers[0].param_groups[0]["lr"]
        self.log("train/lr", rate, on_step=False, on_epoch=True, sync_dist=True)


class SplitTotals(Protocol):
    """Running sums over a whole split that turn into metrics once the split is done.

    Every number-valued attribute (int, float, bool) is a sum over items, so totals from several
    processes combine by adding them (bools by "any"): that is what :func:`sum_across_ranks` does.
    """

    def compute(self) -> dict[str, float]: ...


def sum_across_ranks(totals: SplitTotals, strategy: Strategy) -> None:
    """Add every rank's running sums in place, so each rank then holds the whole split's totals.

    Under DDP each process evaluates only its share of the split; logging one rank's totals would
    report a metric over a fraction of the data, and ranks would disagree on early stopping. The
    sums travel as float64 (exact for counts below 2**53). One process: nothing changes.
    """
    if strategy.world_size == 1:
        return
    names = [name for name, value in vars(totals).items() if isinstance(value, (bool, int, float))]
    local = torch.tensor([float(getattr(totals, name)) for name in names], dtype=torch.float64)
    summed = strategy.reduce(local.to(strategy.root_device), reduce_op="sum").cpu().tolist()
    for name, value in zip(names, summed, strict=True):
        kind = type(getattr(totals, name))
        setattr(totals, name, value > 0 if kind is bool else kind(value))


class ExactEvaluationModule(TaskModule):
    """Validation and test metrics accumulated over every item of the split, logged once per epoch.

    Lightning's epoch means average batch means; accuracy, NLL per event or perplexity need exact
    totals instead. Subclasses say how totals start (:meth:`new_totals`) and how one batch folds in
    (:meth:`accumulate`); the hooks below are the same for every family.
    """

    totals: SplitTotals

    def new_totals(self) -> SplitTotals:
        raise NotImplementedError

    def accumulate(self, batch: Any, stage: str) -> None:
        raise NotImplementedError

    def computed_totals(self, stage: str) -> dict[str, float]:
        """The split's metrics by name (logged as ``<stage>/<name>``)."""
        return self.totals.compute()

    def in_progress_bar(self, stage: str, name: str) -> bool:
        return stage == "val"

    def start_split(self, stage: str) -> None:
        self.totals = self.new_totals()

    def end_split(self, stage: str) -> None:
        sum_across_ranks(self.totals, self.trainer.strategy)
        for name, value in self.computed_totals(stage).items():
            # Already the same on every rank: sync_dist only averages equal values (no warning).
            self.log(f"{stage}/{name}", value, prog_bar=self.in_progress_bar(stage, name), sync_dist=True)

    def on_validation_epoch_start(self) -> None:
        self.start_split("val")

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.accumulate(batch, "val")

    def on_validation_epoch_end(self) -> None:
        self.end_split("val")

    def on_test_epoch_start(self) -> None:
        self.start_split("test")

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self.accumulate(batch, "test")

    def on_test_epoch_end(self) -> None:
        self.end_split("test")


def distributed_world() -> tuple[int, int]:
    """``(rank, world size)`` of the running process group; ``(0, 1)`` without one."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def evaluation_sampler(dataset: Dataset, rank_local: bool) -> Sampler | None:
    """How an ordered (evaluation or stream) loader reads its dataset under DDP; None on one process.

    Lightning would wrap it in a ``DistributedSampler`` that pads the shards with repeated items,
    so a split's metric would count some items twice. Instead every item goes to exactly one rank
    (``UnrepeatedDistributedSampler``), or, for a dataset that already is this rank's share
    (``rank_local``: LM streams split by rank), the rank reads all of it in order. Both are
    ``DistributedSampler`` subclasses, which Lightning leaves in place.
    """
    _, world = distributed_world()
    if world == 1:
        return None
    if rank_local:
        return DistributedSampler(dataset, num_replicas=1, rank=0, shuffle=False)
    return UnrepeatedDistributedSampler(dataset, shuffle=False)


def make_loader(
    dataset: Dataset,
    batch_size: int | None,
    shuffle: bool,
    drop_last: bool = False,
    collate_fn: Callable | None = None,
    rank_local: bool = False,
    num_workers: int = 0,
    pin_memory: bool = False,
    persistent_workers: bool = False,
) -> DataLoader:
    """The DataLoader every datamodule uses (``batch_size=None``: items are batches already).

    A shuffled loader's order is a function of (seed, epoch), so that a resumed run sees the
    batches an uninterrupted one would (``runs.resume``); under DDP Lightning shards it. Ordered
    loaders are shared out by :func:`evaluation_sampler`, so that evaluation counts every item
    exactly once. ``num_workers``, ``pin_memory`` and ``persistent_workers`` are the run's
    :data:`LOADER_KEYS` (``trainer=gpu`` sets them; 0 / False on the CPU), as :func:`loader_options`
    returns them.
    """
    return DataLoader(
        dataset,
        batch_size=batch_size,
        sampler=EpochShuffle(dataset) if shuffle else evaluation_sampler(dataset, rank_local),
        drop_last=drop_last,
        collate_fn=collate_fn,
        num_workers=num_workers,
        pin_memory=pin_memory,
        persistent_workers=persistent_workers,
    )


LOADER_KEYS = ("num_workers", "pin_memory", "persistent_workers")
"""How a datamodule's loaders run, every family's datamodule takes them: loader worker processes,
pinned (page-locked) host memory, from which Lightning's copy to a GPU is asynchronous
(``non_blocking``), and workers kept alive between epochs. ``train.py`` passes the run's ``loader``
node (``conf/trainer/gpu.yaml``) to the datamodule."""


def loader_options(num_workers: int, pin_memory: bool, persistent_workers: bool) -> dict[str, Any]:
    """The :data:`LOADER_KEYS` a datamodule was given, as :func:`make_loader`'s (and a DataLoader's)
    keyword arguments; workers persist only where there are workers (the DataLoader refuses it else)."""
    if num_workers < 0:
        raise ConfigError(f"loader.num_workers={num_workers}: need 0 (load in the main process) or more")
    return {
        "num_workers": num_workers,
        "pin_memory": pin_memory,
        "persistent_workers": persistent_workers and num_workers > 0,
    }

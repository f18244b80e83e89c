"""Training steps per second of each backbone on a task family's CPU preset, with its real data.

The configuration is composed as ``train.py`` composes it (``task=<family>/<dataset> model=<m>
preset=cpu``), the real datamodule and task module are built, and a Lightning ``Trainer`` runs a
few optimiser steps; a callback times each batch (forward, backward, optimiser step) and the
median of the batches after the first two is kept.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

import lightning as L
import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

from recurrent_attention.config import CONFIG_DIR, register_resolvers

# One dataset per family whose files ship in the shared mirror (a small one where there is a choice).
FAMILY_TASKS = {"tsf": "tsf/etth1", "tsc": "tsc/handwriting", "ef": "ef/mimic"}


@dataclass
class TrainingTiming:
    family: str
    task: str
    model: str
    steps_per_s: float | None  # None: skipped (see note)
    shape: str = ""
    note: str = ""


class _BatchTimer(L.Callback):
    def __init__(self) -> None:
        self.seconds: list[float] = []
        self._start = 0.0

    def on_train_batch_start(self, *args: object) -> None:
        self._start = time.perf_counter()

    def on_train_batch_end(self, *args: object) -> None:
        self.seconds.append(time.perf_counter() - self._start)


def training_steps_per_second(task: str, model: str, steps: int, workdir: Path) -> tuple[float, str]:
    """Median optimiser steps per second of ``model`` on ``task`` at the CPU preset; also the batch shape."""
    register_resolvers()
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("train", overrides=[f"task={task}", f"model={model}", "preset=cpu", "~logger"])
    L.seed_everything(0, verbose=False)
    datamodule = instantiate(cfg.task.datamodule)
    module = instantiate(cfg.task.module, backbone=instantiate(cfg.model.backbone))
    timer = _BatchTimer()
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=steps + 2,
        limit_val_batches=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        gradient_clip_val=cfg.task.gradient_clip_val,
        callbacks=[timer],
        default_root_dir=str(workdir),
    )
    trainer.fit(module, datamodule=datamodule)
    times = sorted(timer.seconds[2:])
    m = cfg.model
    shape = f"batch {cfg.task.batch_size}, d_model {m.d_model}, {m.n_heads} heads, {m.n_layers} layers"
    return 1.0 / times[len(times) // 2], shape


def training_timings(steps: int, workdir: Path, progress=None) -> list[TrainingTiming]:
    """Both backbones on every family; a family whose data is missing is reported as skipped."""
    from recurrent_attention.data import DataError

    results = []
    for family, task in FAMILY_TASKS.items():
        for model in ("transformer", "aaren"):
            if progress:
                progress(f"train {task} {model}")
            try:
                rate, shape = training_steps_per_second(task, model, steps, workdir)
            except DataError as err:
                results.append(TrainingTiming(family, task, model, None, note=f"skipped: {err}"))
                continue
            results.append(TrainingTiming(family, task, model, rate, shape))
    torch.set_grad_enabled(True)
    return results


def as_rows(timings: list[TrainingTiming]) -> list[dict]:
    return [asdict(t) for t in timings]

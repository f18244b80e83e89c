"""Why one backbone's Decision Transformer trails another's on one offline file: the backbones
trained on the same batches, with the curves a final score hides (docs/rl.md, "Why Aaren trails on
medium-replay").

A diagnostic run trains the task module ``train.py`` builds from the same config (for example
``experiment=aaren/rl_hopper_sac``), its optimiser, warm-up, clipping and min-DT's periodic window
evaluations included, with three differences, all recorded in its JSON:

- every ``held_out_every``-th episode of the file is held out: never trained on, it measures the
  action error on trajectories the model has not seen (the state statistics are the training part's);
- batch ``i`` is drawn from a generator seeded by ``(seed, i)`` alone (the datamodule's sampling:
  trajectories drawn as the protocol says (``task.rules.trajectory_sampling``); a uniform window in
  each), so at one seed every backbone and learning rate sees the same windows in the same order,
  whatever its initialisation and dropout take from torch's generator;
- every ``every`` updates, the action MSE in eval mode over every ``K``-step window of the held-out
  episodes and of as many training episodes, and how far the held-out actions follow the return asked
  for (:func:`return_sensitivity`); at the end, window-mode episodes at other target returns than the
  task's, and (``weights``) the trained head and backbone's state dict for later questions.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from torch.utils.data import DataLoader, Dataset, default_collate

from recurrent_attention.config import backbone_config
from recurrent_attention.results.summary import device_description, git_commit
from recurrent_attention.tasks.rl.data import RLDataModule, TrajectoryWindows, state_statistics
from recurrent_attention.tasks.rl.env import normalized_score
from recurrent_attention.tasks.rl.formats import Trajectory
from recurrent_attention.tasks.rl.head import DecisionTransformer
from recurrent_attention.tasks.rl.module import DecisionTransformerModule

# Batch i of seed s comes from generator seed s * BATCH_SEEDS + i: distinct for every (s, i) below it.
BATCH_SEEDS = 10**7


@dataclass(frozen=True)
class DiagnosticRun:
    """One model at one learning rate and seed; ``name`` is its JSON file's stem."""

    model: str
    lr: float
    seed: int

    @property
    def name(self) -> str:
        return f"{self.model}-lr{self.lr:g}-seed{self.seed}"


def split_episodes(trajectories: list[Trajectory], every: int) -> tuple[list[Trajectory], list[Trajectory]]:
    """``(trained, held out)``: episode ``i`` is held out when ``i % every == every - 1``, so both
    parts span the file's collection order (medium-replay runs from random to the medium policy)."""
    if every < 2:
        raise ValueError(f"held_out_every={every}: need at least 2 (one episode in `every` held out)")
    held = [t for i, t in enumerate(trajectories) if i % every == every - 1]
    return [t for i, t in enumerate(trajectories) if i % every != every - 1], held


class SeededBatches(Dataset):
    """Item ``i``: batch ``i`` of ``n_batches``, from a generator seeded by ``(seed, i)`` alone."""

    def __init__(
        self,
        trajectories: list[Trajectory],
        context_len: int,
        batch_size: int,
        n_batches: int,
        seed: int,
        uniform: bool,
    ) -> None:
        if n_batches > BATCH_SEEDS:
            raise ValueError(f"{n_batches} batches: at most {BATCH_SEEDS} have their own generator seed")
        self.windows = TrajectoryWindows(trajectories, context_len, torch.Generator())
        lengths = torch.tensor([len(t) for t in trajectories], dtype=torch.double)
        self.weights = torch.ones_like(lengths) if uniform else lengths
        self.batch_size, self.n_batches, self.seed = batch_size, n_batches, seed

    def __len__(self) -> int:
        return self.n_batches

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        generator = self.windows.generator.manual_seed(self.seed * BATCH_SEEDS + i)
        picks = torch.multinomial(self.weights, self.batch_size, replacement=True, generator=generator)
        return default_collate([self.windows[int(j)] for j in picks])


def tiled_windows(trajectories: list[Trajectory], context_len: int) -> dict[str, torch.Tensor]:
    """Every trajectory cut into consecutive ``K``-step windows (the last one of each padded and
    masked): every step's action is predicted exactly once, from the steps before it in its window."""
    windows = TrajectoryWindows(trajectories, context_len)
    return default_collate(
        [
            windows.window(i, start)
            for i, t in enumerate(trajectories)
            for start in range(0, len(t), context_len)
        ]
    )


def _mean_squared_difference(
    model: DecisionTransformer,
    windows: dict[str, torch.Tensor],
    reference: Callable[[dict[str, torch.Tensor]], torch.Tensor],
    chunk: int,
) -> float:
    """Mean over the unmasked steps and action dimensions of ``(predicted - reference)²``, in eval
    mode without gradients (the model is left in the mode it was found in)."""
    was_training = model.training
    model.eval()
    squared, count = 0.0, 0
    with torch.no_grad():
        for first in range(0, len(windows["mask"]), chunk):
            part = {key: value[first : first + chunk] for key, value in windows.items()}
            predicted = model(part["returns_to_go"], part["states"], part["actions"], part["timesteps"])
            mask = part["mask"]
            squared += float(((predicted[mask] - reference(part)[mask]) ** 2).sum())
            count += int(mask.sum()) * predicted.shape[-1]
    model.train(was_training)
    return squared / count


def action_mse(model: DecisionTransformer, windows: dict[str, torch.Tensor], chunk: int = 256) -> float:
    """Mean squared action error over the unmasked steps of ``windows`` (the training loss's formula:
    ``mse_loss(predicted[mask], actions[mask])``)."""
    return _mean_squared_difference(model, windows, lambda part: part["actions"], chunk)


def return_sensitivity(
    model: DecisionTransformer, windows: dict[str, torch.Tensor], raise_by: float = 1000.0, chunk: int = 256
) -> float:
    """How much the predicted actions follow the return asked for: the mean squared change of every
    predicted action when every return-to-go of ``windows`` is raised by ``raise_by`` (one unit of
    min-DT's ``rtg_scale``), states and actions unchanged. Near 0: a policy that ignores the return
    and acts as the data's average behaviour; the action MSE is the scale to read it against."""

    def raised(part: dict[str, torch.Tensor]) -> torch.Tensor:
        return model(part["returns_to_go"] + raise_by, part["states"], part["actions"], part["timesteps"])

    return _mean_squared_difference(model, windows, raised, chunk)


class HeldOutData(RLDataModule):
    """The task's datamodule with held-out episodes and seeded batches (:mod:`.diagnose`)."""

    def __init__(
        self, *args: Any, held_out_every: int, batch_seed: int, n_batches: int, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.held_out_every, self.batch_seed, self.n_batches = held_out_every, batch_seed, n_batches
        self.held_out: list[Trajectory] = []

    def setup(self, stage: str | None = None) -> None:
        if self.trajectories:  # read and split once (Lightning calls setup again in fit)
            return
        super().setup(stage)
        self.trajectories, self.held_out = split_episodes(self.trajectories, self.held_out_every)
        self.state_mean, self.state_std = state_statistics(self.trajectories)

    def train_dataloader(self) -> DataLoader:
        batches = SeededBatches(
            self.trajectories,
            self.context_len,
            self.batch_size,
            self.n_batches,
            self.batch_seed,
            uniform=self.rules.trajectory_sampling == "uniform",
        )
        return DataLoader(batches, batch_size=None, shuffle=False)


class ActionErrorCurve(L.Callback):
    """Every update's training loss; every ``every`` updates (and the last) the action MSE on the
    held-out windows and on as many training windows."""

    def __init__(
        self, every: int, held_out: dict[str, torch.Tensor], trained: dict[str, torch.Tensor]
    ) -> None:
        self.every, self.held_out, self.trained = every, held_out, trained
        self.losses: list[float] = []
        self.points: list[dict[str, float]] = []

    def _measure(self, module: DecisionTransformerModule, step: int) -> None:
        self.points.append(
            {
                "step": step,
                "held_out_mse": action_mse(module.model, self.held_out),
                "return_sensitivity": return_sensitivity(module.model, self.held_out),
                "train_mse": action_mse(module.model, self.trained),
            }
        )

    def on_train_start(self, trainer: L.Trainer, module: DecisionTransformerModule) -> None:
        self._measure(module, 0)

    def on_train_batch_end(
        self, trainer: L.Trainer, module: DecisionTransformerModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self.losses.append(float(outputs["loss"]))
        step = trainer.global_step
        if step % self.every == 0 or step >= trainer.estimated_stepping_batches:
            self._measure(module, step)


def updates_per_epoch(cfg: DictConfig) -> int:
    """The updates an epoch of ``cfg``'s training makes: the task's, cut by an integer
    ``trainer.limit_train_batches`` as the Trainer cuts it (the smoke preset's 2)."""
    limit = cfg.trainer.get("limit_train_batches", 1.0)
    per_epoch = int(cfg.task.updates_per_epoch)
    return min(per_epoch, limit) if isinstance(limit, int) else per_epoch


def diagnose(
    cfg: DictConfig,
    run: DiagnosticRun,
    held_out_every: int = 10,
    every: int = 100,
    targets: Sequence[float] = (),
    weights: Path | None = None,
) -> dict[str, Any]:
    """Train ``cfg`` (its model and learning rate set to ``run``'s) as described above; the record."""
    started, commit = time.perf_counter(), git_commit()  # the code that trains, not the one at the end
    updates = int(cfg.task.max_epochs * updates_per_epoch(cfg))
    L.seed_everything(run.seed, verbose=False)
    options = OmegaConf.to_container(cfg.task.datamodule, resolve=True)
    options.pop("_target_")
    options["rules"] = instantiate(cfg.task.datamodule.rules)
    data = HeldOutData(**options, held_out_every=held_out_every, batch_seed=run.seed, n_batches=updates)
    data.setup("fit")
    module = instantiate(cfg.task.module, backbone=instantiate(backbone_config(cfg.model)))
    K = int(cfg.task.context_len)
    trained_sample = data.trajectories[:: max(len(data.trajectories) // max(len(data.held_out), 1), 1)]
    curve = ActionErrorCurve(every, tiled_windows(data.held_out, K), tiled_windows(trained_sample, K))
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=1,
        gradient_clip_val=cfg.task.gradient_clip_val,
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=0,
        callbacks=[curve],
    )
    trainer.fit(module, datamodule=data)
    if weights is not None:
        partial = weights.with_suffix(".partial")
        torch.save(module.model.state_dict(), partial)
        partial.replace(weights)
    module.eval()
    at_targets = []
    for target in targets:
        module.target_return = float(target)
        results = module.play("window", module.eval_seeds, progress=False)
        returns = np.array([r for res in results for r in res.returns])
        lengths = [n for res in results for n in res.lengths]
        at_targets.append(
            {
                "target_return": float(target),
                "score": float(normalized_score(returns, module.env).mean()),
                "mean_length": float(np.mean(lengths)),
            }
        )
    return {
        **asdict(run),
        "source": cfg.task.source,
        "data": data.describe(),
        "held_out_episodes": len(data.held_out),
        "held_out_every": held_out_every,
        "updates": updates,
        "target_return": float(cfg.task.target_return),
        "losses": curve.losses,
        "action_error": curve.points,
        "periodic": module.periodic,
        "at_targets": at_targets,
        "model_config": OmegaConf.to_container(cfg.model, resolve=True),
        "git_commit": commit,
        "device": device_description(),
        "wall_s": time.perf_counter() - started,
    }

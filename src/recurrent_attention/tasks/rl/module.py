"""LightningModule for the Decision Transformer: action MSE in training, real-environment episodes as test.

Test metrics, per rollout mode ``m`` (``window``, ``stream``, ``staggered``): ``score_m``
(D4RL-normalised, mean over episodes, of the last checkpoint) and ``score_std_m``, ``return_m``,
``return_std_m``, ``length_m``, ``env_steps_per_s_m`` (environment only) and ``ms_per_step_m``
(one batched model step).

Where the protocol says ``periodic_eval`` (``reference``: min-decision-transformer, the code the
Aaren paper ran), it also plays the test episodes in window mode every ``periodic_eval_every``
updates (100 in min-DT's ``train.py``) and after the last one, and reports the best of those
scores, as min-DT prints its "max d4rl score": ``score_best_periodic`` (with
``step_best_periodic``), beside the last checkpoint's ``score_window``. :meth:`summary_extras`
adds every episode's raw return and length, and every periodic evaluation, to ``summary.json``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

from recurrent_attention.models.base import Backbone
from recurrent_attention.tasks.base import OptimizerFactory, SchedulerFactory, TaskModule
from recurrent_attention.tasks.rl.env import env_spec, normalized_score
from recurrent_attention.tasks.rl.head import DecisionTransformer
from recurrent_attention.tasks.rl.protocol import DEFAULT, RLProtocol
from recurrent_attention.tasks.rl.rollout import RolloutResult, run_episodes


def masked_mse(predicted: Tensor, target: Tensor, mask: Tensor) -> Tensor:
    """The actions' mean squared error over the real timesteps: ``(B, K, A)`` actions, ``(B, K)`` mask.

    The same number as ``mse_loss(predicted[mask], target[mask])``, as a masked sum over a count:
    boolean indexing has a shape that depends on the data, so on a GPU it waits for the mask to
    reach the host every step. The padding's error is dropped by ``torch.where``, not multiplied by
    0 (a NaN there stays out); a batch without a real timestep gives 0 (the indexed form: NaN).
    """
    squared = torch.where(mask.unsqueeze(-1), (predicted - target).square(), 0.0)
    return squared.sum() / (mask.sum() * target.shape[-1]).clamp_min(1)


class DecisionTransformerModule(TaskModule):
    def __init__(
        self,
        backbone: Backbone,
        optimizer: OptimizerFactory,
        env: str,
        state_dim: int,
        act_dim: int,
        target_return: float,
        context_len: int = 20,
        max_episode_steps: int = 1000,
        eval_envs: int = 10,
        rtg_scale: float = 1000.0,
        warmup_steps: int = 10000,
        scheduler: SchedulerFactory | None = None,
        rules: RLProtocol = DEFAULT,
        periodic_eval_every: int = 100,
    ) -> None:
        super().__init__(backbone, optimizer, scheduler, scheduler_interval="step")
        env_spec(env)
        self.env, self.target_return = env, target_return
        self.context_len, self.max_episode_steps, self.eval_envs = context_len, max_episode_steps, eval_envs
        self.warmup_steps = warmup_steps
        if periodic_eval_every < 1:
            raise ValueError(f"task.periodic_eval_every={periodic_eval_every}: need updates >= 1")
        self.periodic_eval_every = periodic_eval_every if rules.periodic_eval else 0
        self.model = DecisionTransformer(backbone, state_dim, act_dim, max_episode_steps, rtg_scale)
        self.results: dict[str, list[RolloutResult]] = {}
        self.eval_seeds: list[int] = []
        self.periodic: list[dict[str, float]] = []

    def setup(self, stage: str) -> None:
        """Dataset state statistics into the head (a checkpoint restored later overrides them)."""
        datamodule = self._trainer.datamodule if self._trainer is not None else None
        if datamodule is not None:
            self.model.set_state_statistics(datamodule.state_mean, datamodule.state_std)
            self.eval_seeds = list(datamodule.jobs[0]["seeds"])

    def build_scheduler(self, optimizer: torch.optim.Optimizer) -> Any:
        """Linear warm-up as min-decision-transformer (``lr * (step + 1) / W``), then constant.

        ``W`` is ``warmup_steps`` (10k of the paper's 20k updates) but at most half the run, so that
        shortened runs (cpu/smoke presets) still reach the full learning rate.
        """
        total = int(self.trainer.estimated_stepping_batches)
        warmup = max(1, min(self.warmup_steps, total // 2))
        return self.scheduler_factory(optimizer, start_factor=1.0 / warmup, total_iters=max(warmup - 1, 1))

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        predicted = self.model(batch["returns_to_go"], batch["states"], batch["actions"], batch["timesteps"])
        mask = batch["mask"]
        loss = masked_mse(predicted, batch["actions"], mask)
        self.log("train/loss", loss, prog_bar=True, batch_size=len(mask))
        return loss

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        """min-DT's periodic evaluation (``rules.periodic_eval``): every N updates and after the last."""
        step = self.global_step
        last = step >= int(self.trainer.estimated_stepping_batches)
        if self.periodic_eval_every and (step % self.periodic_eval_every == 0 or last):
            self.model.eval()
            results = self.play("window", self.eval_seeds, progress=False)
            self.model.train()
            returns = np.array([r for res in results for r in res.returns])
            score = float(normalized_score(returns, self.env).mean())
            self.periodic.append({"step": step, "score": score, "return": float(returns.mean())})
            self.log("periodic/score", score)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["periodic_evaluations"] = self.periodic

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_load_checkpoint(checkpoint)
        self.periodic = list(checkpoint.get("periodic_evaluations", []))

    def play(self, mode: str, seeds: list[int], progress: bool) -> list[RolloutResult]:
        """Every episode of one mode, ``eval_envs`` at a time."""
        return [
            run_episodes(
                self.model,
                self.env,
                mode,
                seeds[first : first + self.eval_envs],
                self.target_return,
                self.context_len,
                self.max_episode_steps,
                progress=progress,
            )
            for first in range(0, len(seeds), self.eval_envs)
        ]

    def on_test_epoch_start(self) -> None:
        self.results = {}

    def test_step(self, jobs: list[dict[str, Any]], batch_idx: int) -> None:
        """Every episode of every mode (one job per mode)."""
        progress = self.trainer.progress_bar_callback is not None
        for job in jobs:
            seeds = [int(s) for s in job["seeds"]]
            self.results.setdefault(job["mode"], []).extend(self.play(job["mode"], seeds, progress))

    def on_test_epoch_end(self) -> None:
        for mode, results in self.results.items():
            returns = np.array([r for res in results for r in res.returns])
            scores = normalized_score(returns, self.env)
            env_seconds = sum(res.env_seconds for res in results)
            policy_seconds = sum(res.policy_seconds for res in results)
            metrics = {
                "score": scores.mean(),
                "score_std": scores.std(),
                "return": returns.mean(),
                "return_std": returns.std(),
                "length": np.mean([n for res in results for n in res.lengths]),
                "env_steps_per_s": sum(sum(res.lengths) for res in results) / max(env_seconds, 1e-9),
                "ms_per_step": 1000 * policy_seconds / max(sum(res.policy_calls for res in results), 1),
            }
            for name, value in metrics.items():
                self.log(f"test/{name}_{mode}", float(value))
        if self.periodic:
            best = max(self.periodic, key=lambda evaluation: evaluation["score"])
            self.log("test/score_best_periodic", best["score"])
            self.log("test/step_best_periodic", float(best["step"]))

    def summary_extras(self) -> dict[str, Any]:
        """Every episode's raw return and length per mode, the target return and the data's returns.

        ``data_mean_return`` (the offline episodes' mean return) and ``data_mean_score`` (the same,
        D4RL-normalised) are what a policy conditioned on a high return should beat; recorded here,
        the table shows them beside the scores without reading the data file again.
        """
        datamodule = self._trainer.datamodule if self._trainer is not None else None
        data = datamodule.describe() if datamodule is not None and datamodule.trajectories else {}
        mean_return = data.get("mean_return")
        mean_score = None if mean_return is None else float(normalized_score(mean_return, self.env))
        return {
            "data": data,
            "data_mean_return": mean_return,
            "data_mean_score": mean_score,
            "evaluation": {
                "env": env_spec(self.env).env_id,
                "target_return": self.target_return,
                "periodic": self.periodic,
                **{
                    mode: {
                        "returns": [r for res in results for r in res.returns],
                        "lengths": [n for res in results for n in res.lengths],
                        "envs_per_batch": [len(res.returns) for res in results],
                    }
                    for mode, results in self.results.items()
                },
            },
        }

"""LightningModule for the Decision Transformer: action MSE in training, real-environment episodes as test.

Test metrics, per rollout mode ``m`` (``window``, ``stream``): ``score_m`` (D4RL-normalised, mean
over episodes) and ``score_std_m``, ``return_m``, ``return_std_m``, ``length_m``,
``env_steps_per_s_m`` (environment only) and ``ms_per_step_m`` (one batched model step).
:meth:`summary_extras` adds every episode's raw return and length to ``summary.json``.
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
from recurrent_attention.tasks.rl.rollout import RolloutResult, run_episodes


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
    ) -> None:
        super().__init__(backbone, optimizer, scheduler, scheduler_interval="step")
        env_spec(env)
        self.env, self.target_return = env, target_return
        self.context_len, self.max_episode_steps, self.eval_envs = context_len, max_episode_steps, eval_envs
        self.warmup_steps = warmup_steps
        self.model = DecisionTransformer(backbone, state_dim, act_dim, max_episode_steps, rtg_scale)
        self.results: dict[str, list[RolloutResult]] = {}

    def setup(self, stage: str) -> None:
        """Dataset state statistics into the head (a checkpoint restored later overrides them)."""
        datamodule = self._trainer.datamodule if self._trainer is not None else None
        if datamodule is not None:
            self.model.set_state_statistics(datamodule.state_mean, datamodule.state_std)

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
        loss = torch.nn.functional.mse_loss(predicted[mask], batch["actions"][mask])
        self.log("train/loss", loss, prog_bar=True, batch_size=int(mask.sum()))
        return loss

    def on_test_epoch_start(self) -> None:
        self.results = {}

    def test_step(self, job: dict[str, Any], batch_idx: int) -> None:
        """Every episode of one mode, ``eval_envs`` at a time."""
        seeds = [int(s) for s in job["seeds"]]
        for first in range(0, len(seeds), self.eval_envs):
            result = run_episodes(
                self.model,
                self.env,
                job["mode"],
                seeds[first : first + self.eval_envs],
                self.target_return,
                self.context_len,
                self.max_episode_steps,
                progress=self.trainer.progress_bar_callback is not None,
            )
            self.results.setdefault(job["mode"], []).append(result)

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

    def summary_extras(self) -> dict[str, Any]:
        """Every episode's raw return and length per mode, the target return and the data's returns.

        ``data_mean_return`` (the offline episodes' mean return) is what a policy conditioned on a
        high return should beat.
        """
        datamodule = self._trainer.datamodule if self._trainer is not None else None
        data = datamodule.describe() if datamodule is not None and datamodule.trajectories else {}
        return {
            "data": data,
            "data_mean_return": data.get("mean_return"),
            "evaluation": {
                "env": env_spec(self.env).env_id,
                "target_return": self.target_return,
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

"""The training side of the Decision Transformer module: masked action loss, min-DT's linear warm-up."""

from __future__ import annotations

from functools import partial

import lightning as L
import numpy as np
import pytest
import torch

from recurrent_attention.models.aaren import Aaren
from recurrent_attention.tasks.rl.data import RLDataModule
from recurrent_attention.tasks.rl.formats import Trajectory
from recurrent_attention.tasks.rl.module import DecisionTransformerModule

STATE_DIM, ACT_DIM, K = 3, 2, 4


def make_module(warmup_steps: int = 10, lr: float = 1e-3) -> DecisionTransformerModule:
    torch.manual_seed(0)
    return DecisionTransformerModule(
        Aaren(d_model=16, n_heads=2, n_layers=1, d_ff=32, dropout=0.0),
        partial(torch.optim.AdamW, lr=lr),
        env="hopper",
        state_dim=STATE_DIM,
        act_dim=ACT_DIM,
        target_return=100.0,
        context_len=K,
        warmup_steps=warmup_steps,
        scheduler=partial(torch.optim.lr_scheduler.LinearLR, end_factor=1.0),
    )


def batch(n_valid: int) -> dict[str, torch.Tensor]:
    torch.manual_seed(1)
    mask = torch.arange(K) < n_valid
    actions = torch.rand(2, K, ACT_DIM) * 2 - 1
    actions[:, ~mask] = 50.0  # what padding must never contribute
    return {
        "returns_to_go": torch.rand(2, K) * 100,
        "states": torch.randn(2, K, STATE_DIM),
        "actions": actions,
        "timesteps": torch.arange(K).expand(2, -1),
        "mask": mask.expand(2, -1),
    }


def test_loss_is_the_mse_over_valid_actions_only() -> None:
    module = make_module()
    b = batch(n_valid=2)
    with pytest.warns(UserWarning, match="self.log"):  # no trainer attached: logging is skipped
        loss = module.training_step(b, 0)
    predicted = module.model(b["returns_to_go"], b["states"], b["actions"], b["timesteps"])
    expected = ((predicted[:, :2] - b["actions"][:, :2]) ** 2).mean()
    torch.testing.assert_close(loss, expected)
    assert loss < 4  # tanh outputs against actions in [-1, 1]; the padded 50s would give ~2500


class LearningRates(L.Callback):
    def __init__(self) -> None:
        self.seen: list[float] = []

    def on_train_batch_start(self, trainer, module, batch, batch_idx) -> None:
        self.seen.append(trainer.optimizers[0].param_groups[0]["lr"])


def learning_rates(tmp_path, warmup_steps: int, updates: int = 30) -> list[float]:
    """The learning rate of every update of a real one-epoch fit on a tiny in-memory trajectory."""
    data = RLDataModule(
        source=None,
        state_dim=STATE_DIM,
        act_dim=ACT_DIM,
        path=str(tmp_path),
        context_len=K,
        batch_size=2,
        updates_per_epoch=updates,
    )
    rng = np.random.default_rng(0)
    observations = rng.normal(size=(9, STATE_DIM)).astype(np.float32)
    actions = rng.uniform(-1, 1, (9, ACT_DIM)).astype(np.float32)
    data.trajectories = [Trajectory(observations, actions, np.ones(9, np.float32), True)]
    rates = LearningRates()
    trainer = L.Trainer(
        max_epochs=1,
        callbacks=[rates],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )
    trainer.fit(make_module(warmup_steps=warmup_steps, lr=1e-3), datamodule=data)
    return rates.seen


def test_linear_warm_up_as_min_dt_then_constant(tmp_path) -> None:
    """min-DT's LambdaLR: lr * min((step + 1) / W, 1); W = warmup_steps, at most half the run."""
    expected = [1e-3 * min((step + 1) / 10, 1.0) for step in range(30)]
    np.testing.assert_allclose(learning_rates(tmp_path, warmup_steps=10), expected, rtol=1e-6)
    # a warm-up longer than half the run is cut to half of it, so the full rate is reached
    expected = [1e-3 * min((step + 1) / 15, 1.0) for step in range(30)]
    np.testing.assert_allclose(learning_rates(tmp_path, warmup_steps=1000), expected, rtol=1e-6)

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
from recurrent_attention.tasks.rl.module import DecisionTransformerModule, masked_mse
from tests.helpers.d4rl_files import hopper_score, mean_episode_return, write_tiny_d4rl

STATE_DIM, ACT_DIM, K = 3, 2, 4


def make_module(
    warmup_steps: int = 10, lr: float = 1e-3, state_dim: int = STATE_DIM, act_dim: int = ACT_DIM
) -> DecisionTransformerModule:
    torch.manual_seed(0)
    return DecisionTransformerModule(
        Aaren(d_model=16, n_heads=2, n_layers=1, d_ff=32, dropout=0.0),
        partial(torch.optim.AdamW, lr=lr),
        env="hopper",
        state_dim=state_dim,
        act_dim=act_dim,
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


def test_masked_mse_is_the_indexed_mse_without_its_host_read() -> None:
    """The loss as a masked sum equals ``mse_loss`` over the boolean-indexed real timesteps (rows
    of any length); padding's value never counts, not even a NaN; no real timestep: 0, not NaN."""
    generator = torch.Generator().manual_seed(0)
    predicted, target = torch.randn(3, K, ACT_DIM, generator=generator), torch.randn(3, K, ACT_DIM)
    mask = torch.arange(K) < torch.tensor([[K], [2], [0]])
    predicted[~mask] = float("nan")
    indexed = torch.nn.functional.mse_loss(predicted[mask], target[mask])
    torch.testing.assert_close(masked_mse(predicted, target, mask), indexed, rtol=1e-6, atol=0)
    assert masked_mse(predicted, target, torch.zeros_like(mask)) == 0


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
    quiet_trainer(tmp_path, max_epochs=1, callbacks=[rates]).fit(
        make_module(warmup_steps=warmup_steps, lr=1e-3), datamodule=data
    )
    return rates.seen


def quiet_trainer(tmp_path, **kwargs) -> L.Trainer:
    return L.Trainer(
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
        **kwargs,
    )


def test_linear_warm_up_as_min_dt_then_constant(tmp_path) -> None:
    """min-DT's LambdaLR: lr * min((step + 1) / W, 1); W = warmup_steps, at most half the run."""
    expected = [1e-3 * min((step + 1) / 10, 1.0) for step in range(30)]
    np.testing.assert_allclose(learning_rates(tmp_path, warmup_steps=10), expected, rtol=1e-6)
    # a warm-up longer than half the run is cut to half of it, so the full rate is reached
    expected = [1e-3 * min((step + 1) / 15, 1.0) for step in range(30)]
    np.testing.assert_allclose(learning_rates(tmp_path, warmup_steps=1000), expected, rtol=1e-6)


def test_summary_records_the_trained_files_mean_episode_return_raw_and_normalised(tmp_path) -> None:
    """What the RL tables set beside the scores: the mean return of the episodes of the very file the
    run learnt from, counted here by hand from its rewards and episode-end flags."""
    path = write_tiny_d4rl(tmp_path / "hopper.hdf5")
    data = RLDataModule(source=None, state_dim=11, act_dim=3, path=str(path), context_len=K, batch_size=2)
    module = make_module(state_dim=11, act_dim=3)
    quiet_trainer(tmp_path, max_steps=1).fit(module, datamodule=data)
    extras = module.summary_extras()
    expected = mean_episode_return(path)
    assert extras["data"]["episodes"] == 4
    assert extras["data_mean_return"] == pytest.approx(expected, rel=1e-6)
    assert extras["data_mean_score"] == pytest.approx(hopper_score(expected), rel=1e-6)

"""TSLib's ``type1`` learning rate, epoch by epoch, against a transcription of its training loops."""

from __future__ import annotations

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

from recurrent_attention.config import CONFIG_DIR, register_resolvers
from recurrent_attention.tasks.schedules import tslib_type1


def tslib_rates(learning_rate: float, train_epochs: int, every: int) -> list[float]:
    """The rate each epoch trains with in TSLib (``utils/tools.py`` and ``exp/*.py``).

    After each epoch the loop calls ``adjust_learning_rate(optimizer, epoch + 1, args)`` (forecasting
    at every epoch; classification at a23cfce only when ``(epoch + 1) % 5 == 0``), and ``type1``
    builds ``{epoch: learning_rate * (0.5 ** ((epoch - 1) // 1))}`` and sets the rate it finds there.
    """
    rate, rates = learning_rate, []
    for epoch in range(train_epochs):
        rates.append(rate)
        if (epoch + 1) % every == 0:
            called_with = epoch + 1
            lr_adjust = {called_with: learning_rate * (0.5 ** ((called_with - 1) // 1))}
            if called_with in lr_adjust:
                rate = lr_adjust[called_with]
    return rates


def scheduled_rates(scheduler_factory, learning_rate: float, epochs: int) -> list[float]:
    """The rate of each epoch when Lightning steps the scheduler after every epoch."""
    optimizer = torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))], lr=learning_rate)
    scheduler = scheduler_factory(optimizer)
    rates = []
    for _ in range(epochs):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return rates


@pytest.mark.parametrize(("every", "learning_rate", "epochs"), [(1, 1e-4, 10), (5, 1e-3, 20), (3, 0.1, 12)])
def test_schedule_matches_the_transcribed_tslib_loop(every: int, learning_rate: float, epochs: int) -> None:
    ours = scheduled_rates(lambda opt: tslib_type1(opt, every), learning_rate, epochs)
    assert ours == pytest.approx(tslib_rates(learning_rate, epochs, every), rel=1e-12)


def test_hand_computed_rates() -> None:
    forecasting = scheduled_rates(lambda opt: tslib_type1(opt, 1), 1e-4, 4)
    assert forecasting == pytest.approx([1e-4, 1e-4, 5e-5, 2.5e-5], rel=1e-12)
    classification = scheduled_rates(lambda opt: tslib_type1(opt, 5), 1e-3, 15)
    assert classification == pytest.approx([1e-3] * 5 + [6.25e-5] * 5 + [1.953125e-6] * 5, rel=1e-12)


def _compose(overrides: list[str]):
    register_resolvers()
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        return compose("train", overrides=[*overrides, "preset=paper", "model=transformer"])


def _config_rates(overrides: list[str], epochs: int) -> list[float] | None:
    cfg = _compose(overrides)
    if cfg.task.module.scheduler is None:
        return None
    return scheduled_rates(instantiate(cfg.task.module.scheduler), cfg.task.lr, epochs)


def test_task_configs_use_the_tslib_schedules() -> None:
    assert _config_rates(["task=tsf/etth1"], 5) == pytest.approx(tslib_rates(1e-4, 5, 1), rel=1e-12)
    assert _config_rates(["task=tsc/handwriting", "task.compat=reference"], 20) == pytest.approx(
        tslib_rates(1e-3, 20, 5), rel=1e-12
    )
    assert _config_rates(["task=tsc/handwriting"], 20) is None


@pytest.mark.parametrize(
    ("task", "horizon", "epochs"),
    [
        ("weather", 96, 3),
        ("weather", 192, 10),
        ("exchange", 336, 1),
        ("exchange", 720, 10),
        ("traffic", 96, 3),
        ("traffic", 720, 3),
        ("etth1", 336, 10),
    ],
)
def test_tslib_script_epochs_per_dataset_and_horizon(task: str, horizon: int, epochs: int) -> None:
    cfg = _compose([f"task=tsf/{task}", f"task.pred_len={horizon}"])
    assert cfg.trainer.max_epochs == epochs

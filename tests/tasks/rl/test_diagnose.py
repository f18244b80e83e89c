"""The diagnostic runs (tasks/rl/diagnose.py): held-out episodes, the seed's batches whatever the
model draws, every step's action error counted once, and the command line end to end."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra.utils import instantiate

from recurrent_attention.cli.rl_diagnose import main as rl_diagnose
from recurrent_attention.config import backbone_config
from recurrent_attention.tasks.rl.collect import collect_episodes
from recurrent_attention.tasks.rl.diagnose import (
    SeededBatches,
    action_mse,
    return_sensitivity,
    split_episodes,
    tiled_windows,
)
from recurrent_attention.tasks.rl.formats import read_trajectories, write_d4rl
from recurrent_attention.tasks.rl.head import DecisionTransformer
from tests.helpers.backbones import model_config

K = 5


@pytest.fixture(scope="module")
def hopper_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("rl") / "hopper.hdf5"
    return write_d4rl(path, collect_episodes("hopper", "random", 12, seed=0))


@pytest.fixture(scope="module")
def trajectories(hopper_file: Path):
    return read_trajectories(hopper_file)


def test_every_nth_episode_is_held_out_and_the_parts_partition_the_file(trajectories) -> None:
    trained, held = split_episodes(trajectories, 4)
    assert held == [trajectories[3], trajectories[7], trajectories[11]]
    assert len(trained) == 9 and not any(t is h for t in trained for h in held)
    with pytest.raises(ValueError, match="held_out_every=1"):
        split_episodes(trajectories, 1)


def _where(window: torch.Tensor, trajectories) -> tuple[int, int]:
    """The (trajectory, start) whose states the unpadded ``window`` is: an independent search."""
    for i, t in enumerate(trajectories):
        states = torch.as_tensor(t.observations[: len(t)], dtype=torch.float32)
        for start in range(len(t) - len(window) + 1):
            if torch.equal(states[start : start + len(window)], window):
                return i, start
    raise AssertionError("the window is no slice of any trajectory")


def test_a_batch_is_the_seeds_whatever_the_global_generator(trajectories) -> None:
    batches = SeededBatches(trajectories, K, batch_size=6, n_batches=3, seed=2, uniform=True)
    torch.manual_seed(0)
    first = batches[1]
    torch.manual_seed(123)
    torch.rand(1000)  # a model's initialisation and dropout draw from the global generator
    again = batches[1]
    for key in first:
        assert torch.equal(first[key], again[key]), key
    assert not torch.equal(batches[2]["states"], first["states"])
    assert not torch.equal(
        SeededBatches(trajectories, K, 6, 3, seed=3, uniform=True)[1]["states"], first["states"]
    )
    for row, mask, steps in zip(first["states"], first["mask"], first["timesteps"], strict=True):
        i, start = _where(row[mask], trajectories)
        assert steps[0] == start and int(mask.sum()) == min(K, len(trajectories[i]) - start)


def test_tiled_windows_predict_every_step_once_in_order(trajectories) -> None:
    windows = tiled_windows(trajectories[:4], K)
    actions = windows["actions"][windows["mask"]]
    expected = np.concatenate([t.actions for t in trajectories[:4]])
    np.testing.assert_array_equal(actions.numpy(), expected.astype(np.float32))
    assert (windows["timesteps"][:, 0] % K == 0).all()


def test_action_mse_is_the_training_losss_formula_over_every_window(trajectories) -> None:
    torch.manual_seed(0)
    model = DecisionTransformer(instantiate(backbone_config(model_config("aaren").model)), 11, 3).eval()
    windows = tiled_windows(trajectories[:5], K)
    with torch.no_grad():
        errors = []
        for n in range(len(windows["mask"])):  # one window at a time: no chunking
            one = {key: value[n : n + 1] for key, value in windows.items()}
            predicted = model(one["returns_to_go"], one["states"], one["actions"], one["timesteps"])
            errors.append((predicted[one["mask"]] - one["actions"][one["mask"]]) ** 2)
    naive = float(torch.cat(errors).mean())
    assert action_mse(model, windows, chunk=7) == pytest.approx(naive, rel=1e-5)
    model.train()
    action_mse(model, windows)
    assert model.training, "measuring leaves the model in the mode it found"


def test_return_sensitivity_is_zero_exactly_when_the_return_is_not_read(trajectories) -> None:
    torch.manual_seed(0)
    model = DecisionTransformer(instantiate(backbone_config(model_config("transformer").model)), 11, 3).eval()
    windows = tiled_windows(trajectories[:5], K)
    assert return_sensitivity(model, windows) > 1e-6
    with torch.no_grad():  # the return's embedding flat in the return: its value reaches nothing
        model.embed_return.weight.zero_()
    assert return_sensitivity(model, windows) == 0.0


SMOKE = [
    "task=rl/hopper_medium",
    "preset=smoke",
    "task.compat=reference",
    "task.periodic_eval_every=1",
    "task.max_episode_steps=20",
    "task.eval_episodes=2",
    "task.eval_envs=2",
]


@pytest.mark.slow
def test_the_command_line_runs_reports_and_skips_what_is_done(
    hopper_file: Path, tmp_path: Path, capsys
) -> None:
    out = tmp_path / "runs"
    args = ["run", "--out", str(out), "--models", "aaren", "transformer", "--seeds", "1", "--every", "1"]
    args += ["--held-out-every", "4", "--targets", "300", "900", "--overrides", *SMOKE]
    args += [f"task.datamodule.path={hopper_file}"]
    assert rl_diagnose(args) == 0
    records = {p.stem: json.loads(p.read_text()) for p in out.glob("*.json")}
    assert set(records) == {"aaren-lr0.0003-seed1", "transformer-lr0.0003-seed1"}
    for record in records.values():
        # the smoke preset's 2 updates: a loss each, the error before, after each, the periodic scores
        assert record["updates"] == 2 and len(record["losses"]) == 2
        assert [p["step"] for p in record["action_error"]] == [0, 1, 2]
        assert all(p["held_out_mse"] > 0 and p["train_mse"] > 0 for p in record["action_error"])
        assert all(p["return_sensitivity"] >= 0 for p in record["action_error"])
        assert [p["step"] for p in record["periodic"]] == [1, 2]
        assert [t["target_return"] for t in record["at_targets"]] == [300.0, 900.0]
        assert record["held_out_episodes"] == 3 and record["data"]["episodes"] == 9
    weights = torch.load(out / "aaren-lr0.0003-seed1.pt")
    assert "embed_return.weight" in weights and any(key.startswith("backbone.") for key in weights)
    assert rl_diagnose(args) == 0
    assert capsys.readouterr().out.count("done, skipped") == 2
    report = tmp_path / "report"
    assert rl_diagnose(["report", "--runs", str(out), "--out", str(report)]) == 0
    table = (report / "diagnose.md").read_text()
    # a summary row per model and learning rate, then a row per run
    assert table.count("| aaren | 0.0003 | 1 |") == 2 and table.count("| transformer | 0.0003 | 1 |") == 2
    assert (report / "curves.png").stat().st_size > 10_000

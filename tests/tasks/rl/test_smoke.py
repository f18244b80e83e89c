"""End to end: train.py trains a Decision Transformer and plays it in the real Hopper environment."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

from recurrent_attention.config import CONFIG_DIR, register_resolvers
from recurrent_attention.data import DataError
from recurrent_attention.tasks.rl.collect import collect_episodes
from recurrent_attention.tasks.rl.env import normalized_score
from recurrent_attention.tasks.rl.formats import write_d4rl, write_minari
from tests.conftest import read_summaries

register_resolvers()

MAX_STEPS = 40
SMALL_EVAL = ["task.eval_episodes=3", "task.eval_envs=2", f"task.max_episode_steps={MAX_STEPS}"]


@pytest.fixture(scope="module")
def hopper_episodes():
    return collect_episodes("hopper", "random", 4, seed=0) + collect_episodes(
        "hopper", "noisy:0.5", 2, seed=10
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("model", "schema", "compat"), [("aaren", "d4rl", "reference"), ("transformer", "minari", "default")]
)
def test_smoke_run_scores_in_the_real_env(
    train_runner, hopper_episodes, tmp_path: Path, model: str, schema: str, compat: str
) -> None:
    data = tmp_path / "hopper"
    write_d4rl(data, hopper_episodes) if schema == "d4rl" else write_minari(data, hopper_episodes)
    out = tmp_path / "out"
    train_runner(
        [
            f"model={model}",
            "task=rl/hopper_medium",
            "preset=smoke",
            f"task.datamodule.path={data}",
            f"task.compat={compat}",
            "task.periodic_eval_every=1",
            *SMALL_EVAL,
        ],
        out,
    )
    (summary,) = read_summaries(out)
    assert summary["family"] == "rl" and summary["model"] == model
    metrics, evaluation = summary["metrics"], summary["evaluation"]
    assert evaluation["env"] == "Hopper-v4" and evaluation["target_return"] == 3600
    for mode in ("window", "stream", "staggered"):
        returns, lengths = evaluation[mode]["returns"], evaluation[mode]["lengths"]
        assert len(returns) == 3 and evaluation[mode]["envs_per_batch"] == [2, 1]
        # Hopper pays about 1 per step alive: a real MuJoCo episode, not a placeholder
        assert all(1 <= n <= MAX_STEPS for n in lengths) and all(
            r > 0.5 * n for r, n in zip(returns, lengths, strict=True)
        )
        assert metrics[f"score_{mode}"] == pytest.approx(
            normalized_score(np.mean(returns), "hopper"), rel=1e-5
        )
        assert metrics[f"return_{mode}"] == pytest.approx(np.mean(returns), rel=1e-5)
        assert metrics[f"env_steps_per_s_{mode}"] > 0 and metrics[f"ms_per_step_{mode}"] > 0
    periodic = evaluation["periodic"]
    if compat == "default":
        assert periodic == [] and "score_best_periodic" not in metrics
        return
    # min-DT: window episodes after every update (here every 1 of the smoke preset's 2), best reported;
    # the last one plays the tested checkpoint on the test's seeds, so it scores what the test scored
    assert [p["step"] for p in periodic] == [1, 2]
    assert periodic[-1]["score"] == pytest.approx(metrics["score_window"], rel=1e-5)
    assert metrics["score_best_periodic"] == pytest.approx(max(p["score"] for p in periodic), rel=1e-5)


def test_registered_task_needs_no_path(tmp_path: Path) -> None:
    """task=rl/hopper_medium resolves D4RL's file from the registry (here a mirror) and checks its sha256."""
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        cfg = compose(
            "train", overrides=["task=rl/hopper_medium", "preset=smoke", f"paths.data_dir={tmp_path}"]
        )
    assert cfg.task.datamodule.path is None
    fake = tmp_path / "mirror" / "D4RL" / "hopper_medium-v2.hdf5"
    fake.parent.mkdir(parents=True)
    write_d4rl(fake, collect_episodes("hopper", "random", 1, seed=0))
    cfg.task.datamodule.mirror = str(tmp_path / "mirror")
    datamodule = instantiate(cfg.task.datamodule, eval_seed=1)
    with pytest.raises(
        DataError, match=f"{fake}: sha256 mismatch for d4rl_hopper_medium/D4RL/hopper_medium-v2"
    ):
        datamodule.setup("fit")

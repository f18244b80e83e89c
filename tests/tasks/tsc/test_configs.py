"""Every TSC config composes and names a registered source in the mirror layout."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir

from recurrent_attention.config import CONFIG_DIR, register_resolvers
from recurrent_attention.data import get_source

TASKS = sorted(p.stem for p in (CONFIG_DIR / "task" / "tsc").glob("*.yaml") if not p.stem.startswith("_"))


def test_all_ten_datasets_have_a_config() -> None:
    assert len(TASKS) == 10


@pytest.mark.parametrize("task", TASKS)
def test_task_config_composes_with_paper_settings(task: str) -> None:
    register_resolvers()
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("train", overrides=[f"task=tsc/{task}", "preset=paper", "model=aaren"])
    assert (cfg.model.d_model, cfg.model.n_heads, cfg.model.n_layers, cfg.model.d_ff) == (128, 8, 3, 256)
    assert (cfg.task.batch_size, cfg.task.max_epochs, cfg.task.gradient_clip_val) == (16, 100, 4.0)
    assert cfg.task.module.optimizer._target_ == "torch.optim.RAdam"
    assert cfg.task.datamodule.max_len == cfg.task.module.max_len == cfg.task.max_len
    name = cfg.task.dataset
    source = get_source(name)
    assert source.family == "tsc"
    assert source.file("train").path == f"UEA/{name}/{name}_TRAIN.ts"
    assert source.file("test").path == f"UEA/{name}/{name}_TEST.ts"
    assert source.archives["zip"].url == f"https://www.timeseriesclassification.com/aeon-toolkit/{name}.zip"


def test_experiment_sweeps_ten_datasets_two_models_five_seeds() -> None:
    register_resolvers()
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("train", overrides=["experiment=aaren/tsc"], return_hydra_config=True)
    params = cfg.hydra.sweeper.params
    assert sorted(t.strip() for t in params.task.split(",")) == [f"tsc/{t}" for t in TASKS]
    assert params.model.split(",") == ["transformer", "aaren"]
    assert params.seed.split(",") == ["1", "2", "3", "4", "5"]

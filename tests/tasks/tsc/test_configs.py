"""Every TSC config composes, names a registered source in the mirror layout, and the table layout works."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from hydra import compose, initialize_config_dir

from recurrent_attention.config import CONFIG_DIR, register_resolvers
from recurrent_attention.data import get_source
from recurrent_attention.results.layouts import tsc

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


def test_table_layout_mean_std_beside_the_paper(tmp_path: Path) -> None:
    (tmp_path / "aaren_tsc.csv").write_text(
        "dataset,model,mean,std,bold\nJapaneseVowels,Aaren,96.65,0.75,True\nArabicDigits,Aaren,98.68,0.20,True\n"
    )
    runs = pd.DataFrame(
        {
            "family": "tsc",
            "dataset": ["JapaneseVowels"] * 3 + ["SpokenArabicDigits"],
            "setting.head": "flatten",
            "model": "aaren",
            "seed": [1, 2, 3, 1],
            "preset": "cpu",
            "compat": "default",
            "metric.acc": [90.0, 92.0, 97.0, 50.0],
            "wall_time_s": [10.0, 20.0, 30.0, 5.0],
            "path": [f"o/seed{i}/task.compat=default,task.max_epochs=15/summary.json" for i in (1, 2, 3)]
            + ["o/seed1/summary.json"],
        }
    )
    (table,) = tsc.build(runs, tmp_path)
    rows = table.frame.set_index("dataset")
    # mean 93, sample std sqrt(((-3)^2 + (-1)^2 + 4^2) / 2) = sqrt(13) = 3.6056
    assert rows.loc["JapaneseVowels", "acc % (ours)"] == "93.00 ± 3.61"
    assert rows.loc["JapaneseVowels", "acc % (paper)"] == "96.65 ± 0.75"
    assert rows.loc["SpokenArabicDigits", "acc % (paper)"] == "98.68 ± 0.20"
    assert rows.loc["JapaneseVowels", "wall s/run"] == "20"
    assert table.name == "aaren_tsc_cpu_default"
    overrides = [n for n in table.notes if "overrides" in n]
    assert overrides == ["JapaneseVowels overrides: task.max_epochs=15"]

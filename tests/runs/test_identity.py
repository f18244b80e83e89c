"""Run identity: the folder follows the resolved config, not the words typed."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf

from recurrent_attention.config import CONFIG_DIR, register_resolvers
from recurrent_attention.runs.identity import run_ids

register_resolvers()


def composed(overrides: list[str]):
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("train", overrides=overrides, return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)
    return cfg


def run_folder(*overrides: str) -> str:
    """The folder Hydra gives this command (``hydra.run.dir``, resolved as Hydra resolves it)."""
    return OmegaConf.select(composed(list(overrides)), "hydra.run.dir")


def ids(*overrides: str) -> dict[str, str]:
    cfg = composed(list(overrides))
    return run_ids(cfg, OmegaConf.to_container(cfg.hydra.runtime.choices))


def test_folder_is_a_readable_prefix_and_the_run_id() -> None:
    folder = Path(run_folder("model=transformer", "task=tsf/etth2", "preset=smoke", "seed=3"))
    assert folder.parent == Path("outputs/tsf/etth2/transformer/smoke")
    assert (
        folder.name
        == f"seed3-{ids('model=transformer', 'task=tsf/etth2', 'preset=smoke', 'seed=3')['run_id']}"
    )


@pytest.mark.parametrize(
    "changed",
    [["trainer=gpu"], ["trainer.precision=bf16-mixed"], ["trainer.devices=2"], ["task.max_epochs=7"]],
)
def test_trainer_settings_change_the_folder(changed: list[str]) -> None:
    assert run_folder("preset=smoke", *changed) != run_folder("preset=smoke")


def test_an_experiment_never_lands_in_the_folder_of_a_different_config() -> None:
    # The experiment widens the model to d_model 128 over the cpu preset's 64.
    plain = run_folder("task=lm/ptb", "preset=cpu", "model=crt")
    assert run_folder("experiment=crt/ptb_3layer_cpu", "model=crt") != plain


def test_spelling_of_a_value_does_not_matter() -> None:
    assert run_folder("task.lr=0.5") == run_folder("task.lr=5e-1") == run_folder("task.lr=.5")


def test_integer_and_float_limits_are_different_runs() -> None:
    # Lightning reads 1 as one batch and 1.0 as every batch.
    assert run_folder("trainer.limit_train_batches=1") != run_folder("trainer.limit_train_batches=1.0")


def test_paths_force_logger_progress_bar_and_launcher_do_not_matter(monkeypatch) -> None:
    base = ids("preset=smoke")
    monkeypatch.setenv("RA_DATA_MIRROR", "/somewhere/else")
    assert (
        ids(
            "preset=smoke",
            "paths.data_dir=/elsewhere",
            "paths.download=false",
            "force=true",
            "logger=tensorboard",
            "trainer.enable_progress_bar=true",
            "hydra/launcher=joblib",
            "hydra.launcher.n_jobs=4",
        )
        == base
    )


def test_seed_changes_the_run_id_but_not_the_config_id() -> None:
    one, two = ids("seed=1"), ids("seed=2")
    assert one["run_id"] != two["run_id"] and one["config_id"] == two["config_id"]
    assert ids("seed=1", "model.d_model=32")["config_id"] != one["config_id"]


def test_values_derived_from_the_seed_do_not_change_the_config_id() -> None:
    """RL's evaluation episodes are seeded by ``eval_seed: ${seed}``: its seeds are one config."""
    one, two = (ids("task=rl/hopper_medium", f"seed={seed}") for seed in (1, 2))
    assert one["run_id"] != two["run_id"] and one["config_id"] == two["config_id"]
    assert ids("task=rl/hopper_medium", "seed=1")["config_id"] == ids("task=rl/hopper_medium")["config_id"]


def test_folder_name_stays_short_with_many_overrides() -> None:
    overrides = [f"+notes.a_rather_long_key_number_{i}=value_{i}" for i in range(60)]
    folder = Path(run_folder(*overrides))
    assert len(folder.name) <= len("seed1-") + 12 and folder != Path(run_folder())


def test_editing_own_data_changes_the_run(tmp_path: Path) -> None:
    """The bug: edit the CSV, run the same command, get "already finished" with the old result."""
    csv = tmp_path / "my.csv"
    csv.write_text("date,OT\n2020-01-01,1.0\n")
    before = run_folder(f"task.datamodule.path={csv}")
    assert run_folder(f"task.datamodule.path={csv}") == before
    csv.write_text("date,OT\n2020-01-01,2.0\n")
    assert run_folder(f"task.datamodule.path={csv}") != before


@pytest.mark.parametrize(("model", "cls"), [("timesformer", "TimeSformer"), ("cr_vit", "CRViT")])
def test_a_moved_class_keeps_the_ids_its_runs_had_before_the_move(model: str, cls: str) -> None:
    """The video encoders left tasks/video/transformer.py: runs made before still match (finished or
    resumable in their folders, one table row with the runs made after)."""
    task = ["task=video/smarthome_cs", f"model={model}", "preset=smoke"]
    before = ids(*task, f"model._target_=recurrent_attention.tasks.video.transformer.{cls}")
    assert ids(*task) == before
    assert ids(*task, "model.iterations=3" if model == "cr_vit" else "model.drop_path=0.2") != before


# The ids runs had before options were added or moved (issues 49, 51, 66, 68): test_kept_configs.py.


@pytest.mark.parametrize("model", ["transformer", "crt"])
def test_the_compile_switch_off_keeps_earlier_ids_and_on_is_another_run(model: str) -> None:
    """``model.compile`` (issue 64) is a new key: off, a config has the ids it had without it; on,
    it is another run (compiled kernels round differently)."""
    task = ["task=tsf/etth1", f"model={model}", "preset=smoke"]
    assert ids(*task) == ids(*task, "~model.compile")
    assert ids(*task, "model.compile=true") != ids(*task)

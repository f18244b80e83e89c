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
    before = ids(*task, f"model.backbone._target_=recurrent_attention.tasks.video.transformer.{cls}")
    assert ids(*task) == before
    assert ids(*task, "model.iterations=3" if model == "cr_vit" else "model.drop_path=0.2") != before


# The transformer's config as it was: values set, then the new keys deleted (Hydra resolves a key
# it deletes, so the switch goes last).
OLD_TRANSFORMER = (
    "model.backbone._target_=recurrent_attention.models.transformer.Transformer",
    "~model.carry_state",
    "~model.absolute_positions",
    "~model.relative_positions",
)
OLD_FILE_VALUES = ("model.final_norm=true", "model.qkv_bias=true")
# The LM task read both with defaults (``oc.select``) before every model declared them (issue 49).
OLD_LM_DEFAULTS = ("task.module.carry_state=false", "task.module.absolute_positions=true")
OLD_AAREN = ("~model.carry_state", "~model.absolute_positions")
# Issue 66: CRT's choice of blocks, Transformer-XL's shared positional dropout.
OLD_CRT_BLOCKS = ("~model.backbone.txl_blocks", "~model.txl_blocks")
OLD_TRANSFORMER_XL = ("~model.backbone.shared_position_dropout", "~model.shared_position_dropout")
# Issue 66's txl_init, then a field of LM's protocol object (issue 68): the config without the protocol's
# nodes (the copies before what they copy, as Hydra resolves a key it deletes).
OLD_LM_PROTOCOL = ("~task.module.rules", "~task.rules", "~task.protocols")


@pytest.mark.parametrize(
    ("task", "before"),
    [
        (["task=tsf/etth1", "model=transformer"], [*OLD_FILE_VALUES, *OLD_TRANSFORMER]),
        # THP's encoder sets final_norm and qkv_bias false for every backbone, over the model file
        (["task=ef/mimic", "model=transformer"], OLD_TRANSFORMER),
        (
            ["task=lm/ptb", "model=transformer"],
            [
                *OLD_FILE_VALUES,
                *OLD_LM_DEFAULTS,
                *OLD_TRANSFORMER,
                *OLD_LM_PROTOCOL,
                "~task.paper_models",
            ],
        ),
        (["task=tsf/etth1", "model=aaren"], OLD_AAREN),
        (
            ["task=lm/ptb", "model=aaren"],
            [*OLD_LM_DEFAULTS, *OLD_AAREN, *OLD_LM_PROTOCOL, "~task.paper_models"],
        ),
        (
            ["task=lm/ptb", "model=crt_gru"],
            [
                "model.rnn=gru",
                "model.position_rnn=gru",
                "model.final_norm=true",
                "model.qkv_bias=true",
                "model.absolute_positions=false",
                "~model.backbone.relative_positions",
                "~model.relative_positions",
                *OLD_CRT_BLOCKS,
                *OLD_LM_PROTOCOL,
                "~task.paper_models",
            ],
        ),
        (
            ["task=ef/mimic", "model=crt"],
            [
                "model.absolute_positions=false",
                "~model.backbone.relative_positions",
                "~model.relative_positions",
                *OLD_CRT_BLOCKS,
            ],
        ),
        (["task=tsf/etth1", "model=transformer_xl"], OLD_TRANSFORMER_XL),
        (
            ["task=lm/ptb", "model=transformer_xl"],
            [*OLD_TRANSFORMER_XL, *OLD_LM_PROTOCOL, "~task.paper_models"],
        ),
    ],
)
def test_added_options_keep_the_ids_runs_had_before_them(task: list[str], before: list[str]) -> None:
    """The Transformer's relative positions and LM's paper_models (issue 51), the LM keys every model
    now declares (carry_state, absolute_positions; issue 49), CRT's txl_blocks, Transformer-XL's
    shared_position_dropout and the LM's txl_init (issue 66) are new keys: at the
    value that reproduces earlier runs, a config has the ids it had without them (the config as it
    was, rebuilt by deleting them); the other value is another run."""
    assert ids(*task, "preset=smoke") == ids(*task, "preset=smoke", *before)
    if task[0] == "task=lm/ptb":
        assert ids(*task, "preset=smoke", "task.compat=reference") != ids(*task, "preset=smoke")


@pytest.mark.parametrize("model", ["transformer", "crt"])
def test_the_compile_switch_off_keeps_earlier_ids_and_on_is_another_run(model: str) -> None:
    """``model.compile`` (issue 64) is a new key: off, a config has the ids it had without it; on,
    it is another run (compiled kernels round differently)."""
    task = ["task=tsf/etth1", f"model={model}", "preset=smoke"]
    assert ids(*task) == ids(*task, "~model.compile")
    assert ids(*task, "model.compile=true") != ids(*task)

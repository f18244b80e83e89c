"""Where a config value comes from (conf/README.md): a model file leaves the sizes to the task (``???``),
later config groups override earlier ones (train.yaml's own keys < model < task < preset <
experiment < command line), and an experiment that sweeps runs its whole sweep without ``-m``."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from recurrent_attention.config import CONFIG_DIR, register_resolvers
from recurrent_attention.config_checks import ConfigError, check_config
from tests.conftest import ROOT, run_train
from tests.e2e.test_configs import FIRST_TASK_OF_FAMILY, MODELS, VIDEO_MODELS, options

register_resolvers()

# The keys every task sets in conf/task/<family>/_base.yaml (CONTRIBUTING.md, "A task family").
SIZE_KEYS = ("d_model", "n_heads", "n_layers", "d_ff", "dropout", "activation", "norm_first")
EXPERIMENTS = options("experiment", 2)


def composed(*overrides: str, hydra: bool = False) -> DictConfig:
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        return compose("train", overrides=list(overrides), return_hydra_config=hydra)


@pytest.mark.parametrize("model", MODELS)
def test_model_files_leave_every_size_to_the_task(model: str) -> None:
    """A size written in a model file would be overridden by every task: it would never take effect."""
    own = OmegaConf.load(CONFIG_DIR / "model" / f"{model}.yaml")
    set_here = [key for key in SIZE_KEYS if key in own and not OmegaConf.is_missing(own, key)]
    assert not set_here, f"conf/model/{model}.yaml sets {set_here}: the task sets sizes, write ??? here"


@pytest.mark.parametrize(
    ("task", "model"),
    [
        (task, model)
        for family, task in sorted(FIRST_TASK_OF_FAMILY.items())
        for model in MODELS
        if (family == "video") == (model in VIDEO_MODELS)
    ],
)
def test_each_family_sets_every_size_its_models_need(task: str, model: str) -> None:
    """With the paper preset (which sets no size) nothing of the model is left at ``???``."""
    cfg = composed(f"task={task}", f"model={model}", "preset=paper")
    assert not OmegaConf.missing_keys(cfg.model)


@pytest.mark.parametrize("model", MODELS)
def test_a_model_without_a_task_names_the_missing_size(model: str) -> None:
    with pytest.raises(ConfigError, match=r"^model\.d_model has no value \(\?\?\?\); set it"):
        check_config(composed(f"model={model}", "~task", "preset=paper"))


def own_task_without_d_model(folder: Path) -> Path:
    """A user's task file (found through ``hydra.searchpath``) that forgets ``model.d_model``."""
    task = folder / "task" / "own" / "no_width.yaml"
    task.parent.mkdir(parents=True)
    task.write_text(
        textwrap.dedent(
            """\
            # @package _global_
            model:
              n_heads: 2
              n_layers: 1
              d_ff: 8
              dropout: 0.0
              activation: gelu
              norm_first: false
            task:
              family: own
              max_epochs: 1
              gradient_clip_val: null
            """
        )
    )
    return folder


def test_a_task_without_d_model_names_it(tmp_path: Path) -> None:
    searchpath = f"hydra.searchpath=[file://{own_task_without_d_model(tmp_path)}]"
    with pytest.raises(ConfigError, match=r"^model\.d_model has no value"):
        check_config(composed(searchpath, "task=own/no_width", "model=transformer", "preset=paper"))


def test_train_py_stops_on_a_missing_size_with_one_line(tmp_path: Path) -> None:
    folder = own_task_without_d_model(tmp_path / "conf")
    proc = run_train(
        [f"hydra.searchpath=[file://{folder}]", "task=own/no_width", "preset=paper"],
        tmp_path / "out",
        check=False,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1] == (
        "error: model.d_model has no value (???); set it, e.g. model.d_model=<value>"
        " (the task sets the model's sizes: does the model suit the task?)"
    )
    assert "Traceback" not in proc.stderr


def probe_experiment(folder: Path) -> Path:
    """An experiment setting a key of train.yaml (seed) and a size the preset also sets."""
    experiment = folder / "experiment" / "probe.yaml"
    experiment.parent.mkdir(parents=True)
    experiment.write_text("# @package _global_\nseed: 7\nmodel:\n  d_model: 48\n")
    return folder


def test_later_groups_override_earlier_ones(tmp_path: Path) -> None:
    searchpath = f"hydra.searchpath=[file://{probe_experiment(tmp_path)}]"
    # model < task: conf/model/transformer.yaml has q/k/v biases, the EF task (THP) removes them
    assert composed("task=ef/mimic", "model=transformer", "preset=paper").model.qkv_bias is False
    # task < preset: EF's d_model 64, the smoke preset's 16
    assert composed("task=ef/mimic", "preset=smoke").model.d_model == 16
    # preset < experiment, and train.yaml's own keys < experiment
    with_probe = ("task=ef/mimic", "preset=smoke", searchpath, "experiment=probe")
    cfg = composed(*with_probe)
    assert (cfg.model.d_model, cfg.seed) == (48, 7)
    # experiment < command line
    cfg = composed(*with_probe, "model.d_model=32", "seed=3")
    assert (cfg.model.d_model, cfg.seed) == (32, 3)


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_an_experiment_runs_its_sweep_without_dash_m(experiment: str) -> None:
    """One convention: an experiment with sweeper params sets ``hydra.mode: MULTIRUN`` (itself or
    through the experiment it extends), so ``python train.py experiment=X`` runs the whole table;
    a single-run experiment sets no mode."""
    hydra = composed(f"experiment={experiment}", hydra=True).hydra
    sweeps = bool(hydra.sweeper.params)
    assert (hydra.mode == RunMode.MULTIRUN) == sweeps, (
        f"experiment={experiment}: sweeper params {'set' if sweeps else 'unset'}, hydra.mode {hydra.mode}"
    )


DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted(CONFIG_DIR.rglob("*.yaml"))]
DASH_M_EXPERIMENT = re.compile(r"train\.py\b(?=.*\bexperiment=)(?=.*\s(?:-m|--multirun)\b)")


def test_documented_experiment_commands_follow_the_convention() -> None:
    """``-m`` with ``experiment=`` is redundant (the experiment sets the mode) and reads as if needed."""
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in DOCUMENTS
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if DASH_M_EXPERIMENT.search(line)
    ]
    assert not found, "\n".join(found)

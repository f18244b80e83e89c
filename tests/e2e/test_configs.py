"""Task configs compose with the backbones: interpolations resolve, targets import, sizes agree."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import ConfigCompositionException
from hydra.utils import get_class, instantiate
from omegaconf import OmegaConf

from recurrent_attention.config import CONFIG_DIR, backbone_config, register_resolvers
from recurrent_attention.config_checks import check_config

register_resolvers()


def options(group: str, depth: int) -> list[str]:
    """Selectable options of a config group, as ``task=<option>`` spells them.

    ``depth`` counts the path parts of an option (``tsf/etth1``: 2), so that a nested group such as
    ``task/video/optimizer`` is not taken for a task.
    """
    return sorted(
        str(p.relative_to(CONFIG_DIR / group).with_suffix(""))
        for p in (CONFIG_DIR / group).rglob("*.yaml")
        if not p.name.startswith("_") and len(p.relative_to(CONFIG_DIR / group).parts) == depth
    )


TASKS = options("task", 2)
MODELS = options("model", 1)
# The CRT paper's LM models as its text describes them (docs/lm.md, "Two readings").
PAPER_MODELS = options("model", 2)
# Whole video transformers owned by the video family: they take their clip sizes from a video task.
VIDEO_MODELS = {"timesformer", "cr_vit"}
FIRST_TASK_OF_FAMILY = {task.split("/")[0]: task for task in reversed(TASKS)}
# Every task with a backbone of its family (Aaren; TimeSformer for video), and every backbone with
# one task of each family it serves: the video family only the video transformers, the others the rest.
PAIRS = sorted(
    {(task, "timesformer" if task.startswith("video/") else "aaren") for task in TASKS}
    | {
        (t, m)
        for family, t in FIRST_TASK_OF_FAMILY.items()
        for m in MODELS
        if (family == "video") == (m in VIDEO_MODELS)
    }
    | {(FIRST_TASK_OF_FAMILY["lm"], m) for m in PAPER_MODELS}
)


@pytest.mark.parametrize(("task", "model"), PAIRS)
def test_task_composes_with_model(task: str, model: str) -> None:
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("train", overrides=[f"task={task}", f"model={model}", "preset=smoke"])
    resolved = OmegaConf.to_container(cfg.task, resolve=True)
    assert resolved["family"] == task.split("/")[0]
    for key in ("name", "dataset", "max_epochs", "monitor", "datamodule", "module"):
        assert key in resolved, f"{task}: task.{key} missing"
    get_class(cfg.task.datamodule._target_)
    get_class(cfg.task.module._target_)
    assert instantiate(backbone_config(cfg.model)).d_model == cfg.model.d_model
    check_config(cfg)  # no shipped combination trips the up-front checks


def test_bad_override_names_the_key() -> None:
    with (
        initialize_config_dir(str(CONFIG_DIR), version_base="1.3"),
        pytest.raises(ConfigCompositionException, match=r"task\.pred_lenn"),
    ):
        compose("train", overrides=["task=tsf/etth1", "task.pred_lenn=3"])


def test_no_task_reads_a_model_key_with_a_silent_default() -> None:
    """A task reads a model's option as ``${model.key}``, which every model config declares (a model
    without it fails test_task_composes_with_model), never as ``${oc.select:model.key,default}``:
    a new backbone would silently get the default (a recurrent one would drop its LM state)."""
    readers = [CONFIG_DIR / "train.yaml", *(CONFIG_DIR / group for group in ("task", "preset", "experiment"))]
    files = [p for reader in readers for p in ([reader] if reader.is_file() else reader.rglob("*.yaml"))]
    silent = [str(p.relative_to(CONFIG_DIR)) for p in files if "oc.select:model." in p.read_text()]
    assert not silent, f"task configs read model keys with a default: {silent}"


def test_model_configs_read_no_task_key_and_name_their_class() -> None:
    """A model config builds the same class with the same options under every task (issue 68): it
    reads no task key and names its class as a literal, never by a resolver on another value."""
    reads, chosen = {}, []
    for path in sorted((CONFIG_DIR / "model").rglob("*.yaml")):
        raw = OmegaConf.load(path)
        name = str(path.relative_to(CONFIG_DIR / "model"))
        lines = [line for line in OmegaConf.to_yaml(raw).splitlines() if "task." in line]
        if lines:
            reads[name] = "; ".join(lines)
        if "_target_" in raw and "${" in OmegaConf.to_container(raw)["_target_"]:
            chosen.append(name)
    assert not reads and not chosen


def test_every_fit_file_names_a_family_and_a_model() -> None:
    """``conf/fit/<family>/<model>.yaml`` is an optional default: a file whose family or model is
    misspelt would never be read, and its model would silently keep its own value."""
    families = {p.stem for p in (CONFIG_DIR / "family").glob("*.yaml")} - {"none"}
    model_dir = CONFIG_DIR / "model"
    models = {str(p.relative_to(model_dir).with_suffix("")) for p in model_dir.rglob("*.yaml")}
    fits = [p.relative_to(CONFIG_DIR / "fit").with_suffix("") for p in (CONFIG_DIR / "fit").rglob("*.yaml")]
    orphans = [str(f) for f in fits if f.parts[0] not in families or str(Path(*f.parts[1:])) not in models]
    assert fits and not orphans, f"conf/fit files no run reads: {orphans}"


def test_every_task_names_its_family() -> None:
    """The family a task's defaults pick (``override /family: <name>``) is the folder it lives in: it
    selects the fit files (conf/train.yaml) and the tables a run lands in (``task.family``)."""
    bases = sorted((CONFIG_DIR / "task").glob("*/_base.yaml"))
    wrong = [b.parent.name for b in bases if f"- override /family: {b.parent.name}\n" not in b.read_text()]
    assert bases and not wrong, f"task/<family>/_base.yaml without its family in its defaults: {wrong}"


@pytest.mark.parametrize(
    ("overrides", "key", "expected"),
    [
        (["task=lm/ptb", "model=crt", "task.seg_len=35"], "seg_len", 35),
        (["task=lm/ptb", "model=paper/crt_gru", "task.seg_len=17"], "seg_len", 17),
        (["task=lm/wt103", "model=paper/transformer_xl"], "mem_len", 150),
        (["task=lm/ptb", "model=transformer_xl", "task.mem_len=9"], "mem_len", 9),
        (["task=lm/ptb", "model=crt", "task.seg_len=35", "model.seg_len=5"], "seg_len", 5),
        (["task=tsf/etth1", "model=crt"], "seg_len", 64),
        (["task=ef/mimic", "model=transformer_xl"], "mem_len", 128),
    ],
)
def test_segment_lengths_follow_the_lm_task_only(overrides: list[str], key: str, expected: int) -> None:
    """CRT's segment and Transformer-XL's memory are LM's segments under LM (conf/fit/lm/), their
    model's own value elsewhere, and the command line's over both."""
    register_resolvers()
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("train", overrides=overrides)
    assert cfg.model[key] == expected


EXPERIMENTS = options("experiment", 2)


def sweep_params(experiment: str) -> dict:
    """An experiment's ``hydra.sweeper.params`` (empty for one run)."""
    register_resolvers()
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("train", overrides=[f"experiment={experiment}"], return_hydra_config=True)
    return dict(cfg.hydra.sweeper.params or {})


def sweep_models(experiment: str, *command_line: str) -> set[str]:
    """The models of the jobs Hydra's basic sweeper launches for ``experiment=<experiment>``: the
    experiment's ``hydra.sweeper.params``, then the command line's overrides, as ``sweep`` joins them."""
    params = [f"{key}={value}" for key, value in sweep_params(experiment).items()]
    overrides = OverridesParser.create().parse_overrides([*params, *command_line])
    (jobs,) = BasicSweeper.split_arguments(overrides, None)
    return {override.partition("=")[2] for job in jobs for override in job if override.startswith("model=")}


@pytest.mark.parametrize("experiment", [e for e in EXPERIMENTS if "model" in sweep_params(e)])
def test_an_experiments_model_list_is_a_default_the_command_line_replaces(experiment: str) -> None:
    """``experiment=aaren/tsf model=transformer,aaren,linear_attention`` adds a backbone to a paper's
    sweep with no config edited; without ``model=`` the experiment's own list runs."""
    assert sweep_models(experiment) == set(str(sweep_params(experiment)["model"]).split(","))
    assert sweep_models(experiment, "model=aaren,linear_attention") == {"aaren", "linear_attention"}

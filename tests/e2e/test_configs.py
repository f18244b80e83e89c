"""Task configs compose with the backbones: interpolations resolve, targets import, sizes agree."""

from __future__ import annotations

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


# The segment and memory lengths CRT and Transformer-XL take from a task that works in segments
# (LM), with a default elsewhere: the reads of task keys left in the model configs.
SEGMENT_READS = {
    "crt.yaml": "seg_len: ${oc.select:task.seg_len,64}",
    "transformer_xl.yaml": "mem_len: ${oc.select:task.mem_len,128}",
}


def test_model_configs_read_no_task_key_and_name_their_class() -> None:
    """A model config builds the same class with the same options under every task (issue 68): it
    reads no task key (but the segment lengths above) and names its class as a literal, never by a
    resolver on another value."""
    reads, chosen = {}, []
    for path in sorted((CONFIG_DIR / "model").rglob("*.yaml")):
        raw = OmegaConf.load(path)
        name = str(path.relative_to(CONFIG_DIR / "model"))
        text = OmegaConf.to_yaml(raw)
        lines = [line for line in text.splitlines() if "task." in line]
        if lines:
            reads[name] = "; ".join(lines)
        if "_target_" in raw and "${" in OmegaConf.to_container(raw)["_target_"]:
            chosen.append(name)
    assert reads == SEGMENT_READS and not chosen


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

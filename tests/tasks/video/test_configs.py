"""The video configs compose with the paper's settings, and the results layout puts Table 7 beside ours."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

from recurrent_attention.config import CONFIG_DIR, backbone_config, register_resolvers
from recurrent_attention.models.ncgru import EquationFourGRU
from recurrent_attention.results.collect import load_runs
from recurrent_attention.results.layouts import video
from recurrent_attention.results.summary import write_summary


def composed(*overrides: str):
    register_resolvers()
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        return compose("train", overrides=list(overrides))


@pytest.mark.parametrize(
    ("task", "classes"), [("smarthome_cs", 31), ("smarthome_cv1", 19), ("smarthome_cv2", 19)]
)
@pytest.mark.parametrize("model", ["timesformer", "cr_vit"])
def test_task_composes_with_paper_settings(task: str, classes: int, model: str) -> None:
    cfg = composed(f"task=video/{task}", f"model={model}", "preset=paper")
    assert (cfg.model.d_model, cfg.model.n_heads, cfg.model.n_layers, cfg.model.d_ff) == (768, 12, 12, 3072)
    assert (cfg.model.patch_size, cfg.model.drop_path, cfg.task.crop_size, cfg.task.n_frames) == (
        16,
        0.1,
        224,
        16,
    )
    assert cfg.task.n_classes == cfg.task.datamodule.n_classes == cfg.task.module.n_classes == classes
    assert cfg.task.datamodule.protocol == task.removeprefix("smarthome_")
    optimizer = cfg.task.module.optimizer
    assert (optimizer._target_, optimizer.lr, optimizer.nesterov, optimizer.weight_decay) == (
        "torch.optim.SGD",
        0.005,
        True,
        1e-4,
    )
    assert list(cfg.task.module.scheduler.milestones) == [11, 14] and cfg.task.max_epochs == 15
    assert (cfg.task.test_views, cfg.task.view_ensemble) == (10, "max")
    if model == "cr_vit":
        assert cfg.model._target_.endswith("CRViT") and cfg.model.rnn == "gru_eq4"


@pytest.mark.parametrize(("compat", "checkpoint"), [("default", "best"), ("reference", "last")])
def test_compat_reaches_data_module_and_test_checkpoint(compat: str, checkpoint: str) -> None:
    cfg = composed("task=video/smarthome_cs", "model=timesformer", f"task.compat={compat}")
    assert cfg.task.datamodule.rules == cfg.task.module.rules == cfg.task.protocols[compat]
    assert cfg.task.test_checkpoint == checkpoint


def test_stage_experiments_state_the_paper_recipe() -> None:
    one = composed("experiment=video/stage1")
    two = composed("experiment=video/stage2", "stage1=run/checkpoints/last.ckpt")
    assert (one.model.name, one.task.max_epochs, list(one.task.module.scheduler.milestones)) == (
        "timesformer",
        15,
        [11, 14],
    )
    assert (two.model.name, two.task.max_epochs, list(two.task.module.scheduler.milestones)) == (
        "cr_vit",
        40,
        [29, 37],
    )
    assert two.model.pretrained == "run/checkpoints/last.ckpt" and two.model.d_model == 768
    assert one.task.compat == two.task.compat == "reference"


@pytest.mark.parametrize(
    ("experiment", "stage1"),
    [
        ("video/stage2", ["stage1=null"]),
        ("video/synthetic_stage2", ["stage1=null"]),
        ("video/synthetic_cpu", []),
    ],
)
def test_cr_vit_memory_rnn_reads_every_frame_of_the_video(experiment: str, stage1: list[str]) -> None:
    """The paper's GRU reads "the sequence length (number of frames per video) ... 16" (appendix A),
    in each of its two iterations over the video, and is equation (4)'s GRU (issue 51)."""
    cfg = composed(f"experiment={experiment}", "model=cr_vit", *stage1, "preset=smoke")  # stage 1: none
    backbone = instantiate(backbone_config(cfg.model))
    assert isinstance(backbone.memory_rnn, EquationFourGRU)
    lengths = []
    backbone.memory_rnn.register_forward_hook(lambda module, args, out: lengths.append(args[0].shape[1]))
    crop = cfg.task.crop_size
    with torch.no_grad():
        backbone(torch.randn(1, 3, cfg.task.n_frames, crop, crop))
    assert lengths == [cfg.task.n_frames] * cfg.model.iterations
    assert cfg.task.n_frames == (16 if experiment == "video/stage2" else 8)  # synthetic: 8 frames


def test_synthetic_experiment_composes() -> None:
    cfg = composed("experiment=video/synthetic_cpu", "model=cr_vit")
    assert (
        cfg.task.module.optimizer._target_ == "torch.optim.AdamW" and cfg.task.dataset == "synthetic_motion"
    )
    assert (cfg.model.d_model, cfg.model.n_layers, cfg.task.crop_size) == (64, 2, 32)


REFERENCE = """source,model,model_as_printed,rnn,protocol,metric,value,note
Table 7,TimeSformer,TIMESFORMER,,CS,mCA,71.5,"marked * in table"
Table 7,CRViT,CRViT (OURS),GRU,CS,mCA,73.4,proposed model
Table 7,TimeSformer,TIMESFORMER,,CS,mCA,68.4,"first row of the PI-ViT ablation block (TimeSformer baseline)"
Table 13,CRViT,CRViT - NCGRU,NCGRU,CS,mCA,72.2,
"""


def test_layout_keeps_table_7_away_from_synthetic_runs(tmp_path: Path) -> None:
    (tmp_path / "crt_smarthome.csv").write_text(REFERENCE)
    for model, values in (("timesformer", (60.0, 70.0)), ("cr_vit", (80.0, 90.0))):
        for seed, value in zip((1, 2), values, strict=True):
            record = {
                "task": "video/smarthome_cs",
                "family": "video",
                "dataset": "synthetic_motion",
                "setting": {"protocol": "cs"},
                "preset": "cpu",
                "compat": "default",
                "model": model,
                "seed": seed,
                "metrics": {"mca": value, "acc": value + 1},
                "wall_time_s": 10.0,
                "git_commit": "abc",
            }
            write_summary(tmp_path / "runs" / f"{model}{seed}", record)
    (table,) = video.build(load_runs([tmp_path / "runs"]), tmp_path)
    assert "SYNTHETIC" in table.title
    frame = table.frame.set_index("model")
    assert "mca (paper)" not in frame  # issue 25: never beside the paper's Smarthome numbers
    assert frame.loc["cr_vit", "mca (ours)"] == "85.0 ± 7.1" and frame.loc["cr_vit", "n"] == 2

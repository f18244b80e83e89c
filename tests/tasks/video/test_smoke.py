"""End to end: train.py on generated mp4 clips in the release layout, for each video model."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hydra.utils import instantiate

from recurrent_attention.config import backbone_config
from recurrent_attention.tasks.video.encoders import CRViT
from tests.conftest import read_summaries
from tests.tasks.video.test_configs import composed

pytestmark = pytest.mark.slow

TINY = [
    "preset=smoke",
    "task.n_frames=4",
    "task.stride=2",
    "task.crop_size=16",
    "task.short_side_min=16",
    "task.short_side_max=20",
    "task.test_views=2",
    "model.patch_size=8",
]


@pytest.mark.parametrize(
    ("model", "extra"),
    [
        ("timesformer", []),
        ("timesformer", ["task.compat=reference"]),
        ("cr_vit", []),
        ("cr_vit", ["model.time_mixer=aaren", "model.rnn=ncgru"]),
        ("timesformer", ["model.time_mixer=linear"]),
    ],
)
def test_smoke_run(train_runner, release_folder: Path, tmp_path: Path, model: str, extra: list[str]) -> None:
    out = tmp_path / "out"
    train_runner(
        [
            f"model={model}",
            "task=video/smarthome_cs",
            f"task.datamodule.path={release_folder}",
            *TINY,
            *extra,
        ],
        out,
    )
    (summary,) = read_summaries(out)
    assert summary["family"] == "video" and summary["model"] == model
    assert summary["setting"] == {"protocol": "cs", "n_frames": 4}
    # 4 test clips (one per motion class; Pour.Fromcup dropped): mCA and top-1 are multiples of 25
    metrics = summary["metrics"]
    assert metrics["mca"] == metrics["acc"] and round(metrics["acc"] / 25, 6).is_integer()
    assert metrics["loss"] > 0
    # PI-ViT tests the last checkpoint; the default protocol the best on validation
    tested = "last.ckpt" if "task.compat=reference" in extra else "best.ckpt"
    assert Path(summary["tested_checkpoint"]).name == tested


def test_missing_path_is_one_line(train_runner, tmp_path: Path) -> None:
    proc = train_runner(
        [
            "model=timesformer",
            "task=video/smarthome_cs",
            f"task.datamodule.path={tmp_path / 'nowhere'}",
            *TINY,
        ],
        tmp_path / "out",
        check=False,
    )
    assert proc.returncode == 2
    assert (
        proc.stderr.strip().splitlines()[-1].startswith(f"error: task.datamodule.path={tmp_path / 'nowhere'}")
    )


def test_stage_two_starts_from_stage_one(train_runner, release_folder: Path, tmp_path: Path) -> None:
    """The paper's recipe as configs: TimeSformer (stage 1), then CR-ViT from its last checkpoint."""
    common = [f"task.datamodule.path={release_folder}", "preset=smoke", "task.max_epochs=1", *TINY]
    train_runner(["experiment=video/synthetic_stage1", *common], tmp_path / "one")
    (checkpoint,) = (tmp_path / "one").rglob("checkpoints/last.ckpt")
    stage_two = ["experiment=video/synthetic_stage2", f"stage1={checkpoint}", *common]
    cfg = composed(*stage_two)
    backbone = instantiate(backbone_config(cfg.model))
    saved = torch.load(checkpoint, map_location="cpu", weights_only=False)["state_dict"]
    assert isinstance(backbone, CRViT) and "backbone.blocks.1.temporal_attn.qkv.weight" in saved
    for key, value in backbone.state_dict().items():
        if not key.startswith("memory_rnn."):
            torch.testing.assert_close(value, saved[f"backbone.{key}"], rtol=0, atol=0)
    train_runner(stage_two, tmp_path / "two")
    (summary,) = read_summaries(tmp_path / "two")
    assert summary["model"] == "cr_vit" and summary["metrics"]["mca"] >= 0


def test_stage_two_without_stage_one_is_one_line(train_runner, release_folder: Path, tmp_path: Path) -> None:
    proc = train_runner(
        [
            "experiment=video/synthetic_stage2",
            f"task.datamodule.path={release_folder}",
            "preset=smoke",
            *TINY,
        ],
        tmp_path / "out",
        check=False,
    )
    assert proc.returncode == 2
    assert (
        proc.stderr.strip().splitlines()[-1]
        == "error: stage1 has no value (???); set it, e.g. stage1=<value>"
    )

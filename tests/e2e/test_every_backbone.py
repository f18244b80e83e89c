"""Every sequence backbone in ``conf/model`` trains and tests on every sequence family's smoke preset.

The backbones are read from the folder (:func:`tests.helpers.backbones.sequence_backbones`), so a
model config added there runs here with no test edited: one ``train.py -m model=<all>`` sweep per
family, on tiny generated files in the family's real format. Video is absent: its time mixer is the
CR-ViT's own recurrent Transformer, not a ``conf/model`` backbone (docs/backbones.md says why).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from recurrent_attention.tasks.rl.collect import collect_episodes
from recurrent_attention.tasks.rl.formats import write_d4rl
from tests.conftest import read_summaries, run_train
from tests.helpers.backbones import sequence_backbones
from tests.tasks.ef.test_e2e import write_thp_mirror
from tests.tasks.lm.test_e2e import corpus_files_override
from tests.tasks.tsc.conftest import write_toy_pair
from tests.tasks.tsf.test_data import write_ett_csv

pytestmark = pytest.mark.slow

BACKBONES = sequence_backbones()


def tsf(tmp_path: Path) -> tuple[list[str], dict[str, str]]:
    path = tmp_path / "ETTh1.csv"
    write_ett_csv(path, 14400)
    return ["task=tsf/etth1", f"task.datamodule.path={path}", "task.pred_len=8", "task.seq_len=16"], {}


def tsc(tmp_path: Path) -> tuple[list[str], dict[str, str]]:
    train, test = write_toy_pair(tmp_path)
    overrides = [
        "task=tsc/japanesevowels",
        "task.n_channels=3",
        "task.n_classes=3",
        "task.max_len=12",
        f"task.datamodule.train_path={train}",
        f"task.datamodule.test_path={test}",
    ]
    return overrides, {"RA_DATA_MIRROR": str(tmp_path)}


def ef(tmp_path: Path) -> tuple[list[str], dict[str, str]]:
    folder = write_thp_mirror(tmp_path / "mirror")
    overrides = ["task=ef/mimic", "task.n_marks=4", f"task.datamodule.path={folder}"]
    return overrides, {"RA_DATA_MIRROR": str(tmp_path / "mirror")}


def lm(tmp_path: Path) -> tuple[list[str], dict[str, str]]:
    return ["task=lm/ptb", "task.vocab_size=31", "task.seg_len=8", corpus_files_override(tmp_path)], {}


def rl(tmp_path: Path) -> tuple[list[str], dict[str, str]]:
    data = write_d4rl(tmp_path / "hopper.hdf5", collect_episodes("hopper", "random", 4, seed=0))
    overrides = [
        "task=rl/hopper_medium",
        f"task.datamodule.path={data}",
        "task.eval_episodes=2",
        "task.eval_envs=2",
        "task.max_episode_steps=20",
    ]
    return overrides, {}


FAMILIES = {"tsf": tsf, "tsc": tsc, "ef": ef, "lm": lm, "rl": rl}


@pytest.mark.parametrize("family", FAMILIES)
def test_every_backbone_runs_the_family(family: str, tmp_path: Path) -> None:
    overrides, env = FAMILIES[family](tmp_path)
    out = tmp_path / "out"
    # a sweep goes on past a failed job, so every backbone's failure shows at once
    proc = run_train(
        ["-m", f"model={','.join(BACKBONES)}", "preset=smoke", *overrides], out, env=env, check=False
    )
    summaries = {s["model"]: s for s in read_summaries(out)}
    failed = sorted(set(BACKBONES) - set(summaries))
    assert not failed, f"{family}: no summary for {failed}:\n{proc.stderr[-4000:]}"
    for model, summary in summaries.items():
        assert summary["family"] == family and summary["preset"] == "smoke"
        assert summary["metrics"] and all(math.isfinite(v) for v in summary["metrics"].values()), model

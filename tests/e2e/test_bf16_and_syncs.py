"""Every task family trains sync-free and finishes a bf16-mixed run; ``trainer=gpu`` feeds the GPU.

- Host-device syncs: two smoke training steps of each family (training_step, backward, optimiser
  step), built in-process from the composed config as train.py builds them, recorded by
  ``tests/helpers/host_sync.py`` between ``on_train_batch_start`` and ``on_train_batch_end``. On a
  GPU every such op would stall the queue each step; none is allowed but Lightning's own logging.
  The EF task skips a batch's padding by reading it on the host where that is free, and Aaren
  picks its chunked kernel by reading the scores there (the CPU: ``ops/host_reads.py``); Aaren also
  runs compiled CPU kernels where it can (``ops/native.py``): the test runs all of them as on a GPU.
- bf16: one ``trainer.precision=bf16-mixed`` smoke run of train.py per family (fit, validation and
  the family's own test: RL's episodes in the environment, video's views, ...), Aaren and softmax
  backbones between them, TSF's with a window longer than one chunk of Aaren's operator (1024 tokens).
- ``trainer=gpu``: loader workers, pinned memory, TF32 matmuls; the run log's device line.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf, open_dict

from recurrent_attention.config import CONFIG_DIR, backbone_config, register_resolvers
from recurrent_attention.errors import ConfigError
from recurrent_attention.ops import host_reads, native
from recurrent_attention.tasks.base import loader_options
from recurrent_attention.train import loader_settings, set_matmul_precision
from tests.conftest import read_summaries, run_train
from tests.e2e.test_every_backbone import ef, lm, rl, tsc, tsf
from tests.helpers.host_sync import HostSyncs, record_host_syncs
from tests.tasks.video.test_smoke import TINY

register_resolvers()
# the module, which ``recurrent_attention.ops`` shadows with its function of the same name

# the video smoke runs' tiny clips (preset=smoke comes with composed()), two training steps from few clips
VIDEO_TINY = [*(o for o in TINY if o != "preset=smoke"), "task.batch_size=2"]


def video(tmp_path: Path) -> tuple[list[str], dict[str, str]]:
    pytest.importorskip("av", reason="the video family decodes with PyAV (pip install -e '.[video]')")
    from recurrent_attention.tasks.video.synthetic import generate

    generate(tmp_path / "smarthome", per_class=1, n_frames=12, size=32, seed=0)
    return ["task=video/smarthome_cs", f"task.datamodule.path={tmp_path / 'smarthome'}", *VIDEO_TINY], {}


FAMILIES: dict[str, Callable[[Path], tuple[list[str], dict[str, str]]]] = {
    "tsf": tsf,
    "tsc": tsc,
    "ef": ef,
    "lm": lm,
    "rl": rl,
    "video": video,
}


class RecordSyncs(L.Callback):
    """Records every host-device sync of each training step: forward, backward, optimiser step."""

    def __init__(self) -> None:
        self.steps: list[HostSyncs] = []

    def on_train_batch_start(
        self, trainer: L.Trainer, module: L.LightningModule, batch: Any, idx: int
    ) -> None:
        self.recorder = record_host_syncs()
        self.steps.append(self.recorder.__enter__())

    def on_train_batch_end(
        self, trainer: L.Trainer, module: L.LightningModule, outputs: Any, batch: Any, idx: int
    ) -> None:
        self.recorder.__exit__(None, None, None)


def composed(family: str, model: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> DictConfig:
    """The family's smoke config on its generated data; ``model``: ``<name> [model.key=value ...]``."""
    overrides, env = FAMILIES[family](tmp_path)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    name, *model_keys = model.split()
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        return compose(
            "train",
            overrides=[
                f"model={name}",
                "preset=smoke",
                f"paths.output_dir={tmp_path}",
                *overrides,
                *model_keys,
            ],
        )


# (family, model): the softmax Transformer for every family (TimeSformer for video), and Aaren's
# operator where the family takes a sequence backbone (CR-ViT's Aaren time mixer for video).
SYNC_CASES = [
    *[(family, "transformer") for family in ("tsf", "tsc", "ef", "lm", "rl")],
    ("video", "timesformer"),
    *[(family, "aaren") for family in ("tsf", "tsc", "ef", "lm", "rl")],
    ("video", "cr_vit model.time_mixer=aaren"),
]


@pytest.mark.parametrize(("family", "model"), SYNC_CASES)
def test_training_steps_have_no_host_sync(
    family: str, model: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = composed(family, model, tmp_path, monkeypatch)
    # EF's padding and Aaren's choice of kernel as off the CPU, where they read nothing back
    monkeypatch.setattr(host_reads, "HOST_READ_DEVICES", frozenset())
    monkeypatch.setattr(native, "extension", lambda: None)  # Aaren's PyTorch forms, as on a GPU
    L.seed_everything(0)
    recorder = RecordSyncs()
    trainer = instantiate(
        cfg.trainer,
        callbacks=[recorder],
        logger=False,
        enable_checkpointing=False,
        max_epochs=1,
        limit_train_batches=2,
        limit_val_batches=0,
        default_root_dir=str(tmp_path),
    )
    module = instantiate(cfg.task.module, backbone=instantiate(backbone_config(cfg.model)))
    trainer.fit(module, datamodule=instantiate(cfg.task.datamodule))
    assert len(recorder.steps) == 2
    found = [f"step {i}: {s.summary()}" for i, s in enumerate(recorder.steps) if s.found]
    assert not found, f"{family}/{model}: host-device syncs in the training step:\n" + "\n".join(found)


# One bf16-mixed run per family: Aaren (TSF's window of 1100 tokens is two chunks of its operator)
# and softmax backbones between them.
BF16_CASES = {
    "tsf": ["model=aaren", "task.seq_len=1100"],
    "tsc": ["model=transformer"],
    "ef": ["model=aaren"],
    "lm": ["model=transformer"],
    "rl": ["model=aaren"],
    "video": ["model=timesformer"],
}


@pytest.mark.slow
@pytest.mark.parametrize("family", BF16_CASES)
def test_bf16_mixed_run_of_every_family(family: str, tmp_path: Path) -> None:
    overrides, env = FAMILIES[family](tmp_path)
    out = tmp_path / "out"
    proc = run_train(
        ["preset=smoke", "trainer.precision=bf16-mixed", *overrides, *BF16_CASES[family]], out, env=env
    )
    (summary,) = read_summaries(out)
    assert summary["metrics"] and all(math.isfinite(v) for v in summary["metrics"].values())
    # the run log names, before training, where and how the run trains
    line = "precision bf16-mixed, float32 matmul highest, backbone compiled: no"
    assert "device cpu (CPU " in proc.stdout and line in proc.stdout
    (log,) = out.rglob("train.log")
    assert line in log.read_text()


def test_gpu_trainer_feeds_the_gpu_and_cpu_keeps_its_defaults() -> None:
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        gpu = compose("train", overrides=["trainer=gpu", "preset=smoke"])
        cpu = compose("train", overrides=["preset=smoke"])
    assert gpu.loader == {"num_workers": 2, "pin_memory": True, "persistent_workers": True}
    assert gpu.float32_matmul_precision == "high"
    assert gpu.trainer.precision == "bf16-mixed" and gpu.trainer.accelerator == "gpu"
    # the cpu trainer's own keys stay under trainer (gpu.yaml is _global_ to set the two above)
    assert {k: v for k, v in gpu.trainer.items() if k not in ("accelerator", "precision")} == {
        k: v for k, v in cpu.trainer.items() if k not in ("accelerator", "precision")
    }
    assert "loader" not in cpu and "float32_matmul_precision" not in cpu


@pytest.mark.parametrize("family", FAMILIES)
def test_loader_settings_reach_every_familys_training_loader(
    family: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """train.py passes ``trainer=gpu``'s ``loader`` node to each datamodule; trainer=cpu passes none
    and loads in the main process, unpinned, as before; video keeps its own ``task.num_workers``
    (its random views are drawn in the workers, so it is part of the run). A training batch goes to
    a GPU by copies that do not block (from pinned memory, asynchronous): Lightning's, which no
    family overrides."""
    model = {"video": "timesformer"}.get(family, "transformer")
    cfg = composed(family, model, tmp_path, monkeypatch)
    settings = {"num_workers": 2, "pin_memory": True, "persistent_workers": True}
    assert loader_settings(cfg) == {}
    with open_dict(cfg):
        cfg.loader = settings
    workers = 0 if family == "video" else 2
    for given, expected in (({}, (0, False, False)), (loader_settings(cfg), (workers, True, workers > 0))):
        datamodule = instantiate(cfg.task.datamodule, **given)
        datamodule.setup("fit")
        loader = datamodule.train_dataloader()
        assert (loader.num_workers, loader.pin_memory, loader.persistent_workers) == expected
        if not given:
            batch = next(iter(loader))  # read in this process
    module = instantiate(cfg.task.module, backbone=instantiate(backbone_config(cfg.model)))
    copies: list[bool] = []
    monkeypatch.setattr(
        torch.Tensor, "to", lambda t, *a, non_blocking=False, **k: copies.append(non_blocking) or t
    )
    module.transfer_batch_to_device(batch, torch.device("cuda", 0), 0)
    assert copies and all(copies)


def test_bad_loader_or_matmul_settings_are_one_line() -> None:
    with pytest.raises(ConfigError, match=r"^loader.num_worker is not a loader setting: use num_workers,"):
        loader_settings(OmegaConf.create({"loader": {"num_worker": 2}}))
    with pytest.raises(
        ConfigError, match=r"^loader.num_workers=-1: need 0 \(load in the main process\) or more"
    ):
        loader_options(-1, pin_memory=False, persistent_workers=False)
    with pytest.raises(ConfigError, match=r"^float32_matmul_precision=tf32: choose one of highest, high"):
        set_matmul_precision(OmegaConf.create({"float32_matmul_precision": "tf32"}))


def test_matmul_precision_is_set_where_the_config_has_it() -> None:
    before = torch.get_float32_matmul_precision()
    try:
        set_matmul_precision(OmegaConf.create({}))
        assert torch.get_float32_matmul_precision() == before
        set_matmul_precision(OmegaConf.create({"float32_matmul_precision": "medium"}))
        assert torch.get_float32_matmul_precision() == "medium"
    finally:
        torch.set_float32_matmul_precision(before)

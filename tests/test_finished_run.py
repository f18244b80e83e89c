"""The one loader of a finished run takes the checkpoint its summary names, not one picked by name."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from omegaconf import OmegaConf

from recurrent_attention.config import CONFIG_DIR, backbone_config, register_resolvers
from recurrent_attention.finished_run import load_finished_run
from recurrent_attention.models import Aaren
from tests.helpers.protocols import protocol


def write_run(run_dir: Path, task: str = "ef/sin", overrides: Sequence[str] = ()) -> torch.nn.Module:
    """A run folder as train.py leaves it after a restart: the composed config, a killed attempt's
    ``best.ckpt`` (fresh weights), the new attempt's ``best-v1.ckpt`` and a summary that names it."""
    register_resolvers()
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        cfg = compose(
            "train", overrides=[f"task={task}", "model=aaren", "preset=smoke", "~logger", *overrides]
        )
    torch.manual_seed(1)
    module = instantiate(cfg.task.module, backbone=instantiate(backbone_config(cfg.model)))
    (run_dir / ".hydra").mkdir(parents=True)
    OmegaConf.save(cfg, run_dir / ".hydra" / "config.yaml")
    (run_dir / "checkpoints").mkdir()
    torch.save({"state_dict": module.state_dict(), "epoch": 0}, run_dir / "checkpoints" / "best.ckpt")
    with torch.no_grad():
        for p in module.parameters():
            p.add_(torch.randn_like(p))  # weights no fresh initialisation could reproduce
    named = run_dir / "checkpoints" / "best-v1.ckpt"
    torch.save({"state_dict": module.state_dict(), "epoch": 3}, named)
    summary = {"task": task, "family": cfg.task.family, "best_checkpoint": str(named)}
    (run_dir / "summary.json").write_text(json.dumps(summary))
    return module


def test_a_trained_run_loads_the_checkpoint_its_summary_names(tmp_path) -> None:
    module = write_run(tmp_path / "run")
    loaded = load_finished_run(tmp_path / "run").load_module().backbone
    assert isinstance(loaded, Aaren)
    for (name, a), b in zip(module.backbone.state_dict().items(), loaded.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


def test_a_run_saved_passing_the_protocols_name_loads_with_its_object(tmp_path) -> None:
    """A run saved before protocols were objects (issue 68): EF's module took ``compat`` and
    ``time_every_layer``; it loads with the reference protocol's object, its saved field kept."""
    register_resolvers()
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        cfg = compose(
            "train", overrides=["task=ef/sin", "model=aaren", "preset=smoke", "task.compat=reference"]
        )
    module = instantiate(cfg.task.module, backbone=instantiate(backbone_config(cfg.model)))
    old = OmegaConf.to_container(cfg)
    del old["task"]["module"]["rules"], old["task"]["rules"], old["task"]["protocols"]
    old["task"]["module"].update(compat="${task.compat}", time_every_layer=False)
    run_dir = tmp_path / "run"
    (run_dir / ".hydra").mkdir(parents=True)
    OmegaConf.save(OmegaConf.create(old), run_dir / ".hydra" / "config.yaml")
    (run_dir / "checkpoints").mkdir()
    torch.save({"state_dict": module.state_dict()}, run_dir / "checkpoints" / "last.ckpt")
    (run_dir / "summary.json").write_text(
        json.dumps({"best_checkpoint": str(run_dir / "checkpoints/last.ckpt")})
    )
    loaded = load_finished_run(run_dir).load_module()
    assert loaded.rules == replace(protocol("ef", "reference"), time_every_layer=False)

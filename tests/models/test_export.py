"""The exported ONNX step (run by onnxruntime) equals the eager step token after token; the script."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from omegaconf import OmegaConf

from recurrent_attention.config import CONFIG_DIR, register_resolvers
from recurrent_attention.models import Aaren, Transformer
from recurrent_attention.models.export import (
    OnnxStep,
    OnnxStream,
    export_onnx,
    load_backbone,
    main,
    pack_state,
)

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> tuple[Aaren, Path]:
    """An Aaren and its exported step, exported once (seconds) for the tests that only read them."""
    torch.manual_seed(0)
    model = Aaren(16, 4, 2, 32, dropout=0.0).eval()
    return model, export_onnx(model, tmp_path_factory.mktemp("export") / "step.onnx")


@pytest.mark.slow
def test_onnx_step_equals_eager_step_over_100_tokens(exported) -> None:
    model, path = exported
    onnx_step = OnnxStep(path)
    batch = 3  # exported with batch 2: the batch size must stay free
    torch.manual_seed(1)
    x = torch.randn(100, batch, 16) * 3.0
    state = model.init_state(batch)
    onnx_state = tuple(t.numpy() for t in pack_state(state))
    with torch.no_grad():
        for x_t in x:
            y_t, state = model.step(x_t, state)
            onnx_y, onnx_state = onnx_step(x_t.numpy(), onnx_state)
            np.testing.assert_allclose(onnx_y, y_t.numpy(), rtol=1e-4, atol=1e-5)
    for eager, exported in zip(pack_state(state), onnx_state, strict=True):
        np.testing.assert_allclose(exported, eager.numpy(), rtol=1e-4, atol=1e-5)
    assert onnx_state[2].shape == (2, batch, 4, 4)


@pytest.mark.slow
def test_onnx_stream_keeps_the_state_and_equals_eager_step_over_100_tokens(exported) -> None:
    """The IO-bound stream swaps two state buffers: every token must read the state the last one wrote."""
    model, path = exported
    batch = 3
    torch.manual_seed(1)
    x = torch.randn(100, batch, 16) * 3.0
    state = model.init_state(batch)
    stream = OnnxStream(path, tuple(t.numpy() for t in pack_state(state)))
    with torch.no_grad():
        for x_t in x:
            y_t, state = model.step(x_t, state)
            np.testing.assert_allclose(stream.push(x_t.numpy()), y_t.numpy(), rtol=1e-4, atol=1e-5)
    for eager, exported in zip(pack_state(state), stream.state, strict=True):
        np.testing.assert_allclose(exported, eager.numpy(), rtol=1e-4, atol=1e-5)


def test_only_aaren_exports(tmp_path) -> None:
    with pytest.raises(TypeError, match="only Aaren's step"):
        export_onnx(Transformer(16, 4, 1, 32), tmp_path / "step.onnx")


def write_run(run_dir: Path, task: str = "ef/sin", overrides: Sequence[str] = ()) -> torch.nn.Module:
    """A run folder as train.py leaves it after a restart: the composed config, a killed attempt's
    ``best.ckpt`` (fresh weights), the new attempt's ``best-v1.ckpt`` and a summary that names it."""
    register_resolvers()
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        cfg = compose(
            "train", overrides=[f"task={task}", "model=aaren", "preset=smoke", "~logger", *overrides]
        )
    torch.manual_seed(1)
    module = instantiate(cfg.task.module, backbone=instantiate(cfg.model.backbone))
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
    loaded = load_backbone(tmp_path / "run")
    assert isinstance(loaded, Aaren)
    for (name, a), b in zip(module.backbone.state_dict().items(), loaded.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


def test_script_names_a_folder_that_is_not_a_run(tmp_path, capsys) -> None:
    assert main([str(tmp_path)]) == 2
    assert "not a finished train.py run" in capsys.readouterr().err

"""A training checkpoint written before q/k/v were fused (13988e3) resumes as if it had been written
in the fused layout (the same parameters after more steps), and loads for inference with the same
weights: both through :mod:`~recurrent_attention.migration`, called where checkpoints are loaded.

The truth is independent of the conversion: the test writes the old checkpoint itself, from a fused
one, by rebuilding every ``HeadProjections`` as it was (``q_proj``, ``k_proj``, ``v_proj``,
``out_proj`` linear layers, in that order), giving each part its third of the fused weights and of
the optimiser's buffers, and letting a torch optimiser over that old model number the parameters.
"""

from __future__ import annotations

import copy
import importlib
import inspect
import pkgutil
from functools import partial
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
import torch.nn.functional as F
from hydra.utils import instantiate
from torch import Tensor, nn
from torch.utils.data import DataLoader, TensorDataset

from recurrent_attention import tasks
from recurrent_attention.config import backbone_config
from recurrent_attention.errors import CheckpointError
from recurrent_attention.models.blocks import HeadProjections
from recurrent_attention.tasks.base import TaskModule
from tests.helpers.backbones import D_MODEL, model_config

STEPS_BEFORE, STEPS_AFTER = 4, 4  # two batches an epoch
SEPARATE = ("q_proj", "k_proj", "v_proj")


class Regression(TaskModule):
    """The smallest task: a linear head on the backbone's outputs, mean squared error."""

    def __init__(self, backbone: nn.Module, optimizer: partial) -> None:
        super().__init__(backbone, optimizer)
        self.head = nn.Linear(D_MODEL, 1)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        x, y = batch
        return F.mse_loss(self.head(self.backbone(x)[0]), y)


def make_module(model: str, overrides: tuple[str, ...], optimizer: partial) -> Regression:
    torch.manual_seed(0)
    return Regression(instantiate(backbone_config(model_config(model, overrides).model)), optimizer)


def loader() -> DataLoader:
    gen = torch.Generator().manual_seed(1)
    x, y = torch.randn(8, 6, D_MODEL, generator=gen), torch.randn(8, 6, 1, generator=gen)
    return DataLoader(TensorDataset(x, y), batch_size=4)


def fit(module: Regression, steps: int, ckpt_path: Path | None = None) -> L.Trainer:
    trainer = L.Trainer(
        max_steps=steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
    )
    trainer.fit(module, train_dataloaders=loader(), ckpt_path=ckpt_path)
    return trainer


def old_layout(module: Regression) -> tuple[Regression, dict[str, tuple[str, int | None]]]:
    """A copy of ``module`` with each ``HeadProjections`` rebuilt as before the fusion, and for each
    of its parameters the fused parameter's name and which third of it (None: all) it holds."""
    old = make_module_like(module)
    fused_names = dict(module.named_parameters())
    for proj in list(old.modules()):
        if not isinstance(proj, HeadProjections):
            continue
        qkv, out = proj.qkv, proj.out_proj
        del proj.qkv, proj.out_proj
        for third, name in enumerate(SEPARATE):
            layer = nn.Linear(D_MODEL, D_MODEL, bias=qkv.bias is not None)
            layer.weight = nn.Parameter(qkv.weight.detach().chunk(3)[third].clone())
            if qkv.bias is not None:
                layer.bias = nn.Parameter(qkv.bias.detach().chunk(3)[third].clone())
            setattr(proj, name, layer)
        proj.out_proj = out
    source: dict[str, tuple[str, int | None]] = {}
    for name, _ in old.named_parameters():
        for third, part in enumerate(SEPARATE):
            if f".{part}." in name:
                source[name] = (name.replace(f".{part}.", ".qkv."), third)
                break
        else:
            source[name] = (name, None)
    assert {fused for fused, _ in source.values()} == set(fused_names)
    return old, source


def make_module_like(module: Regression) -> Regression:
    """A detached copy of ``module`` (a trained one is attached to its trainer)."""
    fresh = Regression(copy.deepcopy(module.backbone), module.optimizer_factory)
    fresh.head.load_state_dict(module.head.state_dict())
    return fresh


def written_before_the_fusion(
    module: Regression, optimizer: torch.optim.Optimizer, checkpoint: dict[str, Any]
) -> tuple[dict[str, Any], list[str]]:
    """``checkpoint`` (of ``module``, trained by ``optimizer``) as the code before the fusion wrote it,
    and the names of its parameters in the order its optimiser numbered them."""
    old, source = old_layout(module)
    fused = dict(module.named_parameters())
    old_optimizer = old.optimizer_factory(old.parameters())
    for name, parameter in old.named_parameters():
        fused_name, third = source[name]
        entry = optimizer.state[fused[fused_name]]
        old_optimizer.state[parameter] = {
            key: value.chunk(3)[third].clone()
            if third is not None and isinstance(value, Tensor) and value.shape == fused[fused_name].shape
            else value
            for key, value in entry.items()
        }
    state = old_optimizer.state_dict()
    (group,) = checkpoint["optimizer_states"][0]["param_groups"]
    state["param_groups"] = [{**group, "params": state["param_groups"][0]["params"]}]
    return {**checkpoint, "state_dict": old.state_dict(), "optimizer_states": [state]}, list(source)


def trained_checkpoints(
    tmp_path: Path, model: str, overrides: tuple[str, ...], optimizer: partial
) -> tuple[Path, Path, list[str]]:
    """The fused checkpoint after ``STEPS_BEFORE`` steps, the same written in the old layout, and the
    old layout's parameter names in the order its optimiser numbered them."""
    module = make_module(model, overrides, optimizer)
    trainer = fit(module, STEPS_BEFORE)
    fused, old = tmp_path / "fused.ckpt", tmp_path / "old.ckpt"
    trainer.save_checkpoint(fused)
    checkpoint = torch.load(fused, weights_only=False)
    legacy, names = written_before_the_fusion(module, trainer.optimizers[0], checkpoint)
    assert len(legacy["optimizer_states"][0]["state"]) > len(checkpoint["optimizer_states"][0]["state"])
    torch.save(legacy, old)
    return fused, old, names


OPTIMIZERS = [
    pytest.param("aaren", (), partial(torch.optim.Adam, lr=1e-2), id="aaren-adam"),
    pytest.param("transformer", (), partial(torch.optim.SGD, lr=1e-2, momentum=0.9), id="transformer-sgd"),
    pytest.param(
        "aaren", ("model.qkv_bias=false",), partial(torch.optim.RAdam, lr=1e-2), id="aaren-nobias-radam"
    ),
    pytest.param(
        "transformer",
        ("model.qkv_bias=false",),
        partial(torch.optim.AdamW, lr=1e-2, amsgrad=True),
        id="transformer-nobias-amsgrad",
    ),
]


@pytest.mark.parametrize(("model", "overrides", "optimizer"), OPTIMIZERS)
def test_an_old_layout_checkpoint_resumes_as_the_fused_one(
    tmp_path: Path, model: str, overrides: tuple[str, ...], optimizer: partial
) -> None:
    fused, old, _ = trained_checkpoints(tmp_path, model, overrides, optimizer)
    resumed = {}
    for checkpoint in (fused, old):
        module = make_module(model, overrides, optimizer)
        fit(module, STEPS_BEFORE + STEPS_AFTER, ckpt_path=checkpoint)
        resumed[checkpoint] = dict(module.named_parameters())
    before = torch.load(fused, weights_only=False)["state_dict"]
    for name, parameter in resumed[fused].items():
        assert not torch.equal(parameter, before[name]), name  # the resumed steps trained it
        assert torch.equal(resumed[old][name], parameter), name


def test_an_old_layout_checkpoint_loads_for_inference_with_the_fused_weights(tmp_path: Path) -> None:
    """``load_from_checkpoint`` (Lightning runs ``on_load_checkpoint`` before ``load_state_dict``)."""
    optimizer = partial(torch.optim.Adam, lr=1e-2)
    fused, old, _ = trained_checkpoints(tmp_path, "transformer", (), optimizer)
    backbone = make_module("transformer", (), optimizer).backbone
    loaded = Regression.load_from_checkpoint(old, backbone=backbone, optimizer=optimizer)
    expected = torch.load(fused, weights_only=False)["state_dict"]
    assert loaded.state_dict().keys() == expected.keys()
    for name, tensor in loaded.state_dict().items():
        assert torch.equal(tensor, expected[name]), name


def test_parts_stepped_apart_are_refused_naming_the_checkpoint_and_the_fix(tmp_path: Path) -> None:
    """A fused parameter has one step count: parts with different counts cannot become one."""
    optimizer = partial(torch.optim.Adam, lr=1e-2)
    _, old, names = trained_checkpoints(tmp_path, "aaren", (), optimizer)
    checkpoint = torch.load(old, weights_only=False)
    key = next(i for i, name in enumerate(names) if name.endswith(".k_proj.weight"))
    entry = checkpoint["optimizer_states"][0]["state"][key]
    entry["step"] = entry["step"] + 1
    torch.save(checkpoint, old)
    with pytest.raises(CheckpointError, match=rf"{old}: parameter \d+: .*'step'.*force=true"):
        fit(make_module("aaren", (), optimizer), STEPS_BEFORE + 1, ckpt_path=old)


def task_modules() -> list[type[TaskModule]]:
    """Every ``TaskModule`` subclass of the task families (each family's ``module.py`` imported)."""
    for info in pkgutil.iter_modules(tasks.__path__):
        if info.ispkg:
            importlib.import_module(f"{tasks.__name__}.{info.name}.module")
    found, pending = [], [TaskModule]
    while pending:
        found.extend(children := pending.pop().__subclasses__())
        pending.extend(children)
    return found


def test_every_task_module_that_overrides_the_load_hook_calls_the_conversion() -> None:
    """A family's ``on_load_checkpoint`` that left out ``super()`` would resume old checkpoints with
    the unconverted optimiser state (RL and TSC keep state of their own there)."""
    overriding = [cls for cls in task_modules() if "on_load_checkpoint" in vars(cls)]
    assert overriding
    for cls in overriding:
        assert "super().on_load_checkpoint(checkpoint)" in inspect.getsource(cls.on_load_checkpoint), cls

"""experiment=crt/ptb_ablation: four configs of one model on Table 2's CPU budget, and its
Transformer row is ``model=transformer`` (same parameters, same initial weights, same NLL)."""

from __future__ import annotations

import itertools

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from omegaconf import OmegaConf

from recurrent_attention.config import CONFIG_DIR, register_resolvers

register_resolvers()
TABLE2_ROW = ["experiment=crt/ptb_3layer_cpu", "model.n_layers=3", "task.seg_len=70"]


def _compose(overrides: list[str], hydra: bool = False):
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        return compose("train", overrides=overrides, return_hydra_config=hydra)


def _sweep() -> dict[str, list[str]]:
    params = _compose(["experiment=crt/ptb_ablation"], hydra=True).hydra.sweeper.params
    return {key: str(value).split(",") for key, value in params.items()}


def test_one_command_sweeps_the_four_rows_and_two_seeds():
    sweep = _sweep()
    assert sweep["model"] == ["crt"] and sweep["seed"] == ["1", "2"]
    assert sweep["model.n_layers"] == ["3"] and sweep["task.seg_len"] == ["70"]
    assert {(m, p) for m in sweep["model.memory_token"] for p in sweep["model.recurrent_positions"]} == set(
        itertools.product(["true", "false"], repeat=2)
    )


@pytest.mark.parametrize(("memory_token", "recurrent_positions"), itertools.product([True, False], repeat=2))
def test_each_row_keeps_table_2s_budget(memory_token, recurrent_positions):
    switches = [f"model.memory_token={memory_token}", f"model.recurrent_positions={recurrent_positions}"]
    row = _compose(["experiment=crt/ptb_ablation", "model=crt", *TABLE2_ROW[1:], *switches])
    table2 = OmegaConf.to_container(_compose(["model=crt", *TABLE2_ROW, *switches]), resolve=True)
    row = OmegaConf.to_container(row, resolve=True)
    setting = row["task"].pop("setting")
    assert setting == {
        "seg_len": 70,
        "n_layers": 3,
        "memory_token": memory_token,
        "recurrent_positions": recurrent_positions,
        "reset_positions": True,
    }
    table2["task"].pop("setting")
    assert row == table2  # sizes, schedule, data, trainer: all Table 2's
    # no recurrent positions -> the LM head adds the Transformer's sinusoidal ones
    assert row["task"]["module"]["absolute_positions"] is not recurrent_positions


def _module(overrides: list[str]) -> torch.nn.Module:
    """Backbone, then LM module, after seeding, as train.py builds them."""
    cfg = _compose(overrides)
    torch.manual_seed(0)
    backbone = instantiate(cfg.model.backbone)
    return instantiate(cfg.task.module, backbone=backbone).eval()


def test_transformer_row_is_model_transformer():
    both_off = ["model.memory_token=false", "model.recurrent_positions=false"]
    row = _module(["experiment=crt/ptb_ablation", "model=crt", *TABLE2_ROW[1:], *both_off])
    transformer = _module(["model=transformer", *TABLE2_ROW])
    ours = {k.replace("backbone.transformer.", "backbone."): v for k, v in row.state_dict().items()}
    theirs = transformer.state_dict()
    assert ours.keys() == theirs.keys()
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)
    assert row.carry_state and not transformer.carry_state  # CRT carries its (empty) state: no effect
    torch.manual_seed(1)
    tokens = torch.randint(0, 10000, (2, 2, 141))
    with torch.no_grad():
        for window in tokens:  # two windows of two 70-token segments, the state carried between them
            batch = {"x": window[:, :-1], "y": window[:, 1:]}
            assert torch.allclose(
                row.window_nll(batch, "test"), transformer.window_nll(batch, "test"), atol=1e-5
            )

"""experiment=crt/ptb_ablation: four configs of one model on Table 2's CPU budget, and its
Transformer row is ``model=transformer`` (same parameters, same initial weights, same NLL)."""

from __future__ import annotations

import copy
import functools
import itertools

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from recurrent_attention.config import CONFIG_DIR, backbone_config, register_resolvers
from recurrent_attention.models.transformer_xl import TransformerXL

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
    backbone = instantiate(backbone_config(cfg.model))
    return instantiate(cfg.task.module, backbone=backbone).eval()


@pytest.mark.parametrize(("compat", "paper"), [("default", ""), ("reference", "paper/")])
def test_transformer_row_is_model_transformer(compat: str, paper: str):
    """Under either reading: the paper's models (model=paper/crt, paper/transformer) are both
    Transformer-XL's relative attention with no memory (the paper's baseline, whose Table 8 row is
    Table 2's 67.0)."""
    both_off = ["model.memory_token=false", "model.recurrent_positions=false", f"task.compat={compat}"]
    row = _module(["experiment=crt/ptb_ablation", f"model={paper}crt", *TABLE2_ROW[1:], *both_off])
    transformer = _module([f"model={paper}transformer", *TABLE2_ROW, f"task.compat={compat}"])
    relative = bool(paper)
    assert isinstance(row.model.backbone.transformer, TransformerXL) is relative
    assert row.model.absolute_positions is transformer.model.absolute_positions is not relative
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


def test_paper_ablation_is_table_2s_paper_run_with_the_papers_models():
    """experiment=crt/ptb_ablation_paper: the same four rows at experiment=crt/ptb_3layer's sizes and
    schedule, with CRT's model (model=paper/crt, task.compat=reference)."""
    params = _compose(["experiment=crt/ptb_ablation_paper"], hydra=True).hydra.sweeper.params
    sweep = {key: str(value).split(",") for key, value in params.items()}
    cpu = {key: value for key, value in _sweep().items() if key != "seed"}  # CPU's seeds 1, 2
    assert sweep == cpu | {"model": ["paper/crt"]}
    switches = ["model.memory_token=true", "model.recurrent_positions=false"]
    row = _compose(["experiment=crt/ptb_ablation_paper", "model=paper/crt", *TABLE2_ROW[1:], *switches])
    table2 = _compose(["experiment=crt/ptb_3layer", "model=paper/crt", *TABLE2_ROW[1:], *switches])
    row, table2 = (OmegaConf.to_container(c, resolve=True) for c in (row, table2))
    assert row["task"].pop("setting")["memory_token"] is True
    table2["task"].pop("setting")
    assert row == table2 and row["task"]["compat"] == "reference" and row["model"]["d_model"] == 410
    assert row["model"]["relative_positions"] is True  # RNN memory on the baseline's relative attention


# The layout of a backbone's parameters does not depend on its width: these tests build small ones.
SMALL = ["model.d_model=16", "model.n_heads=2", "model.d_ff=32"]
TABLE8 = {
    "Transformer": (False, False),
    "+ RNN memory": (True, False),
    "+ RNN pos enc": (False, True),
    "CRT": (True, True),
}
# Transformer-XL's relative-position parameters at SMALL and 3 layers, written out: r_net in each
# layer, and u, v (r_w_bias, r_r_bias: 2 heads of 8) that the layers share.
RELATIVE = {f"transformer.blocks.{i}.mixer.r_net.weight": (16, 16) for i in range(3)} | {
    "transformer.blocks.0.mixer.r_w_bias": (2, 8),
    "transformer.blocks.0.mixer.r_r_bias": (2, 8),
}


# The model configs each experiment's sweep names (crt: the project's reading; paper/crt: the paper's).
READING = {"crt/ptb_ablation": "", "crt/ptb_ablation_paper": "paper/"}


@functools.cache
def _small_config(experiment: str, model: str) -> DictConfig:
    overrides = [f"experiment={experiment}", f"model={READING[experiment]}{model}", *TABLE2_ROW[1:], *SMALL]
    return _compose(overrides)


def _layout(experiment: str, model: str = "crt", switches: tuple[bool, bool] = (True, True)) -> dict:
    """Name -> shape of every parameter of the backbone a Table 8 row builds (no training). The
    switches are set as the sweep sets them, on the composed config (one compose per experiment)."""
    cfg = copy.deepcopy(_small_config(experiment, model))
    cfg.model.memory_token, cfg.model.recurrent_positions = switches
    return {name: tuple(p.shape) for name, p in instantiate(backbone_config(cfg.model)).named_parameters()}


def _part(layout: dict[str, tuple[int, ...]], prefix: str) -> dict[str, tuple[int, ...]]:
    return {name: shape for name, shape in layout.items() if name.startswith(prefix)}


@pytest.mark.parametrize(
    ("experiment", "positions"), [("crt/ptb_ablation", {}), ("crt/ptb_ablation_paper", RELATIVE)]
)
def test_table_8s_rows_differ_only_in_the_part_each_removes(experiment: str, positions: dict) -> None:
    """Issue 66: the four rows build one set of blocks. The memory adds the memory RNN; the recurrent
    positions add the positional RNN in place of the Transformer's positions: the head's sinusoids
    (no parameters) under default, Transformer-XL's relative terms under reference (the baseline's).
    Nothing else differs: not the q/k/v or output biases, not a LayerNorm after the stack."""
    rows = {row: _layout(experiment, switches=switches) for row, switches in TABLE8.items()}
    transformer = rows["Transformer"]
    assert positions.items() <= transformer.items()
    blocks = {name: shape for name, shape in transformer.items() if name not in positions}
    memory, recurrent = _part(rows["CRT"], "memory_rnn."), _part(rows["CRT"], "position_rnn.")
    assert memory and recurrent and all(name.startswith("transformer.") for name in transformer)
    assert rows["+ RNN memory"] == transformer | memory
    assert rows["+ RNN pos enc"] == blocks | recurrent
    assert rows["CRT"] == blocks | memory | recurrent


@pytest.mark.parametrize(
    ("experiment", "rnns"),
    [("crt/ptb_ablation", {"memory_rnn"}), ("crt/ptb_ablation_paper", {"memory_rnn", "position_rnn"})],
    ids=["default", "reference"],
)
def test_gru_and_ncgru_crts_differ_only_in_their_rnns(experiment: str, rnns: set[str]) -> None:
    """Tables 9-12 (crt_gru) against Tables 2-5 (crt), whose models these experiments' CRT rows are
    (test_paper_ablation_is_table_2s_paper_run_with_the_papers_models): the memory RNN's kind and
    nothing else; under reference the positional RNN is of the memory RNN's type (the paper's "a new
    GRU/NCGRU model for encoding the relative position", docs/lm.md), so it changes with it."""
    ncgru, gru = _layout(experiment, "crt"), _layout(experiment, "crt_gru")
    differing = {name for name in ncgru.keys() | gru.keys() if ncgru.get(name) != gru.get(name)}
    assert {name.split(".")[0] for name in differing} == rnns

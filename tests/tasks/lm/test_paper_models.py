"""``model=paper/*`` builds CRT's models as its text has them (issue 51): the Transformer baseline
is Transformer-XL's relative attention with no memory, the GRU is equation (4) and the positional
RNN is of the memory RNN's type; ``model=transformer``, ``crt``, ... keep the project's reading
under either ``task.compat`` (issue 68: the protocol no longer chooses the model)."""

from __future__ import annotations

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from omegaconf import OmegaConf

from recurrent_attention.config import CONFIG_DIR, backbone_config, register_resolvers
from recurrent_attention.models.ncgru import GRU, NCGRU, EquationFourGRU
from recurrent_attention.models.transformer import Transformer
from recurrent_attention.models.transformer_xl import TransformerXL

register_resolvers()
# Table 6: 16 layers at Transformer-XL base's widths (d_m 410, 10 heads of 41, d_ff 2100).
TABLE6 = ["task=lm/ptb", "preset=paper", "model.n_layers=16"]
L, D, H, D_FF = 16, 410, 10, 2100
COMPATS = ("default", "reference")


def _compose(*overrides: str):
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        return compose("train", overrides=list(overrides))


def _count(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def test_reference_transformer_counts_transformer_xls_parameters_without_memory() -> None:
    cfg = _compose("model=paper/transformer", *TABLE6, "task.compat=reference")
    backbone = instantiate(backbone_config(cfg.model))
    # Transformer-XL by hand: q/k/v, the relative-position projection r_net and the output (no
    # biases), the feed-forward with biases, two LayerNorms per layer; u and v shared by all layers.
    by_hand = L * (3 * D * D + D * D + D * D + 2 * D * D_FF + D_FF + D + 4 * D) + 2 * H * (D // H)
    assert isinstance(backbone, TransformerXL) and backbone.mem_len == 0
    transformer_xl = instantiate(backbone_config(_compose("model=transformer_xl", *TABLE6).model))
    assert _count(backbone) == by_hand == _count(transformer_xl)
    # no memory: a segment is seen alone, and the LM head adds no absolute positions
    _, memories = backbone(torch.randn(1, 5, D))
    assert all(m.shape[1] == 0 for m in memories)
    assert cfg.task.module.absolute_positions is False and cfg.task.module.carry_state is False
    # the default keeps the absolute-position Transformer; what it lacks is the relative terms
    default = instantiate(backbone_config(_compose("model=transformer", *TABLE6).model))
    assert type(default) is Transformer
    relative_terms = L * D * D + 2 * H * (D // H)  # r_net, u, v
    its_own = L * (3 * D + D) + 2 * D  # q/k/v and output biases, a LayerNorm after the stack
    assert _count(backbone) - _count(default) == relative_terms - its_own


@pytest.mark.parametrize(
    ("model", "compat", "memory", "position"),
    [
        ("crt", "default", NCGRU, GRU),
        ("crt", "reference", NCGRU, GRU),
        ("paper/crt", "reference", NCGRU, NCGRU),
        ("crt_gru", "default", GRU, GRU),
        ("crt_gru", "reference", GRU, GRU),
        ("paper/crt_gru", "reference", EquationFourGRU, EquationFourGRU),
    ],
)
def test_reference_crt_rnns_are_the_papers(model: str, compat: str, memory: type, position: type) -> None:
    cfg = _compose(f"model={model}", "task=lm/ptb", "preset=smoke", f"task.compat={compat}")
    backbone = instantiate(backbone_config(cfg.model))
    assert type(backbone.memory_rnn) is memory and type(backbone.position_rnn) is position


def test_reference_crt_gru_rnns_count_table_1s_term() -> None:
    """Table 1's CRT-GRU parameters (12 + 8L)d² + (6 + 4L)d: the two GRUs are its 12d² + 6d."""
    cfg = _compose("model=paper/crt_gru", *TABLE6, "task.compat=reference")
    backbone = instantiate(backbone_config(cfg.model))
    assert _count(backbone.memory_rnn) + _count(backbone.position_rnn) == 12 * D * D + 6 * D


@pytest.mark.parametrize("experiment", ["ptb_3layer", "ptb_16layer", "wt103_3layer", "wt103_16layer"])
def test_paper_table_experiments_run_the_papers_models(experiment: str) -> None:
    """The GPU tables (experiment=crt/<dataset>_<L>layer) need no override to get CRT's models."""
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("train", overrides=[f"experiment=crt/{experiment}"], return_hydra_config=True)
    models = str(cfg.hydra.sweeper.params.model).split(",")
    assert cfg.task.compat == "reference"
    assert models == ["paper/transformer", "paper/transformer_xl", "paper/crt", "paper/crt_gru"]


@pytest.mark.parametrize("model", ["transformer", "crt_gru"])
def test_the_reference_protocol_builds_the_model_named(model: str) -> None:
    """task.compat=reference with a plain model=<name> trains the project's model under the paper's
    protocol: the backbone is the one task.compat=default builds (docs/lm.md, "Two readings")."""
    built = [_compose(f"model={model}", "task=lm/ptb", "preset=smoke", f"task.compat={c}") for c in COMPATS]
    default, reference = (OmegaConf.to_container(cfg.model, resolve=True) for cfg in built)
    assert default == reference


# Wide enough that a weight's standard deviation is decisive (PyTorch's default Linear at width 256
# has 0.036, the head's embedding 1/16), with two tail clusters for the adaptive softmax's rules.
WIDE = (
    "model.d_model=256",
    "model.n_heads=4",
    "model.d_ff=512",
    "model.n_layers=2",
    "task.cutoffs=[2000,5000]",
)


def _language_model(model: str, *overrides: str) -> torch.nn.Module:
    cfg = _compose(f"model={model}", "task=lm/ptb", "preset=smoke", *WIDE, *overrides)
    torch.manual_seed(0)
    backbone = instantiate(backbone_config(cfg.model))
    return instantiate(cfg.task.module, backbone=backbone).model


def _close(values: torch.Tensor, mean: float, std: float, rtol: float) -> bool:
    return abs(values.mean().item() - mean) < 5 * std / values.numel() ** 0.5 and (
        abs(values.std().item() - std) < rtol * std
    )


@pytest.mark.parametrize("model", ["transformer", "transformer_xl", "crt_gru"])
def test_reference_models_start_from_transformer_xls_initialisation(model: str) -> None:
    """Transformer-XL's train.py (weights_init at --init normal --init_std 0.02), written out per
    parameter class: Linear and Embedding weights N(0, 0.02), LayerNorm weights N(1, 0.02), the
    relative biases u, v and the adaptive softmax's cluster weights N(0, 0.02), every bias 0.
    CRT's RNNs, which its code has not, keep their own draw (the same as without txl_init)."""
    lm = _language_model(f"paper/{model}", "task.compat=reference")
    rnns = {
        name: p
        for name, p in lm.named_parameters()
        if name.startswith(("backbone.memory_rnn.", "backbone.position_rnn."))
    }
    if rnns:
        as_built = dict(
            _language_model(
                f"paper/{model}", "task.compat=reference", "task.protocols.reference.txl_init=false"
            ).named_parameters()
        )
        assert all(torch.equal(p, as_built[name]) for name, p in rnns.items())
    owners = dict(lm.named_modules())
    normal: dict[str, list[torch.Tensor]] = {"weight": [], "norm": [], "relative": [], "cluster": []}
    for name, p in lm.named_parameters():
        owner, leaf = owners[name.rpartition(".")[0]], name.rpartition(".")[2]
        if name in rnns:
            continue
        if leaf in ("bias", "cluster_bias"):
            assert not p.any(), name
        elif isinstance(owner, (torch.nn.Linear, torch.nn.Embedding)):
            assert _close(p, 0.0, 0.02, rtol=0.05), name  # each at least 256 x 256
            normal["weight"].append(name)
        elif isinstance(owner, torch.nn.LayerNorm):
            normal["norm"].append(p.flatten())
        elif leaf in ("r_w_bias", "r_r_bias"):
            normal["relative"].append(p.flatten())
        else:
            assert leaf == "cluster_weight", f"{name}: no rule of Transformer-XL's covers it"
            normal["cluster"].append(p.flatten())
    assert _close(torch.cat(normal["norm"]), 1.0, 0.02, rtol=0.1)  # 2 layers x 2 x 256
    assert _close(torch.cat(normal["cluster"]), 0.0, 0.02, rtol=0.2)  # 2 clusters x 256
    if model == "crt_gru":  # CRT's positional RNN replaces the relative terms; its RNNs keep their draw
        assert not normal["relative"] and rnns
    else:
        assert _close(torch.cat(normal["relative"]), 0.0, 0.02, rtol=0.2)  # u and v, 256 each
    assert "embedding.weight" in normal["weight"]
    if model == "transformer":  # the default reading keeps the project's embedding, N(0, 1/d_model)
        assert _close(_language_model(model).embedding.weight, 0.0, 256**-0.5, rtol=0.05)

"""The block options ``model.qkv_bias``, ``model.norm_eps`` and ``model.final_norm`` (THP's encoder for
event forecasting: no Q/K/V bias, LayerNorm eps 1e-6, no final LayerNorm) reach every sequence
backbone through its config, and their defaults build the parameters CRT and Transformer-XL had
before the options reached them, so checkpoints of those backbones still load (CRT's, written
before q/k/v were fused into one projection, through the fused layout's loading hook)."""

from __future__ import annotations

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from torch import Tensor, nn

from recurrent_attention.config import CONFIG_DIR, backbone_config, register_resolvers
from recurrent_attention.migration import migrate_state_dict
from recurrent_attention.models.blocks import LayerStack
from recurrent_attention.models.crt import CompactRecurrentTransformer
from recurrent_attention.models.transformer_xl import TransformerXL

register_resolvers()

SEQUENCE_MODELS = ["transformer", "aaren", "crt", "transformer_xl"]

# state_dict of task=lm/ptb preset=smoke (d_model 16, 2 heads, 1 layer, d_ff 32) as built before the
# options reached CRT and Transformer-XL (commit 78e6d47): names and shapes a checkpoint holds.
CRT_BLOCK = {
    "transformer.blocks.0.mixer.proj.q_proj.weight": (16, 16),
    "transformer.blocks.0.mixer.proj.q_proj.bias": (16,),
    "transformer.blocks.0.mixer.proj.k_proj.weight": (16, 16),
    "transformer.blocks.0.mixer.proj.k_proj.bias": (16,),
    "transformer.blocks.0.mixer.proj.v_proj.weight": (16, 16),
    "transformer.blocks.0.mixer.proj.v_proj.bias": (16,),
    "transformer.blocks.0.mixer.proj.out_proj.weight": (16, 16),
    "transformer.blocks.0.mixer.proj.out_proj.bias": (16,),
    "transformer.blocks.0.ff.0.weight": (32, 16),
    "transformer.blocks.0.ff.0.bias": (32,),
    "transformer.blocks.0.ff.3.weight": (16, 32),
    "transformer.blocks.0.ff.3.bias": (16,),
    "transformer.blocks.0.norm_mix.weight": (16,),
    "transformer.blocks.0.norm_mix.bias": (16,),
    "transformer.blocks.0.norm_ff.weight": (16,),
    "transformer.blocks.0.norm_ff.bias": (16,),
    "transformer.norm.weight": (16,),
    "transformer.norm.bias": (16,),
    "memory_rnn.skew": (16, 16),
    "memory_rnn.mod_bias": (16,),
    "memory_rnn.signs": (16,),
    "memory_rnn.inverse_matrix": (16, 16),
    "memory_rnn.input_proj.weight": (48, 16),
    "memory_rnn.input_proj.bias": (48,),
    "memory_rnn.gate_proj.weight": (32, 16),
    "position_rnn.rnn.weight_ih_l0": (48, 16),
    "position_rnn.rnn.weight_hh_l0": (48, 16),
    "position_rnn.rnn.bias_ih_l0": (48,),
    "position_rnn.rnn.bias_hh_l0": (48,),
}
TRANSFORMER_XL_BLOCK = {
    "blocks.0.mixer.r_w_bias": (2, 8),
    "blocks.0.mixer.r_r_bias": (2, 8),
    "blocks.0.mixer.qkv.weight": (48, 16),
    "blocks.0.mixer.r_net.weight": (16, 16),
    "blocks.0.mixer.out.weight": (16, 16),
    "blocks.0.ff.0.weight": (32, 16),
    "blocks.0.ff.0.bias": (32,),
    "blocks.0.ff.3.weight": (16, 32),
    "blocks.0.ff.3.bias": (16,),
    "blocks.0.norm_mix.weight": (16,),
    "blocks.0.norm_mix.bias": (16,),
    "blocks.0.norm_ff.weight": (16,),
    "blocks.0.norm_ff.bias": (16,),
}
STATE_BEFORE = {"crt": CRT_BLOCK, "transformer_xl": TRANSFORMER_XL_BLOCK}


def backbone(task: str, model: str, *overrides: str) -> nn.Module:
    """The backbone as ``train.py`` builds it for this task (smoke sizes)."""
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("train", overrides=[f"task={task}", f"model={model}", "preset=smoke", *overrides])
    return instantiate(backbone_config(cfg.model))


def layer_stack(module: nn.Module) -> LayerStack:
    """The residual blocks: CRT runs the Transformer's stack inside its segments."""
    return module.transformer if isinstance(module, CompactRecurrentTransformer) else module


def qkv_biases(module: nn.Module) -> list[Tensor | None]:
    """Every query/key/value bias of the stack (None where the projection has none)."""
    if isinstance(module, TransformerXL):
        return [block.mixer.qkv.bias for block in module.blocks]
    return [block.mixer.proj.qkv.bias for block in layer_stack(module).blocks]


def value_of_before(state: dict[str, Tensor], key: str) -> Tensor:
    """What ``key`` of a state dict of before holds, read from ``state``: a query, key or value
    projection's parameter as its third of the fused ``qkv`` one."""
    for index, part in enumerate(("q_proj", "k_proj", "v_proj")):
        if f".{part}." in key:
            return state[key.replace(f".{part}.", ".qkv.")].chunk(3)[index]
    return state[key]


@pytest.mark.parametrize("model", sorted(STATE_BEFORE))
def test_default_options_load_the_checkpoints_of_before(model: str) -> None:
    """A state dict with the names and shapes such a checkpoint holds loads strictly, through the
    checkpoint migration, every value where it belongs."""
    built = backbone("lm/ptb", model)
    torch.manual_seed(0)
    before = {key: torch.randn(shape) for key, shape in STATE_BEFORE[model].items()}
    built.load_state_dict(migrate_state_dict(dict(before)), strict=True)
    loaded = built.state_dict()
    for key, value in before.items():
        assert torch.equal(value_of_before(loaded, key), value), key


def test_transformer_xl_keeps_its_final_norm_rule_by_default() -> None:
    """No LayerNorm after post-norm blocks (they end in one), one after pre-norm blocks."""
    assert isinstance(backbone("lm/ptb", "transformer_xl").norm, nn.Identity)
    assert isinstance(backbone("lm/ptb", "transformer_xl", "model.norm_first=true").norm, nn.LayerNorm)


@pytest.mark.parametrize("model", SEQUENCE_MODELS)
@pytest.mark.parametrize(
    ("qkv_bias", "norm_eps", "final_norm"), [(False, 1e-6, False), (True, 1e-3, True)], ids=["thp", "other"]
)
def test_block_options_take_effect(model: str, qkv_bias: bool, norm_eps: float, final_norm: bool) -> None:
    built = backbone(
        "lm/ptb",
        model,
        f"model.qkv_bias={qkv_bias}",
        f"model.norm_eps={norm_eps}",
        f"model.final_norm={final_norm}",
    )
    biases = qkv_biases(built)
    assert biases and all((bias is not None) == qkv_bias for bias in biases)
    norms = [m for m in built.modules() if isinstance(m, nn.LayerNorm)]
    assert norms and all(norm.eps == norm_eps for norm in norms)
    assert isinstance(layer_stack(built).norm, nn.LayerNorm if final_norm else nn.Identity)


@pytest.mark.parametrize("model", ["crt", "transformer_xl"])
def test_ef_task_builds_thp_blocks_for_crt_and_transformer_xl(model: str) -> None:
    """conf/task/ef/_base.yaml's THP settings, which Transformer and Aaren already took
    (tests/tasks/ef/test_thp_encoder.py), hold for the other two sequence backbones."""
    built = backbone("ef/mimic", model)
    assert all(bias is None for bias in qkv_biases(built))
    assert all(m.eps == 1e-6 for m in built.modules() if isinstance(m, nn.LayerNorm))
    assert isinstance(layer_stack(built).norm, nn.Identity)

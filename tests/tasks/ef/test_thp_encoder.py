"""The EF task builds THP's encoder for both backbones: no Q/K/V bias, LayerNorm eps 1e-6, no final norm.

Checked against a transcription of THP's ``EncoderLayer`` (SimiaoZuo/Transformer-Hawkes-Process,
``transformer/SubLayers.py`` and ``Layers.py``; Meta TPP's ``thp/sublayers.py`` is the same) run with
our weights, on inputs small enough that the LayerNorm epsilon changes the output.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from torch import nn

from recurrent_attention.config import CONFIG_DIR, backbone_config, register_resolvers
from recurrent_attention.models import Transformer


def thp_encoder_layer(block, x: torch.Tensor, n_head: int, eps: float = 1e-6) -> torch.Tensor:
    """THP's post-norm layer: ``MultiHeadAttention`` then ``PositionwiseFeedForward`` (eval, no padding)."""
    proj = block.mixer.proj
    batch, length, d_model = x.shape
    d_k = d_model // n_head
    residual = x
    w_qs, w_ks, w_vs = proj.qkv.weight.chunk(3)  # THP's three bias-free Linear layers
    q = F.linear(x, w_qs).view(batch, length, n_head, d_k).transpose(1, 2)
    k = F.linear(x, w_ks).view(batch, length, n_head, d_k).transpose(1, 2)
    v = F.linear(x, w_vs).view(batch, length, n_head, d_k).transpose(1, 2)
    attn = torch.matmul(q / d_k**0.5, k.transpose(2, 3))
    subsequent = torch.triu(torch.ones(length, length, dtype=torch.bool), diagonal=1)
    attn = F.softmax(attn.masked_fill(subsequent, -1e9), dim=-1)
    output = torch.matmul(attn, v).transpose(1, 2).contiguous().view(batch, length, -1)
    output = proj.out_proj(output) + residual
    output = F.layer_norm(output, (d_model,), block.norm_mix.weight, block.norm_mix.bias, eps)
    residual = output
    hidden = F.gelu(block.ff[0](output))
    output = block.ff[3](hidden) + residual
    return F.layer_norm(output, (d_model,), block.norm_ff.weight, block.norm_ff.bias, eps)


def test_transformer_with_thp_options_equals_the_thp_encoder() -> None:
    torch.manual_seed(0)
    options = {"d_model": 8, "n_heads": 2, "n_layers": 2, "d_ff": 16, "dropout": 0.0}
    backbone = Transformer(**options, qkv_bias=False, norm_eps=1e-6, final_norm=False).double().eval()
    x = 1e-3 * torch.randn(2, 5, 8, dtype=torch.float64)
    expected = x
    for block in backbone.blocks:
        expected = thp_encoder_layer(block, expected, n_head=2)
    with torch.no_grad():
        ours, _ = backbone(x)
    torch.testing.assert_close(ours, expected, rtol=1e-9, atol=1e-12)
    pytorch_eps = Transformer(**options, qkv_bias=False, final_norm=False).double().eval()
    pytorch_eps.load_state_dict(backbone.state_dict())
    with torch.no_grad():
        assert not torch.allclose(pytorch_eps(x)[0], expected, rtol=1e-7, atol=1e-10)


@pytest.mark.parametrize("model", ["transformer", "aaren"])
def test_ef_task_builds_the_thp_encoder_for_both_backbones(model: str) -> None:
    register_resolvers()
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("train", overrides=["task=ef/mimic", f"model={model}", "preset=paper"])
    backbone = instantiate(backbone_config(cfg.model))
    for block in backbone.blocks:
        proj = block.mixer.proj
        assert proj.qkv.bias is None
        assert proj.out_proj.bias is not None
    norms = [m for m in backbone.modules() if isinstance(m, nn.LayerNorm)]
    assert len(norms) == 2 * cfg.model.n_layers and all(n.eps == 1e-6 for n in norms)
    assert isinstance(backbone.norm, nn.Identity)
    # Per layer: Q/K/V weights, output weight + bias, two feed-forward layers, two LayerNorms;
    # the backbones differ only by Aaren's learned query per layer.
    n_params = sum(p.numel() for p in backbone.parameters())
    extra = cfg.model.n_layers * cfg.model.d_model if model == "aaren" else 0
    assert n_params - extra == cfg.model.n_layers * (4 * 64 * 64 + 64 + 2 * (64 * 64 + 64) + 4 * 64)

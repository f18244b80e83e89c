"""Aaren against a naive implementation of its definition; its state size; its parameter count.

The contract every backbone keeps (causality, step, carried state) is test_backbone_contract's.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from recurrent_attention.bench.streaming import state_bytes
from recurrent_attention.models import Aaren, Transformer
from recurrent_attention.models import aaren as aaren_module
from recurrent_attention.models.aaren import AarenAttention
from tests.helpers.backbones import D_MODEL, build_backbone, model_config


def layer_norm(x: torch.Tensor, norm: torch.nn.LayerNorm) -> torch.Tensor:
    return F.layer_norm(x, norm.normalized_shape, norm.weight, norm.bias, norm.eps)


def naive_aaren(model: Aaren, x: torch.Tensor) -> torch.Tensor:
    """Aaren's outputs from its parameters by the paper's definition, one masked softmax per layer.

    Per layer and head h, with the layer's learned query projected like any query,
    ``q = W_q query + b_q``, keys ``k_s = W_k x_s + b_k`` and values ``v_s = W_v x_s + b_v``:
    ``o_t = sum_{s<=t} softmax_s(q_h·k_{s,h} / sqrt(d_head)) v_{s,h}`` (the paper's ``q_h·k_{s,h}``
    with ``model.scaled_scores=false``), heads concatenated through
    ``W_o``; the blocks are conf/model/aaren.yaml's (post-norm residuals around the mixer and a GELU
    feed-forward, then a final LayerNorm). No scan, no state, no fused projection.
    """
    n = x.shape[1]
    future = torch.ones(n, n, dtype=torch.bool).triu(1)
    for block in model.blocks:
        proj = block.mixer.proj
        heads, d_head = proj.n_heads, proj.d_head
        (w_q, b_q), (w_k, b_k), (w_v, b_v) = proj.parts()
        q = F.linear(block.mixer.query, w_q, b_q).view(heads, d_head)
        k = F.linear(x, w_k, b_k).unflatten(-1, (heads, d_head))
        v = F.linear(x, w_v, b_v).unflatten(-1, (heads, d_head))
        scores = torch.einsum("bshd,hd->bhs", k, q) / (d_head**0.5 if block.mixer.scaled_scores else 1.0)
        weights = torch.softmax(scores.unsqueeze(-2).masked_fill(future, float("-inf")), dim=-1)
        attended = torch.einsum("bhts,bshd->bthd", weights, v).flatten(-2)
        x = layer_norm(x + F.linear(attended, proj.out_proj.weight, proj.out_proj.bias), block.norm_mix)
        expand, _, _, contract = block.ff
        hidden = F.gelu(F.linear(x, expand.weight, expand.bias))
        x = layer_norm(x + F.linear(hidden, contract.weight, contract.bias), block.norm_ff)
    return layer_norm(x, model.norm)


def test_naive_reference_builds_the_configs_blocks() -> None:
    """The naive reference writes out conf/model/aaren.yaml's block; a change there must reach it."""
    model = model_config("aaren").model
    block = (model.norm_first, model.final_norm, model.activation, model.qkv_bias, model.scaled_scores)
    assert block == (False, True, "gelu", True, True)


@pytest.mark.parametrize("scaled", [True, False], ids=["scaled", "paper_unscaled"])
@pytest.mark.parametrize("path", ["chunked", "scan", "recurrent", "step"])
@pytest.mark.parametrize(
    ("n", "query_scale"),
    [(13, 1.0), (1030, 1.0), (1030, 1000.0)],
    ids=["one_chunk", "three_chunks", "three_chunks_spread_scores"],
)
def test_every_path_equals_the_naive_definition(path: str, n: int, query_scale: float, scaled: bool) -> None:
    """1030 tokens make the chunked path link three chunks (512 tokens each from 1025 on) by a scan
    of their summaries; a query 1000 times larger spreads the scores by more than the cumulative
    kernel's limit (log(max float64) / 2, ~355) above a chunk's first, so the chunked path computes
    those rows by its prefix-max kernel, and every path meets scores of several hundred. Both score
    forms: the Transformer's ``/ sqrt(d_head)`` and the paper's unscaled ``q·k``."""
    overrides = () if path == "step" else (f"model.path={path}",)
    model = build_backbone("aaren", (*overrides, f"model.scaled_scores={str(scaled).lower()}"))
    with torch.no_grad():
        for block in model.blocks:
            block.mixer.query.mul_(query_scale)
        x = torch.randn(2, n, D_MODEL, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
        if path == "step":
            state, steps = model.init_state(2, dtype=torch.float64), []
            for t in range(n):
                y_t, state = model.step(x[:, t], state)
                steps.append(y_t)
            y = torch.stack(steps, dim=1)
        else:
            y, _ = model(x)
    torch.testing.assert_close(y, naive_aaren(model, x), rtol=1e-9, atol=1e-9)


def test_aaren_state_size_is_independent_of_length() -> None:
    model = build_backbone("aaren")
    sizes = []
    with torch.no_grad():
        for n in (1, 10, 300):
            _, state = model(torch.randn(2, n, D_MODEL, dtype=torch.float64))
            sizes.append(state_bytes(state))
    assert sizes[0] == sizes[1] == sizes[2] > 0
    transformer_sizes = []
    with torch.no_grad():
        for n in (10, 300):
            _, state = build_backbone("transformer")(torch.randn(2, n, D_MODEL, dtype=torch.float64))
            transformer_sizes.append(state_bytes(state))
    assert transformer_sizes[1] == 30 * transformer_sizes[0]


@pytest.mark.parametrize(("d_model", "layers"), [(16, 3), (512, 4), (64, 1)])
def test_parameter_delta_is_one_query_per_layer(d_model: int, layers: int) -> None:
    def count(m: torch.nn.Module) -> int:
        return sum(p.numel() for p in m.parameters())

    transformer = Transformer(d_model, 4, layers, 2 * d_model)
    aaren = Aaren(d_model, 4, layers, 2 * d_model)
    assert count(aaren) - count(transformer) == layers * d_model


def test_bad_sizes_name_the_key() -> None:
    with pytest.raises(ValueError, match=r"model.d_model=10 must be divisible by model.n_heads=4"):
        Aaren(10, 4, 1, 8)
    with pytest.raises(ValueError, match=r"model.path='fast'"):
        Aaren(8, 2, 1, 8, path="fast")


@pytest.mark.parametrize("scaled", [True, False], ids=["scaled", "paper_unscaled"])
def test_without_the_compiled_projection_aaren_equals_the_naive_definition(
    scaled: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The PyTorch form of the values-and-scores projection (a machine without the C++ kernels, or a
    GPU), forward and step, against the naive definition: on this CPU the compiled form runs instead."""
    monkeypatch.setattr(aaren_module, "compiled_value_score_projection", lambda *args: None)
    model = build_backbone("aaren", (f"model.scaled_scores={str(scaled).lower()}",))
    x = torch.randn(2, 9, D_MODEL, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        expected = naive_aaren(model, x)
        torch.testing.assert_close(model(x)[0], expected, rtol=1e-9, atol=1e-9)
        state, steps = model.init_state(2, dtype=torch.float64), []
        for t in range(9):
            y_t, state = model.step(x[:, t], state)
            steps.append(y_t)
    torch.testing.assert_close(torch.stack(steps, 1), expected, rtol=1e-9, atol=1e-9)


def test_the_learned_query_is_drawn_with_variance_one_over_d_model() -> None:
    """``query ~ N(0, 1/d_model)``: projected by W_q like a token, it starts at a token's scale."""
    torch.manual_seed(0)
    queries = torch.stack([AarenAttention(512, 8).query.detach() for _ in range(4)])
    assert abs(queries.std().item() * 512**0.5 - 1.0) < 0.05 and abs(queries.mean().item()) < 0.01

"""Backbones under ``torch.compile(fullgraph=True)`` and ``torch.export`` (issue 64).

``fullgraph=True`` turns any graph break into an error, so a pass means one graph. ``aot_eager``
traces forward and backward as inductor does (AOT autograd) without generating code, which would
cost minutes a backbone on two cores. Truth is the same backbone in eager mode.
"""

from __future__ import annotations

import pytest
import torch

from recurrent_attention.ops.attention_op import OP
from tests.helpers.backbones import build_backbone


def train_step(model: torch.nn.Module, x: torch.Tensor, params: torch.nn.Module) -> tuple[torch.Tensor, dict]:
    """Outputs and parameter gradients of a squared-output loss, the state left out of it (as tasks do)."""
    params.zero_grad()
    y, _ = model(x)
    y.square().sum().backward()
    return y.detach(), {name: p.grad.clone() for name, p in params.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("name", ["aaren", "transformer", "linear_attention"])
def test_backbone_compiles_to_one_graph_forward_and_backward(name: str) -> None:
    torch._dynamo.reset()
    model = build_backbone(name).float().train()
    x = torch.randn(3, 11, model.d_model, generator=torch.Generator().manual_seed(0))
    eager_y, eager_grads = train_step(model, x, model)
    compiled_y, compiled_grads = train_step(
        torch.compile(model, fullgraph=True, backend="aot_eager"), x, model
    )
    torch.testing.assert_close(compiled_y, eager_y, rtol=1e-5, atol=1e-5)
    assert compiled_grads.keys() == eager_grads.keys()
    for key, grad in eager_grads.items():
        torch.testing.assert_close(compiled_grads[key], grad, rtol=1e-4, atol=1e-5, msg=key)


def test_exported_aaren_shows_its_attention_as_one_op() -> None:
    model = build_backbone("aaren").float()
    x = torch.randn(2, 9, model.d_model, generator=torch.Generator().manual_seed(1))
    exported = torch.export.export(model, (x,))
    targets = [str(node.target) for node in exported.graph.nodes if node.op == "call_function"]
    assert targets.count(f"{OP.replace('::', '.')}.default") == len(model.blocks)
    assert not any("cumsum" in target or "cummax" in target for target in targets)
    torch.testing.assert_close(exported.module()(x)[0], model(x)[0], rtol=1e-6, atol=1e-6)

"""Every sequence backbone compiles as one graph in training (issue 64): ``torch.compile`` with
``fullgraph=True`` (which raises at any graph break) traces the train-mode forward and its
backward, and the compiled step equals the eager one.

The backend is ``aot_eager``: it runs dynamo and AOTAutograd (where graph breaks and untraceable
ops show) but no code generation (inductor's C++ build costs about a CPU-minute per backbone
here), so the test stays cheap on a CPU; the training switch is run end to end in
tests/e2e/test_compile_switch.py and timed with inductor by ``make bench``. The weights are moved
off their initial values first by an optimiser step's size, so that the eager NCGRU refreshes its
stored inverse as the compiled one does at every forward; the series then converges within its
first terms, and the two agree to float64 rounding. Aaren's chunked attention is one custom op
under a tracer (``ops/attention_op.py``): the export test finds it once per layer.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch._dynamo

from recurrent_attention.ops.attention_op import OP
from tests.helpers.backbones import D_MODEL, build_backbone, sequence_backbones

# Crosses CRT's segment (seg_len 4) and Transformer-XL's memory (mem_len 4) at the test sizes.
N_TOKENS = 5
TOL = {"rtol": 1e-9, "atol": 1e-10}


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    """Each backbone's compilation from scratch: the classes they share (the residual stack) would
    otherwise pile recompilations onto one code object up to dynamo's limit."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _step(
    forward: Callable, model: torch.nn.Module, x: torch.Tensor
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """``forward``'s outputs, and the gradients of a loss over them for the input and every
    parameter of ``model``."""
    x = x.clone().requires_grad_(True)
    y, _ = forward(x)
    y.square().mean().backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    grads["input"] = x.grad
    model.zero_grad()
    return y.detach(), grads


# Beside every config as it is: Transformer-XL's positions drawn once for the stack (the paper's
# model=paper/transformer_xl), which reach the layers by another path.
VARIANTS = [(name, ()) for name in sequence_backbones()] + [
    ("transformer_xl", ("model.shared_position_dropout=true",))
]


@pytest.mark.parametrize(("name", "overrides"), VARIANTS, ids=[" ".join((n, *o)) for n, o in VARIANTS])
def test_fullgraph_compile_in_train_mode_equals_eager(name: str, overrides: tuple[str, ...]) -> None:
    model = build_backbone(name, overrides).train()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1e-5 * torch.randn_like(p))
    x = torch.randn(2, N_TOKENS, D_MODEL, dtype=torch.float64)
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    y_compiled, grads_compiled = _step(compiled, model, x)
    y_eager, grads_eager = _step(model, model, x)
    torch.testing.assert_close(y_compiled, y_eager, **TOL)
    assert grads_compiled.keys() == grads_eager.keys()
    for key, grad in grads_eager.items():
        torch.testing.assert_close(grads_compiled[key], grad, **TOL, msg=lambda m, k=key: f"{name} {k}: {m}")


def test_exported_aaren_shows_its_attention_as_one_op() -> None:
    model = build_backbone("aaren").float()
    x = torch.randn(2, 9, model.d_model, generator=torch.Generator().manual_seed(1))
    exported = torch.export.export(model, (x,))
    targets = [str(node.target) for node in exported.graph.nodes if node.op == "call_function"]
    assert targets.count(f"{OP.replace('::', '.')}.default") == len(model.blocks)
    assert not any("cumsum" in target or "cummax" in target for target in targets)
    torch.testing.assert_close(exported.module()(x)[0], model(x)[0], rtol=1e-6, atol=1e-6)

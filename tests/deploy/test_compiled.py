"""The compiled Aaren step (:class:`~recurrent_attention.deploy.CompiledAarenStepper`) equals the
Python lean step, which tests hold equal to the model's own step (``test_lean.py``)."""

from __future__ import annotations

import pytest
import torch

from recurrent_attention.deploy import CompiledAarenStepper, LeanStepper
from recurrent_attention.models import Aaren
from tests.ops.kernels import require_native

TOLERANCE = {torch.float32: {"rtol": 1e-5, "atol": 1e-5}, torch.float64: {"rtol": 1e-12, "atol": 1e-12}}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(
    "options",
    [
        {},
        {"norm_first": True},
        {"activation": "relu", "final_norm": False},
        {"qkv_bias": False, "norm_eps": 1e-6, "final_norm": False},
    ],
)
def test_compiled_aaren_step_equals_the_python_lean_step(dtype: torch.dtype, options: dict) -> None:
    """Aaren's eval step as one C++ call against the Python lean step, 30 tokens, state carried;
    then it follows an optimiser step (the layout is rebuilt) and steps from a state the Python path made."""
    require_native()
    torch.manual_seed(0)
    model = Aaren(16, 4, 2, 32, dropout=0.0, **options).to(dtype).eval()
    compiled_stepper, lean = CompiledAarenStepper(model), LeanStepper(model)
    x = torch.randn(30, 3, 16, dtype=dtype)

    def stream(step, tokens, state):
        outputs = []
        with torch.no_grad():
            for x_t in tokens:
                y, state = step(x_t, state)
                outputs.append(y)
        return torch.stack(outputs), state

    compiled, compiled_state = stream(compiled_stepper.step, x, model.init_state(3, dtype=dtype))
    assert compiled_stepper._compiled is not None  # the compiled path ran
    python, python_state = stream(lean.step, x, model.init_state(3, dtype=dtype))
    torch.testing.assert_close(compiled, python, **TOLERANCE[dtype])
    for ours, theirs in zip(compiled_state, python_state, strict=True):
        for a, b in zip(ours, theirs, strict=True):
            torch.testing.assert_close(a, b, **TOLERANCE[dtype])
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1)
    compiled, _ = stream(compiled_stepper.step, x[:5], python_state)
    python, _ = stream(lean.step, x[:5], python_state)
    torch.testing.assert_close(compiled, python, **TOLERANCE[dtype])


def test_compiled_aaren_step_declines_under_grad() -> None:
    """The compiled step has no backward: once built, a step with gradients on must still take the
    Python path (the check is the compiled step's own, ``try_step``)."""
    require_native()
    torch.manual_seed(0)
    model = Aaren(16, 4, 2, 32, dropout=0.0).eval()
    stepper = CompiledAarenStepper(model)
    x = torch.randn(2, 16)
    with torch.no_grad():
        stepper.step(x, model.init_state(2))
    assert stepper._compiled is not None
    y, _ = stepper.step(x, model.init_state(2))
    assert y.requires_grad

"""The compiled step (:class:`~recurrent_attention.deploy.CompiledStepper`) equals the model's own
step, for Aaren and linear attention, in both of its forms (its own loops for a few rows, ATen's
sgemm past ``raw_rows``)."""

from __future__ import annotations

import resource
import sys

import pytest
import torch

from recurrent_attention.deploy import CompiledStepper, LeanStepper, fast_stepper
from recurrent_attention.models import Aaren, Transformer
from recurrent_attention.models.linear_attention import LinearTransformer
from tests.helpers.backbones import assert_states_close
from tests.ops.kernels import require_native

TOLERANCE = {torch.float32: {"rtol": 1e-5, "atol": 1e-5}, torch.float64: {"rtol": 1e-12, "atol": 1e-12}}
# d_model 32 (4 heads of 8), d_ff 150: the packed weights' widths (Aaren's 36, linear's 96, 150 and
# 32) end inside a vector, and 150 spans two panels of 8 vectors in float32 and three in float64 (AVX-512).
SIZES = {"d_model": 32, "n_heads": 4, "n_layers": 2, "d_ff": 150, "dropout": 0.0}


def stream(step, tokens: torch.Tensor, state: list) -> tuple[torch.Tensor, list]:
    outputs = []
    with torch.no_grad():
        for x_t in tokens:
            y, state = step(x_t, state)
            outputs.append(y)
    return torch.stack(outputs), state


@pytest.mark.parametrize("model_class", [Aaren, LinearTransformer])
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
@pytest.mark.parametrize(
    ("batch", "raw_rows"), [(1, 4), (3, 4), (3, 1)], ids=["1-loops", "3-loops", "3-sgemm"]
)
def test_compiled_step_equals_the_model_step(
    model_class: type, dtype: torch.dtype, options: dict, batch: int, raw_rows: int
) -> None:
    """The eval step as one C++ call against the model's own step, 30 tokens, state carried; it
    leaves its input state as it was; then it follows an optimiser step (the layout is rebuilt)
    and steps on from a state the model's step made."""
    require_native()
    torch.manual_seed(0)
    model = model_class(**SIZES, **options).to(dtype).eval()
    compiled_stepper = CompiledStepper(model, raw_rows=raw_rows)
    x = torch.randn(30, batch, SIZES["d_model"], dtype=dtype)
    start = [
        type(part)(*(torch.randn_like(t).abs() for t in part))
        for part in model.init_state(batch, dtype=dtype)
    ]
    kept = [type(part)(*(t.clone() for t in part)) for part in start]

    compiled, compiled_state = stream(compiled_stepper.step, x, start)
    assert compiled_stepper._compiled is not None  # the compiled path ran
    own, own_state = stream(model.step, x, start)
    torch.testing.assert_close(compiled, own, **TOLERANCE[dtype])
    assert_states_close(compiled_state, own_state, **TOLERANCE[dtype])
    assert_states_close(start, kept, rtol=0, atol=0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1)
    compiled, _ = stream(compiled_stepper.step, x[:5], own_state)
    own, _ = stream(model.step, x[:5], own_state)
    torch.testing.assert_close(compiled, own, **TOLERANCE[dtype])


def test_linear_update_on_whole_vectors_of_columns_equals_the_model_step() -> None:
    """Linear attention's update goes a vector of S's columns at a time, and the columns past the
    last whole vector one by one: heads of 24 take both paths in float32 (AVX-512: 16 + 8, AVX: 8 x 3),
    which SIZES' heads of 8 do not (all one or the other)."""
    require_native()
    torch.manual_seed(0)
    model = LinearTransformer(d_model=48, n_heads=2, n_layers=1, d_ff=64, dropout=0.0).eval()
    x = torch.randn(8, 2, 48)
    start = [type(part)(*(torch.randn_like(t).abs() for t in part)) for part in model.init_state(2)]
    stepper = CompiledStepper(model)
    compiled, compiled_state = stream(stepper.step, x, start)
    assert stepper._compiled is not None  # the compiled path ran
    own, own_state = stream(model.step, x, start)
    torch.testing.assert_close(compiled, own, **TOLERANCE[torch.float32])
    assert_states_close(compiled_state, own_state, **TOLERANCE[torch.float32])


def test_a_held_state_is_never_written_over() -> None:
    """The compiled step takes the memory of the state it returns from a pool that a state's memory
    goes back to only when the state is freed (stack_step.cpp's BufferPool): streams branched from
    a state the caller holds leave it as it was, and step from it as the model's step does."""
    require_native()
    torch.manual_seed(0)
    model = LinearTransformer(**SIZES).eval()
    stepper = CompiledStepper(model)
    x = torch.randn(6, 3, SIZES["d_model"])
    with torch.no_grad():
        _, held = stepper.step(x[0], model.init_state(3))
        kept = [type(part)(*(t.clone() for t in part)) for part in held]
        for branch in range(2):  # two streams from the held state, each several tokens long
            _, state = stepper.step(x[1 + branch], held)
            for x_t in x[3:]:
                _, state = stepper.step(x_t, state)
        assert_states_close(held, kept, rtol=0, atol=0)
        own, _ = stream(model.step, x[3:], model.step(x[1], kept)[1])
        again, _ = stream(stepper.step, x[3:], stepper.step(x[1], held)[1])
    torch.testing.assert_close(again, own, **TOLERANCE[torch.float32])


@pytest.mark.skipif(sys.platform != "linux", reason="counts Linux page faults")
def test_a_stream_steps_in_the_memory_of_its_freed_states() -> None:
    """Token after token, a stream that drops its old state gets its new one from the pool: no fresh
    memory, so no page faults. Without the pool, linear attention's S (1 MB a layer at batch 64)
    came from the system every step: ~45 faults a step, ~0.3 ms of a ~0.7 ms step."""
    require_native()
    torch.manual_seed(0)
    model = LinearTransformer(d_model=128, n_heads=4, n_layers=2, d_ff=256, dropout=0.0).eval()
    stepper = CompiledStepper(model)
    x = torch.randn(64, 128)
    with torch.no_grad():
        state = model.init_state(64)
        for _ in range(3):
            _, state = stepper.step(x, state)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for _ in range(20):
            _, state = stepper.step(x, state)
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    assert stepper._compiled is not None
    assert faults < 20, f"{faults} page faults in 20 steps"


@pytest.mark.parametrize("model_class", [Aaren, LinearTransformer])
def test_bf16_weights_are_the_model_step_with_its_matrices_rounded(model_class: type) -> None:
    """bfloat16 matrices, widened to float32 as the loops load them (1 row), against ATen's sgemm on
    the same matrices rounded and kept in float32 (3 rows past ``raw_rows``: an independent reading
    of the rounding) to float32 precision; against the model's own float32 step to bfloat16's, and
    not equal to it (the rounding is applied)."""
    require_native()
    torch.manual_seed(0)
    model = model_class(**SIZES).eval()
    x = torch.randn(20, 3, SIZES["d_model"])
    own, _ = stream(model.step, x, model.init_state(3))
    loops, _ = stream(CompiledStepper(model, raw_rows=4, bf16_weights=True).step, x, model.init_state(3))
    sgemm, _ = stream(CompiledStepper(model, raw_rows=1, bf16_weights=True).step, x, model.init_state(3))
    torch.testing.assert_close(loops, sgemm, rtol=1e-5, atol=1e-5)
    error = (loops - own).norm() / own.norm()
    assert 1e-5 < error < 1e-2, error


def test_bf16_weights_only_where_the_compiled_step_runs() -> None:
    """A float64 model steps on its own weights (the lean step: no bfloat16 for it), and a model
    without a compiled step is refused rather than stepped in float32 unasked."""
    require_native()
    torch.manual_seed(0)
    model = Aaren(**SIZES).double().eval()
    stepper = fast_stepper(model, bf16_weights=True)
    x = torch.randn(5, 2, SIZES["d_model"], dtype=torch.float64)
    torch.testing.assert_close(
        stream(stepper.step, x, model.init_state(2, dtype=torch.float64))[0],
        stream(model.step, x, model.init_state(2, dtype=torch.float64))[0],
        **TOLERANCE[torch.float64],
    )
    with pytest.raises(ValueError, match="bf16_weights: only the compiled step"):
        fast_stepper(Transformer(**SIZES), bf16_weights=True)


def test_compiled_step_declines_under_grad() -> None:
    """The compiled step has no backward: once built, a step with gradients on must still take the
    Python path (the check is the compiled step's own, ``try_step``)."""
    require_native()
    torch.manual_seed(0)
    model = Aaren(16, 4, 2, 32, dropout=0.0).eval()
    stepper = CompiledStepper(model)
    x = torch.randn(2, 16)
    with torch.no_grad():
        stepper.step(x, model.init_state(2))
    assert stepper._compiled is not None
    y, _ = stepper.step(x, model.init_state(2))
    assert y.requires_grad


def test_a_state_of_another_batch_is_an_error_not_a_read_past_its_end() -> None:
    require_native()
    model = LinearTransformer(16, 4, 2, 32, dropout=0.0).eval()
    stepper = CompiledStepper(model)
    with (
        torch.no_grad(),
        pytest.raises(RuntimeError, match="state tensor 0 has 128 values of Float, not 192"),
    ):
        stepper.step(torch.randn(3, 16), model.init_state(2))


def test_a_mixer_the_compiled_step_lacks_is_refused() -> None:
    with pytest.raises(
        ValueError, match="AarenAttention, LinearAttention in every block, not CausalSelfAttention"
    ):
        CompiledStepper(Transformer(16, 4, 1, 32))


def test_under_autocast_the_compiled_step_runs_at_the_weights_dtype(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bf16-mixed run's evaluation streams under autocast, its tokens in bf16: the compiled step
    (which declines under autocast itself) runs outside it on the token cast to float32, never the
    Python lean step, and equals the model's float32 step."""
    require_native()
    torch.manual_seed(0)
    model = LinearTransformer(16, 4, 2, 32, dropout=0.0).eval()
    stepper = CompiledStepper(model)

    def python_step(*_: object) -> None:
        raise AssertionError("the Python lean step ran")

    monkeypatch.setattr(LeanStepper, "step", python_step)
    x = torch.randn(3, 2, 16).to(torch.bfloat16)
    state = own_state = model.init_state(2)
    with torch.no_grad():
        for x_t in x:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                y, state = stepper.step(x_t, state)
            own, own_state = model.step(x_t.float(), own_state)
            assert y.dtype == torch.float32
            torch.testing.assert_close(y, own, rtol=1e-5, atol=1e-5)

"""The lean step (:class:`~recurrent_attention.deploy.LeanStepper`) equals the model's own step, and
its layout follows the model's parameters."""

from __future__ import annotations

import pytest
import torch

from recurrent_attention.deploy import CompiledStepper, LeanMixerStepper, LeanStepper, fast_stepper
from recurrent_attention.models import Aaren, CompactRecurrentTransformer, Transformer
from recurrent_attention.models.aaren import AarenAttention
from recurrent_attention.models.blocks import ACTIVATIONS
from recurrent_attention.models.linear_attention import LinearAttention, LinearTransformer
from recurrent_attention.models.transformer import CausalSelfAttention, KVCache

D_MODEL, HEADS = 16, 4


@pytest.mark.parametrize("model_class", [Aaren, Transformer, LinearTransformer])
@pytest.mark.parametrize(
    "options",
    [
        {},
        {"norm_first": True},
        {"activation": "relu", "final_norm": False},
        {"norm_first": True, "no_bias": True},
        # THP's encoder as the EF task builds it: Q/K/V without bias, LayerNorm eps 1e-6, no final norm
        {"qkv_bias": False, "norm_eps": 1e-6, "final_norm": False},
    ],
)
@pytest.mark.parametrize("reinject", [False, True])
def test_lean_step_equals_the_model_step(model_class: type, options: dict, reinject: bool) -> None:
    """The flat eval/no-grad step against each block's own step, 40 tokens in fp64 (past the
    Transformer cache's first capacity of 16, so its doubling is crossed twice); with ``reinject``
    (THP's temporal encoding before every block after the first) too."""
    options = dict(options)
    no_bias = options.pop("no_bias", False)
    torch.manual_seed(0)
    model = model_class(D_MODEL, HEADS, 2, 32, dropout=0.3, **options).double().eval()
    if no_bias:
        for block in model.blocks:
            proj = block.mixer.proj
            for linear in (proj.qkv, proj.out_proj):
                linear.bias = None
    lean = LeanStepper(model)
    x = torch.randn(40, 3, D_MODEL, dtype=torch.float64)
    extra = torch.randn(40, 3, D_MODEL, dtype=torch.float64) if reinject else [None] * 40
    fast_state = generic_state = model.init_state(3, dtype=torch.float64)
    with torch.no_grad():
        for x_t, r_t in zip(x, extra, strict=True):
            fast, fast_state = lean.step(x_t, fast_state, r_t)
            generic, generic_state = model.step(x_t, generic_state, r_t)
            torch.testing.assert_close(fast, generic, rtol=1e-12, atol=1e-12)
    assert lean._layout is not None  # the lean path ran
    for a, b in zip(fast_state, generic_state, strict=True):
        if isinstance(a, KVCache):  # the lean cache has unused capacity past its tokens
            assert a.size == b.size == len(x)
            a, b = a.tokens(), b.tokens()
        for ta, tb in zip(a, b, strict=True):
            torch.testing.assert_close(ta, tb, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("stepper_class", [LeanStepper, CompiledStepper])
def test_the_layout_follows_parameter_updates_loads_and_conversions(stepper_class: type) -> None:
    """An optimiser step, a state-dict load (in place, and with ``assign=True``, which replaces the
    parameters) and ``.double()`` all reach the stepper's laid-out weights."""
    model = Aaren(D_MODEL, HEADS, 2, 32, dropout=0.0).eval()
    x = torch.randn(2, D_MODEL)

    def step_output(m: Aaren, stepper: LeanStepper) -> torch.Tensor:
        with torch.no_grad():
            return stepper.step(x.to(next(m.parameters()).dtype), m.init_state(2))[0]

    def own_output(m: Aaren) -> torch.Tensor:
        with torch.no_grad():
            return m.step(x.to(next(m.parameters()).dtype), m.init_state(2))[0]

    stepper = stepper_class(model)
    before = step_output(model, stepper)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    model(torch.randn(2, 5, D_MODEL))[0].square().sum().backward()
    optimizer.step()
    after = step_output(model, stepper)
    assert not torch.allclose(before, after)
    torch.testing.assert_close(after, own_output(model), rtol=1e-5, atol=1e-6)

    for assign in (False, True):
        other = Aaren(D_MODEL, HEADS, 2, 32, dropout=0.0).eval()
        other_stepper = stepper_class(other)
        step_output(other, other_stepper)
        other.load_state_dict(model.state_dict(), assign=assign)
        torch.testing.assert_close(step_output(other, other_stepper), after, rtol=1e-5, atol=1e-6)

    model.double()
    assert step_output(model, stepper).dtype == torch.float64
    torch.testing.assert_close(step_output(model, stepper), own_output(model), rtol=1e-12, atol=1e-12)


def test_fast_stepper_picks_the_fastest_form_and_otherwise_the_model() -> None:
    aaren = Aaren(D_MODEL, HEADS, 1, 32)
    assert type(fast_stepper(aaren)) is CompiledStepper
    assert type(fast_stepper(Transformer(D_MODEL, HEADS, 1, 32))) is LeanStepper
    assert type(fast_stepper(LinearTransformer(D_MODEL, HEADS, 1, 32))) is CompiledStepper
    crt = CompactRecurrentTransformer(D_MODEL, HEADS, 1, 32, seg_len=4)
    assert fast_stepper(crt) is crt
    with pytest.raises(TypeError, match="lean step"):
        LeanStepper(crt)


def test_an_activation_the_compiled_step_lacks_is_refused_and_fast_stepper_takes_the_python_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The compiled step implements ReLU and the exact GELU: another activation (here SiLU, added to
    the choices) must be refused, never run as one of those; the Python lean step runs it."""
    monkeypatch.setitem(ACTIVATIONS, "silu", torch.nn.SiLU)
    torch.manual_seed(0)
    model = Aaren(D_MODEL, HEADS, 2, 32, dropout=0.0, activation="silu").eval()
    with pytest.raises(ValueError, match=r"ReLU and the exact GELU only, not SiLU"):
        CompiledStepper(model)
    tanh_gelu = Aaren(D_MODEL, HEADS, 2, 32, dropout=0.0).eval()
    tanh_gelu.blocks[1].ff[1] = torch.nn.GELU(approximate="tanh")  # the exact GELU in block 0 only
    with pytest.raises(ValueError, match=r"not GELU\(approximate='tanh'\)"):
        CompiledStepper(tanh_gelu)
    stepper = fast_stepper(model)
    assert type(stepper) is LeanStepper
    x = torch.randn(3, D_MODEL)
    with torch.no_grad():
        torch.testing.assert_close(
            stepper.step(x, model.init_state(3))[0],
            model.step(x, model.init_state(3))[0],
            rtol=1e-6,
            atol=1e-6,
        )


@pytest.mark.parametrize("model_class", [Aaren, Transformer, LinearTransformer])
def test_one_state_stepped_twice_gives_the_same_step(model_class: type) -> None:
    """A lean step never writes its input state in place, so a state can be branched (beam search,
    a what-if token): the same token from one state twice gives the same output and state."""
    torch.manual_seed(0)
    model = model_class(D_MODEL, HEADS, 2, 32, dropout=0.0).double().eval()
    lean = LeanStepper(model)
    x = torch.randn(5, 2, D_MODEL, dtype=torch.float64)
    with torch.no_grad():
        state = model.init_state(2, dtype=torch.float64)
        for x_t in x[:-1]:
            _, state = lean.step(x_t, state)
        first, _ = lean.step(x[-1], state)
        again, _ = lean.step(x[-1], state)
    torch.testing.assert_close(first, again, rtol=0, atol=0)


@pytest.mark.parametrize("mixer_class", [AarenAttention, LinearAttention, CausalSelfAttention])
def test_a_lone_mixer_steps_lean_and_follows_its_parameters(mixer_class: type) -> None:
    """:class:`LeanMixerStepper` (video's time attention) equals the mixer's own step, and after an
    optimiser step and a load it steps on the new weights, not the layout it built first."""
    torch.manual_seed(0)
    mixer = mixer_class(D_MODEL, HEADS).double().eval()
    stepper = LeanMixerStepper(mixer)
    x = torch.randn(6, 3, D_MODEL, dtype=torch.float64)

    def both() -> tuple[torch.Tensor, torch.Tensor]:
        lean_state = own_state = mixer.init_state(3, dtype=torch.float64)
        with torch.no_grad():
            for x_t in x:
                lean, lean_state = stepper.step(x_t, lean_state)
                own, own_state = mixer.step(x_t, own_state)
        return lean, own

    lean, own = both()
    torch.testing.assert_close(lean, own, rtol=1e-12, atol=1e-12)
    assert stepper._mix is not None
    optimizer = torch.optim.SGD(mixer.parameters(), lr=0.5)
    mixer(torch.randn(3, 5, D_MODEL, dtype=torch.float64))[0].square().sum().backward()
    optimizer.step()
    lean_after, own_after = both()
    assert not torch.allclose(lean_after, lean)
    torch.testing.assert_close(lean_after, own_after, rtol=1e-12, atol=1e-12)
    other = mixer_class(D_MODEL, HEADS).double().eval()
    mixer.load_state_dict(other.state_dict())
    torch.testing.assert_close(*both(), rtol=1e-12, atol=1e-12)

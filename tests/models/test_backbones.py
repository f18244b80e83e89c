"""Backbone contract: causality, parallel == streaming, state continuation, state size, parameters."""

from __future__ import annotations

import pytest
import torch

from recurrent_attention.bench.streaming import state_bytes
from recurrent_attention.models import Aaren, Transformer

D_MODEL, HEADS, LAYERS, D_FF = 16, 4, 3, 32


def build(name: str, **kwargs) -> torch.nn.Module:
    cls = {"transformer": Transformer, "aaren": Aaren}[name]
    torch.manual_seed(0)
    return cls(D_MODEL, HEADS, LAYERS, D_FF, dropout=0.0, **kwargs).double().eval()


BACKBONES = ["transformer", "aaren"]


@pytest.mark.parametrize("name", BACKBONES)
@pytest.mark.parametrize("t", [0, 5, 11])
def test_causality_is_exact(name: str, t: int) -> None:
    model = build(name)
    x = torch.randn(2, 12, D_MODEL, dtype=torch.float64)
    perturbed = x.clone()
    perturbed[:, t] += 10.0 * torch.randn(2, D_MODEL, dtype=torch.float64)
    with torch.no_grad():
        y, _ = model(x)
        y_perturbed, _ = model(perturbed)
    assert torch.equal(y[:, :t], y_perturbed[:, :t])
    assert not torch.allclose(y[:, t], y_perturbed[:, t])


@pytest.mark.parametrize("name", BACKBONES)
def test_parallel_equals_step_by_step(name: str) -> None:
    model = build(name)
    x = torch.randn(3, 17, D_MODEL, dtype=torch.float64)
    with torch.no_grad():
        y, _ = model(x)
        state = model.init_state(3, dtype=torch.float64)
        steps = []
        for t in range(x.shape[1]):
            y_t, state = model.step(x[:, t], state)
            steps.append(y_t)
    torch.testing.assert_close(torch.stack(steps, dim=1), y, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("name", BACKBONES)
def test_forward_with_state_continues_the_sequence(name: str) -> None:
    model = build(name)
    x = torch.randn(2, 20, D_MODEL, dtype=torch.float64)
    with torch.no_grad():
        full, _ = model(x)
        first, state = model(x[:, :8])
        second, _ = model(x[:, 8:], state)
    torch.testing.assert_close(torch.cat([first, second], dim=1), full, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("path", ["chunked", "scan", "recurrent"])
def test_aaren_paths_agree_inside_the_model(path: str) -> None:
    x = torch.randn(2, 40, D_MODEL, dtype=torch.float64)
    with torch.no_grad():
        reference, _ = build("aaren", path="recurrent")(x)
        out, _ = build("aaren", path=path)(x)
    torch.testing.assert_close(out, reference, rtol=1e-10, atol=1e-10)


def test_aaren_state_size_is_independent_of_length() -> None:
    model = build("aaren")
    sizes = []
    with torch.no_grad():
        for n in (1, 10, 300):
            _, state = model(torch.randn(2, n, D_MODEL, dtype=torch.float64))
            sizes.append(state_bytes(state))
    assert sizes[0] == sizes[1] == sizes[2] > 0
    transformer_sizes = []
    with torch.no_grad():
        for n in (10, 300):
            _, state = build("transformer")(torch.randn(2, n, D_MODEL, dtype=torch.float64))
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

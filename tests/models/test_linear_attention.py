"""Causal linear attention's math against a naive O(N^2) form written from the paper's equation.

The truth is :func:`naive`: for each token i the weights ``phi(q_i)·phi(k_j)`` of every j <= i, one
token at a time, normalised by their sum (+ eps). Every path (chunked at several chunk sizes,
parallel cumulative sums, recurrent) is held to it in float64, from an empty and from a carried
state, and the state is held to its definition ``(sum phi(k_j) v_j^T, sum phi(k_j))``. The backbone
contract (step = forward, causality, carried state) is test_backbone_contract's, which finds this
backbone in ``conf/model`` by itself.
"""

from __future__ import annotations

import inspect

import pytest
import torch
import torch.nn.functional as F

from recurrent_attention.models.linear_attention import LinearAttention, LinearTransformer, feature_map
from recurrent_attention.models.transformer import Transformer
from recurrent_attention.ops.linear_forms import FORMS, LinearState

EPS = 1e-6  # the reference implementation's (fast-transformers), written here, not imported
TOL = {"rtol": 1e-12, "atol": 1e-12}
B, H, D = 2, 3, 4
# (path, chunk_size): chunks of one token, chunks that do not divide N, one chunk for everything
PATHS = [("chunked", 1), ("chunked", 3), ("chunked", 64), ("parallel", 64), ("recurrent", 64)]


def naive(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """``o_i = sum_{j<=i} (phi(q_i)·phi(k_j)) v_j / (sum_{j<=i} phi(q_i)·phi(k_j) + eps)``, token by token."""
    pq, pk = F.elu(q) + 1, F.elu(k) + 1
    out = torch.empty_like(v)
    for i in range(q.shape[-2]):
        weights = (pq[..., i : i + 1, :] * pk[..., : i + 1, :]).sum(-1)  # (B, H, i + 1)
        out[..., i, :] = (weights.unsqueeze(-1) * v[..., : i + 1, :]).sum(-2) / (
            weights.sum(-1, keepdim=True) + EPS
        )
    return out


def tokens(n: int, seed: int = 0, scale: float = 1.0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    return tuple(scale * torch.randn(B, H, n, D, dtype=torch.float64, generator=g) for _ in range(3))


def empty() -> LinearState:
    return LinearState(
        torch.zeros(B, H, D, D, dtype=torch.float64), torch.zeros(B, H, D, dtype=torch.float64)
    )


@pytest.mark.parametrize(("path", "chunk_size"), PATHS)
@pytest.mark.parametrize("scale", [1.0, 30.0], ids=["unit", "large"])
def test_every_path_equals_the_naive_form(path: str, chunk_size: int, scale: float) -> None:
    q, k, v = tokens(11, scale=scale)
    out, _ = FORMS[path](feature_map(q), feature_map(k), v, empty(), chunk_size)
    torch.testing.assert_close(out, naive(q, k, v), **TOL)


@pytest.mark.parametrize(("path", "chunk_size"), PATHS)
@pytest.mark.parametrize("split", [1, 4, 7])
def test_a_carried_state_continues_the_naive_form(path: str, chunk_size: int, split: int) -> None:
    """The state after the first ``split`` tokens makes the rest equal to the naive form over all."""
    q, k, v = tokens(11, seed=1)
    phi_q, phi_k = feature_map(q), feature_map(k)
    _, state = FORMS[path](
        phi_q[..., :split, :], phi_k[..., :split, :], v[..., :split, :], empty(), chunk_size
    )
    rest, _ = FORMS[path](phi_q[..., split:, :], phi_k[..., split:, :], v[..., split:, :], state, chunk_size)
    torch.testing.assert_close(rest, naive(q, k, v)[..., split:, :], **TOL)


@pytest.mark.parametrize(("path", "chunk_size"), PATHS)
def test_the_state_is_its_definition_and_constant_size(path: str, chunk_size: int) -> None:
    """``S = sum_j phi(k_j) v_j^T`` (an outer product per token, summed by hand), ``z = sum_j phi(k_j)``,
    and the same shapes after 2 tokens as after 11."""
    shapes = set()
    for n in (2, 11):
        q, k, v = tokens(n, seed=2)
        _, state = FORMS[path](feature_map(q), feature_map(k), v, empty(), chunk_size)
        phi_k = F.elu(k) + 1
        s = sum(phi_k[..., j, :, None] * v[..., j, None, :] for j in range(n))
        torch.testing.assert_close(state.s, s, **TOL)
        torch.testing.assert_close(state.z, phi_k.sum(-2), **TOL)
        shapes.add((state.s.shape, state.z.shape))
    assert shapes == {((B, H, D, D), (B, H, D))}


def test_gradients_agree_across_paths() -> None:
    """The paths are different computations of one function: their input gradients agree too."""
    grads = []
    for path, chunk_size in PATHS:
        q, k, v = (t.requires_grad_() for t in tokens(9, seed=3))
        out, state = FORMS[path](feature_map(q), feature_map(k), v, empty(), chunk_size)
        (out.square().sum() + state.s.sum() + state.z.sum()).backward()
        grads.append(torch.cat([q.grad.flatten(), k.grad.flatten(), v.grad.flatten()]))
    for grad in grads[1:]:
        torch.testing.assert_close(grad, grads[0], **TOL)


def test_the_layer_is_linear_attention_between_the_shared_projections() -> None:
    """The mixer = output projection of the naive form over the heads of its q/k/v projection."""
    torch.manual_seed(0)
    layer = LinearAttention(d_model=H * D, n_heads=H, chunk_size=4).double()
    x = torch.randn(B, 10, H * D, dtype=torch.float64)
    q, k, v = layer.proj.heads_qkv(x)
    out, _ = layer(x)
    torch.testing.assert_close(out, layer.proj.merge_heads(naive(q, k, v)), **TOL)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"path": "scan"}, r"^model\.path='scan': choose one of chunked, parallel, recurrent$"),
        ({"chunk_size": 0}, r"^model\.chunk_size=0: use a positive integer$"),
    ],
)
def test_bad_options_are_one_line_naming_the_key(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LinearTransformer(d_model=8, n_heads=2, n_layers=1, d_ff=16, **kwargs)


def test_stepping_the_layer_token_by_token_is_the_naive_form() -> None:
    """``step`` (one token of (B, d_model), the state carried) gives each token of the naive form."""
    torch.manual_seed(1)
    layer = LinearAttention(d_model=H * D, n_heads=H).double()
    x = torch.randn(B, 6, H * D, dtype=torch.float64)
    q, k, v = layer.proj.heads_qkv(x)
    expected = layer.proj.merge_heads(naive(q, k, v))
    state = layer.init_state(B)
    for t in range(6):
        y_t, state = layer.step(x[:, t], state)
        torch.testing.assert_close(y_t, expected[:, t], **TOL)


def test_the_empty_state_is_zeros_in_the_layers_dtype_unless_one_is_given() -> None:
    layer = LinearAttention(d_model=H * D, n_heads=H).double()
    for dtype, expected in ((None, torch.float64), (torch.float32, torch.float32)):
        state = layer.init_state(B, dtype=dtype)
        assert (state.s.dtype, state.z.dtype) == (expected, expected)
        assert (state.s.shape, state.z.shape) == ((B, H, D, D), (B, H, D))
        assert not state.s.any() and not state.z.any()


@pytest.mark.parametrize("chunk_size", [0, -1, 2.0, True])
def test_chunk_size_must_be_a_positive_integer(chunk_size: object) -> None:
    """One token per chunk is the smallest; a float or a bool (an int in Python) is refused."""
    with pytest.raises(ValueError, match=r"^model\.chunk_size="):
        LinearAttention(d_model=8, n_heads=2, chunk_size=chunk_size)
    assert LinearAttention(d_model=8, n_heads=2, chunk_size=1).chunk_size == 1


def _defaults(cls: type) -> dict[str, object]:
    parameters = inspect.signature(cls.__init__).parameters.values()
    return {p.name: p.default for p in parameters if p.default is not inspect.Parameter.empty}


def test_the_defaults_are_the_transformers_and_the_layer_takes_the_stacks() -> None:
    """Swapping the Transformer for linear attention in Python changes the mixer and nothing else:
    every option the two stacks share has the same default, and the layer's are the stack's."""
    ours, transformer = _defaults(LinearTransformer), _defaults(Transformer)
    shared = ours.keys() & transformer.keys()
    assert shared >= {"dropout", "activation", "norm_first", "final_norm", "qkv_bias", "norm_eps"}
    assert {name: ours[name] for name in shared} == {name: transformer[name] for name in shared}
    layer = _defaults(LinearAttention)
    assert layer == {name: ours[name] for name in ("path", "chunk_size", "qkv_bias")}


@pytest.mark.parametrize(("path", "chunk_size"), PATHS)
@pytest.mark.parametrize("lead", [(), (2,), (2, 1, 3)], ids=["no_lead", "one_lead", "three_lead"])
def test_the_forms_take_any_leading_dimensions(path: str, chunk_size: int, lead: tuple[int, ...]) -> None:
    """``(..., N, d_head)`` as the forms' docstring says: no batch or head axes, one, or three, each
    equal to the naive form, the state continuing it."""
    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(*lead, 7, D, dtype=torch.float64, generator=g) for _ in range(3))
    state = LinearState(
        torch.zeros(*lead, D, D, dtype=torch.float64), torch.zeros(*lead, D, dtype=torch.float64)
    )
    head, state = FORMS[path](
        feature_map(q[..., :3, :]), feature_map(k[..., :3, :]), v[..., :3, :], state, chunk_size
    )
    tail, state = FORMS[path](
        feature_map(q[..., 3:, :]), feature_map(k[..., 3:, :]), v[..., 3:, :], state, chunk_size
    )
    torch.testing.assert_close(torch.cat([head, tail], dim=-2), naive(q, k, v), **TOL)
    phi_k = F.elu(k) + 1
    torch.testing.assert_close(state.s, phi_k.mT @ v, **TOL)
    torch.testing.assert_close(state.z, phi_k.sum(-2), **TOL)


@pytest.mark.parametrize(("path", "chunk_size"), PATHS)
def test_an_empty_segment_returns_no_tokens_and_the_state_as_it_was(path: str, chunk_size: int) -> None:
    q, k, v = tokens(0)
    _, state = FORMS[path](*(t for t in tokens(3)), empty(), chunk_size)
    out, after = FORMS[path](feature_map(q), feature_map(k), v, state, chunk_size)
    assert out.shape == (B, H, 0, D)
    assert torch.equal(after.s, state.s) and torch.equal(after.z, state.z)

"""The fused q/k/v layout of ``HeadProjections``: a seed gives the initial values the three separate
projections of before had, and a state dict written in that older layout, brought to today's by
:mod:`~recurrent_attention.migration`, loads strictly and computes what those projections computed
(a naive attention over the old tensors is the truth). The model itself knows only today's layout."""

from __future__ import annotations

import inspect

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from recurrent_attention.migration import migrate_state_dict
from recurrent_attention.models.aaren import AarenAttention
from recurrent_attention.models.blocks import HeadProjections, LayerStack, QKVLinear, ResidualBlock
from recurrent_attention.models.transformer import CausalSelfAttention, Transformer

D_MODEL, HEADS, D_HEAD = 16, 4, 4


@pytest.mark.parametrize("qkv_bias", [True, False])
def test_a_seed_gives_the_initial_values_of_the_three_projections_of_before(qkv_bias: bool) -> None:
    """Before the fusion ``HeadProjections`` built q, k, v and the output as four Linear layers in
    turn, and Aaren then drew its query: the same seed gives the same values, now in one matrix,
    and leaves the generator where it left it (the query matches too)."""
    torch.manual_seed(7)
    mixer = AarenAttention(D_MODEL, HEADS, qkv_bias=qkv_bias)
    torch.manual_seed(7)
    q, k, v = (nn.Linear(D_MODEL, D_MODEL, bias=qkv_bias) for _ in range(3))
    out = nn.Linear(D_MODEL, D_MODEL)
    query = torch.randn(D_MODEL) * D_MODEL**-0.5
    assert torch.equal(mixer.proj.qkv.weight, torch.cat([q.weight, k.weight, v.weight]))
    if qkv_bias:
        assert torch.equal(mixer.proj.qkv.bias, torch.cat([q.bias, k.bias, v.bias]))
    else:
        assert mixer.proj.qkv.bias is None
    assert torch.equal(mixer.proj.out_proj.weight, out.weight)
    assert torch.equal(mixer.proj.out_proj.bias, out.bias)
    assert torch.equal(mixer.query, query)


def old_layout(qkv_bias: bool, aaren: bool) -> dict[str, Tensor]:
    """A mixer's state dict as written before the fusion: separate ``q_proj``/``k_proj``/``v_proj``."""
    gen = torch.Generator().manual_seed(3)
    state = {}
    for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
        state[f"proj.{name}.weight"] = torch.randn(D_MODEL, D_MODEL, generator=gen, dtype=torch.float64)
        if qkv_bias or name == "out_proj":
            state[f"proj.{name}.bias"] = torch.randn(D_MODEL, generator=gen, dtype=torch.float64)
    if aaren:
        state["query"] = torch.randn(D_MODEL, generator=gen, dtype=torch.float64)
    return state


def naive_attention(state: dict[str, Tensor], x: Tensor, aaren: bool) -> Tensor:
    """Causal attention from the old tensors: each token's own query (softmax attention) or the
    projected learned query (Aaren), a masked softmax over the tokens up to it, the output layer."""

    def project(name: str, t: Tensor) -> Tensor:
        return F.linear(t, state[f"proj.{name}.weight"], state.get(f"proj.{name}.bias"))

    n = x.shape[-2]
    k = project("k_proj", x).unflatten(-1, (HEADS, D_HEAD)).transpose(1, 2)  # (B, H, N, d_head)
    v = project("v_proj", x).unflatten(-1, (HEADS, D_HEAD)).transpose(1, 2)
    if aaren:
        q = project("q_proj", state["query"]).view(HEADS, 1, D_HEAD).expand(x.shape[0], HEADS, n, D_HEAD)
    else:
        q = project("q_proj", x).unflatten(-1, (HEADS, D_HEAD)).transpose(1, 2)
    scores = q @ k.transpose(-1, -2) / D_HEAD**0.5
    future = torch.ones(n, n, dtype=torch.bool).triu(1)
    weights = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
    return project("out_proj", (weights @ v).transpose(1, 2).flatten(-2))


@pytest.mark.parametrize("aaren", [False, True], ids=["transformer", "aaren"])
@pytest.mark.parametrize("qkv_bias", [True, False])
def test_a_state_dict_of_the_old_layout_loads_strictly_and_computes_the_same(
    aaren: bool, qkv_bias: bool
) -> None:
    state = old_layout(qkv_bias, aaren)
    mixer = (AarenAttention if aaren else CausalSelfAttention)(D_MODEL, HEADS, qkv_bias=qkv_bias).double()
    with pytest.raises(RuntimeError, match=r"Unexpected key\(s\).*q_proj"):
        mixer.load_state_dict(state, strict=True)  # no load hook in the model: migration is apart
    mixer.load_state_dict(migrate_state_dict(dict(state)), strict=True)
    assert sorted(mixer.state_dict()) == sorted(
        {"proj.qkv.weight", "proj.out_proj.weight", "proj.out_proj.bias"}
        | ({"proj.qkv.bias"} if qkv_bias else set())
        | ({"query"} if aaren else set())
    )
    x = torch.randn(2, 7, D_MODEL, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        out, _ = mixer(x)
    torch.testing.assert_close(out, naive_attention(state, x, aaren), rtol=1e-12, atol=1e-12)


def test_a_partial_old_layout_is_refused_by_name() -> None:
    """Only q and k of the old layout: nothing is fused, and strict loading names what is wrong."""
    state = {k: v for k, v in old_layout(True, aaren=False).items() if "v_proj" not in k}
    projections = HeadProjections(D_MODEL, HEADS).double()
    migrated = migrate_state_dict({k.removeprefix("proj."): v for k, v in state.items()})
    with pytest.raises(RuntimeError, match=r"(?s)Missing key\(s\).*qkv\.weight.*Unexpected key\(s\).*q_proj"):
        projections.load_state_dict(migrated)


@pytest.mark.parametrize("lead", [(), (2,), (2, 3)], ids=["no_lead", "one_lead", "two_lead"])
def test_heads_split_and_merge_with_any_leading_axes(lead: tuple[int, ...]) -> None:
    """``(..., N, d_model)`` <-> ``(..., H, N, d_head)``: head h holds features h d_head .. (h + 1)
    d_head - 1 of each token, by slicing, whatever the leading axes; merging feeds them back in order."""
    projections = HeadProjections(D_MODEL, HEADS).double()
    x = torch.randn(*lead, 5, D_MODEL, dtype=torch.float64)
    heads = projections.split_heads(x)
    by_hand = torch.stack([x[..., h * D_HEAD : (h + 1) * D_HEAD] for h in range(HEADS)], dim=-3)
    assert torch.equal(heads, by_hand)
    torch.testing.assert_close(projections.merge_heads(heads), projections.out_proj(x))


def _defaults(cls: type) -> dict[str, object]:
    parameters = inspect.signature(cls.__init__).parameters.values()
    return {p.name: p.default for p in parameters if p.default is not inspect.Parameter.empty}


def test_the_shared_blocks_default_to_the_transformers_options() -> None:
    """A stack or block built without an option is the Transformer's: post-norm, a final norm, eps
    1e-5; the q/k/v projection has biases unless told (nn.Linear's default)."""
    transformer = _defaults(Transformer)
    stack = _defaults(LayerStack)
    assert stack == {k: transformer[k] for k in ("activation", "norm_first", "final_norm", "norm_eps")}
    assert _defaults(ResidualBlock) == {"norm_eps": transformer["norm_eps"]}
    assert _defaults(HeadProjections) == {"qkv_bias": True} and _defaults(QKVLinear) == {"bias": True}
    assert HeadProjections(D_MODEL, HEADS).qkv.bias is not None

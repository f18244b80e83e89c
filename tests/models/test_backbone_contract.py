"""The backbone contract (models/base.py), checked on every sequence backbone in ``conf/model``.

Each backbone is built from its own ``conf/model/<name>.yaml`` by Hydra at small sizes
(:mod:`tests.helpers.backbones`), so a backbone added there is checked here without editing this
file: the list is every model config whose ``backbone._target_`` is a
:class:`~recurrent_attention.models.base.Backbone`. A new backbone is held to the full contract
(:func:`capacity` None) until it documents a weaker guarantee here. The properties, in float64:

- causality: changing token t never changes an output before t (bit for bit), and does change
  the output at t;
- step: stepping token by token from ``init_state`` gives ``forward``'s outputs;
- carried state: ``forward`` over a sequence split in two, the state carried, equals ``forward``
  over the whole, and the state from either of ``forward`` and ``step`` continues under the other;
- detachable state: the state detached as the LM task detaches it between optimiser steps
  continues with the same outputs, and no gradient flows through it into earlier inputs.

What each backbone guarantees, read from its state:

- ``transformer``: the KV cache holds every earlier token: step and a carried state are exact at
  any length (20 stepped tokens cross the lean cache's first doubling at 16).
- ``aaren``: the state (m, u, w) per layer and head is the exact prefix reduction: any length, on
  every path (chunked, scan, recurrent; each is also held to a naive implementation in test_aaren).
- ``crt`` / ``crt_gru``: the state is the memory token, the positional RNN state and the open
  segment's inputs, and ``step`` recomputes that open segment, so step and a carried state are
  exact at any length and any split, mid-segment included (``seg_len`` 4, 13 tokens: three full
  segments and one open one).
- ``transformer_xl``: the state is the last ``mem_len`` inputs of each layer, so a call is exact
  only while every earlier token is still in the memory: at most ``mem_len`` tokens before it.
  Step (``forward`` on one-token segments) therefore equals ``forward`` over ``mem_len + 1``
  tokens, and a carried state after at most ``mem_len`` tokens continues a sequence of any length.
  Beyond that the memory slides (the original's evaluation); what it then guarantees, the exact
  receptive field of ``n_layers * mem_len`` tokens, is test_transformer_xl's.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from hydra.utils import instantiate

from recurrent_attention.config import CONFIG_DIR, backbone_config
from recurrent_attention.models import Backbone, Transformer, TransformerXL
from recurrent_attention.models.blocks import HeadProjections
from recurrent_attention.models.transformer import KVCache
from recurrent_attention.tasks.lm.module import detach_state
from tests.helpers.backbones import D_MODEL, build_backbone, model_config, sequence_backbones

N_TOKENS = 13
TOL = {"rtol": 1e-10, "atol": 1e-10}
# Every backbone as its config builds it, and the paths and switches that change its state handling.
VARIANTS = [(name, ()) for name in sequence_backbones()] + [
    ("aaren", ("model.path=scan",)),
    ("aaren", ("model.path=recurrent",)),
    ("crt", ("model.reset_positions=false",)),
]
IDS = [" ".join([name, *overrides]) for name, overrides in VARIANTS]


def capacity(model: Backbone) -> int | None:
    """How many earlier tokens a state carries exactly (None: all). Only Transformer-XL bounds it."""
    return model.mem_len if isinstance(model, TransformerXL) else None


def step_length(model: Backbone) -> int:
    """The longest sequence ``step`` must reproduce ``forward`` over, capped at 20 tokens."""
    limit = capacity(model)
    return 20 if limit is None else limit + 1


def inputs(n: int) -> torch.Tensor:
    return torch.randn(2, n, D_MODEL, dtype=torch.float64, generator=torch.Generator().manual_seed(n))


def run_steps(model: Backbone, x: torch.Tensor, state: object) -> tuple[torch.Tensor, object]:
    outputs = []
    for t in range(x.shape[1]):
        y_t, state = model.step(x[:, t], state)
        outputs.append(y_t)
    return torch.stack(outputs, dim=1), state


def test_a_backbone_config_copied_under_a_new_name_is_discovered(tmp_path: Path) -> None:
    """The list is the folder's: ``conf/model`` copied with ``aaren.yaml`` under a new name gains
    exactly that name (so an empty or broken discovery cannot pass, and no test lists the backbones),
    the video encoders stay out, and the copy is built from its config and holds ``step == forward``."""
    shutil.copytree(CONFIG_DIR / "model", tmp_path / "model")
    shutil.copy(CONFIG_DIR / "model" / "aaren.yaml", tmp_path / "model" / "my_backbone.yaml")
    found = sequence_backbones(tmp_path)
    assert found == sorted([*sequence_backbones(), "my_backbone"])
    assert "timesformer" not in found
    torch.manual_seed(0)
    model = instantiate(backbone_config(model_config("my_backbone", (), tmp_path).model)).double().eval()
    x = inputs(6)
    with torch.no_grad():
        y, _ = model(x)
        stepped, _ = run_steps(model, x, model.init_state(2, dtype=torch.float64))
    torch.testing.assert_close(stepped, y, **TOL)


@pytest.mark.parametrize(("name", "overrides"), VARIANTS, ids=IDS)
@pytest.mark.parametrize("t", [0, 5, 8, N_TOKENS - 1])
def test_causality_is_exact(name: str, overrides: tuple[str, ...], t: int) -> None:
    """t = 5 sits inside CRT's second segment, 8 starts its third, 12 its open fourth; 5 onwards
    lie past Transformer-XL's memory, which ``forward`` over one segment never truncates."""
    model = build_backbone(name, overrides)
    x = inputs(N_TOKENS)
    perturbed = x.clone()
    perturbed[:, t] += 10.0 * torch.randn(2, D_MODEL, dtype=torch.float64)
    with torch.no_grad():
        y, _ = model(x)
        y_perturbed, _ = model(perturbed)
    assert torch.equal(y[:, :t], y_perturbed[:, :t])
    assert not torch.allclose(y[:, t], y_perturbed[:, t])


@pytest.mark.parametrize(("name", "overrides"), VARIANTS, ids=IDS)
@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
def test_step_equals_forward(name: str, overrides: tuple[str, ...], grad: bool) -> None:
    """Without gradients the Transformer and Aaren take their lean step (Aaren's compiled one where
    the native kernels build); with gradients every backbone takes its block-by-block step (as
    training through ``step`` does)."""
    model = build_backbone(name, overrides)
    x = inputs(step_length(model))
    with torch.set_grad_enabled(grad):
        y, _ = model(x)
        stepped, _ = run_steps(model, x, model.init_state(2, dtype=torch.float64))
    torch.testing.assert_close(stepped, y, **TOL)


@pytest.mark.parametrize(("name", "overrides"), VARIANTS, ids=IDS)
def test_carried_state_continues_the_sequence(name: str, overrides: tuple[str, ...]) -> None:
    """Every split point the state can carry, the second part longer than Transformer-XL's memory."""
    model = build_backbone(name, overrides)
    x = inputs(N_TOKENS)
    limit = capacity(model) or N_TOKENS - 1
    with torch.no_grad():
        whole, _ = model(x)
        for split in range(1, limit + 1):
            first, state = model(x[:, :split])
            second, _ = model(x[:, split:], state)
            torch.testing.assert_close(torch.cat([first, second], dim=1), whole, **TOL, msg=f"split {split}")


@pytest.mark.parametrize(("name", "overrides"), VARIANTS, ids=IDS)
def test_forward_and_step_continue_each_others_state(name: str, overrides: tuple[str, ...]) -> None:
    """Split 3 tokens before the end: the Transformer's 17 stepped tokens leave a lean cache that
    has doubled and holds unused capacity, which ``forward`` must read past."""
    model = build_backbone(name, overrides)
    n = step_length(model)
    x, split = inputs(n), n - 3
    with torch.no_grad():
        whole, _ = model(x)
        _, state = model(x[:, :split])
        stepped, _ = run_steps(model, x[:, split:], state)
        _, state = run_steps(model, x[:, :split], model.init_state(2, dtype=torch.float64))
        continued, _ = model(x[:, split:], state)
    torch.testing.assert_close(stepped, whole[:, split:], **TOL)
    torch.testing.assert_close(continued, whole[:, split:], **TOL)


@pytest.mark.parametrize(("name", "overrides"), VARIANTS, ids=IDS)
def test_a_detached_state_continues_and_cuts_the_graph(name: str, overrides: tuple[str, ...]) -> None:
    """Truncated BPTT: the continuation from the detached state has the carried state's values, and
    its gradient reaches none of the first part's inputs (through the state as it was, it would)."""
    model = build_backbone(name, overrides)
    x = inputs(N_TOKENS)
    split = min(capacity(model) or N_TOKENS, 6)
    first = x[:, :split].clone().requires_grad_()
    _, state = model(first)
    kept, _ = model(x[:, split:], state)
    cut, _ = model(x[:, split:], detach_state(state))
    torch.testing.assert_close(cut, kept, **TOL)
    cut.sum().backward()
    assert first.grad is None


def naive_transformer(
    model: Transformer,
    x: torch.Tensor,
    reinject: torch.Tensor | None,
    dropout: float = 0.0,
    final_norm: bool = True,
) -> torch.Tensor:
    """The decoder written out from the textbook (float64): per layer, each head's
    ``softmax(q k^T / sqrt(d_head) + causal mask) v`` from the fused q/k/v rows, the output
    projection, residuals around attention and a GELU/ReLU MLP, LayerNorm after (post-norm) or
    before (pre-norm) each, the final LayerNorm; ``reinject`` added before every block but the first.
    ``dropout`` > 0 (training): dropped on the attention's output, the MLP's hidden layer and the
    MLP's output, drawn in that order (no attention-probability dropout)."""

    def drop(h: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.dropout(h, dropout, training=dropout > 0)

    def layer_norm(h: torch.Tensor, norm: torch.nn.LayerNorm) -> torch.Tensor:
        mean, var = h.mean(-1, keepdim=True), h.var(-1, unbiased=False, keepdim=True)
        return (h - mean) / torch.sqrt(var + norm.eps) * norm.weight + norm.bias

    n, d = x.shape[-2], x.shape[-1]
    for i, block in enumerate(model.blocks):
        if i and reinject is not None:
            x = x + reinject
        proj = block.mixer.proj
        heads, d_head = proj.n_heads, d // proj.n_heads

        def attention(h: torch.Tensor, proj=proj, heads=heads, d_head=d_head) -> torch.Tensor:
            qkv = h @ proj.qkv.weight.T + proj.qkv.bias
            q, k, v = qkv[..., :d], qkv[..., d : 2 * d], qkv[..., 2 * d :]
            outs = []
            for head in range(heads):
                cols = slice(head * d_head, (head + 1) * d_head)
                logits = q[..., cols] @ k[..., cols].transpose(-1, -2) / d_head**0.5
                future = torch.ones(n, n, dtype=torch.bool).triu(1)
                outs.append(torch.softmax(logits.masked_fill(future, float("-inf")), -1) @ v[..., cols])
            return torch.cat(outs, -1) @ proj.out_proj.weight.T + proj.out_proj.bias

        expand, act, _, contract = block.ff

        def mlp(h: torch.Tensor, expand=expand, act=act, contract=contract) -> torch.Tensor:
            hidden = h @ expand.weight.T + expand.bias
            hidden = (
                torch.relu(hidden) if isinstance(act, torch.nn.ReLU) else torch.nn.functional.gelu(hidden)
            )
            return drop(hidden) @ contract.weight.T + contract.bias

        if block.norm_first:
            x = x + drop(attention(layer_norm(x, block.norm_mix)))
            x = x + drop(mlp(layer_norm(x, block.norm_ff)))
        else:
            x = layer_norm(x + drop(attention(x)), block.norm_mix)
            x = layer_norm(x + drop(mlp(x)), block.norm_ff)
    return layer_norm(x, model.norm) if final_norm else x


@pytest.mark.parametrize(
    ("norm_first", "activation", "final_norm"), [(False, "gelu", True), (True, "relu", False)]
)
def test_transformer_equals_its_written_out_layers(
    norm_first: bool, activation: str, final_norm: bool
) -> None:
    """Forward, forward continuing a cache and step against :func:`naive_transformer` (independent
    truth: the shared blocks, the SDPA call and its cache mask, the head split, the MLP, the norms)."""
    torch.manual_seed(0)
    model = Transformer(8, 2, 2, 12, 0.0, activation=activation, norm_first=norm_first, final_norm=final_norm)
    model = model.double().eval()
    with torch.no_grad():  # LayerNorm weights and biases away from 1 and 0, so a swapped one shows
        for module in model.modules():
            if isinstance(module, torch.nn.LayerNorm):
                module.weight.uniform_(0.5, 1.5), module.bias.uniform_(-0.5, 0.5)
    x = torch.randn(2, 7, 8, dtype=torch.float64)
    reinject = torch.randn(2, 7, 8, dtype=torch.float64)
    expected = naive_transformer(model, x, reinject, final_norm=final_norm)
    torch.testing.assert_close(model(x, reinject=reinject)[0], expected, **TOL)
    head, state = model(x[:, :3], reinject=reinject[:, :3])
    tail, _ = model(x[:, 3:], state, reinject=reinject[:, 3:])
    torch.testing.assert_close(torch.cat([head, tail], 1), expected, **TOL)
    state, stepped = model.init_state(2, dtype=torch.float64), []
    for t in range(7):
        y_t, state = model.step(x[:, t], state, reinject=reinject[:, t])
        stepped.append(y_t)
    torch.testing.assert_close(torch.stack(stepped, 1), expected, **TOL)


@pytest.mark.parametrize("norm_first", [False, True])
def test_transformer_training_drops_where_the_written_out_layers_do(norm_first: bool) -> None:
    """In training, dropout on the attention's output, the MLP's hidden layer and its output: the same
    random draws (one seed) give :func:`naive_transformer`'s outputs; in eval mode none."""
    torch.manual_seed(0)
    model = Transformer(8, 2, 2, 12, dropout=0.5, attn_dropout=0.0, norm_first=norm_first).double().train()
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    torch.manual_seed(7)
    dropped, _ = model(x)
    torch.manual_seed(7)
    torch.testing.assert_close(dropped, naive_transformer(model, x, None, dropout=0.5), **TOL)
    torch.testing.assert_close(model.eval()(x)[0], naive_transformer(model, x, None), **TOL)


def test_transformer_attention_dropout_runs_in_training_only() -> None:
    """Attention-probability dropout (SDPA's): none in eval mode (the written-out layers exactly),
    some in training (two calls differ)."""
    torch.manual_seed(0)
    model = Transformer(8, 2, 1, 12, dropout=0.0, attn_dropout=0.5).double()
    x = torch.randn(2, 6, 8, dtype=torch.float64)
    torch.testing.assert_close(model.eval()(x)[0], naive_transformer(model, x, None), **TOL)
    model.train()
    assert not torch.equal(model(x)[0], model(x)[0])


def test_transformer_dropout_is_nn_transformers_and_the_attention_follows_it() -> None:
    """Its dropout (the tasks set the config's) is nn.Transformer's 0.1 and the attention's follows
    it; the other defaults are the config's (tests/models/test_config_defaults.py)."""
    block = Transformer(8, 2, 1, 16).blocks[0]
    assert block.dropout.p == block.ff[2].p == block.mixer.attn_dropout == 0.1


def test_kv_cache_holds_its_length_of_tokens() -> None:
    """A cache's size is its buffers' length, or the ``length`` a deployed step wrote; ``tokens`` are
    those first positions."""
    k, v = torch.randn(1, 2, 5, 4), torch.randn(1, 2, 5, 4)
    assert KVCache(k, v).size == 5 and KVCache(k, v, length=3).size == 3
    cached_k, cached_v = KVCache(k, v, length=3).tokens()
    assert torch.equal(cached_k, k[..., :3, :]) and torch.equal(cached_v, v[..., :3, :])
    empty = Transformer(8, 2, 1, 16).double().init_state(2)[0]  # the weights' dtype, no tokens
    assert empty.k.dtype == empty.v.dtype == torch.float64 and empty.size == 0


@pytest.mark.parametrize("qkv_bias", [True, False])
def test_head_projections_parts_are_the_fused_rows(qkv_bias: bool) -> None:
    """``parts()``: W_q, W_k, W_v the fused weight's three row blocks of d_model rows (biases the
    same, or None), views of the parameter (what Aaren's scores are built from)."""
    proj = HeadProjections(6, 2, qkv_bias)
    (w_q, b_q), (w_k, b_k), (w_v, b_v) = proj.parts()
    weight = proj.qkv.weight
    assert torch.equal(w_q, weight[:6]) and torch.equal(w_k, weight[6:12]) and torch.equal(w_v, weight[12:])
    if qkv_bias:
        bias = proj.qkv.bias
        assert torch.equal(b_q, bias[:6]) and torch.equal(b_k, bias[6:12]) and torch.equal(b_v, bias[12:])
    else:
        assert b_q is b_k is b_v is None
    assert w_k.data_ptr() == weight.data_ptr() + 6 * 6 * weight.element_size()


def test_a_state_of_the_wrong_number_of_layers_is_refused() -> None:
    """One state per block, or an error (a short list would silently skip the last blocks)."""
    model = Transformer(8, 2, 2, 16).eval()
    state = model.init_state(1)
    with pytest.raises(ValueError, match="zip"):
        model.step(torch.zeros(1, 8), state[:1])
    with pytest.raises(ValueError, match="zip"):
        model(torch.zeros(1, 3, 8), state[:1])


@pytest.mark.parametrize("missing", ["forward", "init_state", "step"])
def test_a_backbone_without_one_of_its_three_methods_cannot_be_built(missing: str) -> None:
    methods = {
        name: lambda self, *a, **k: None for name in ("forward", "init_state", "step") if name != missing
    }
    incomplete = type("Incomplete", (Backbone,), methods)
    with pytest.raises(TypeError, match=missing):
        incomplete()

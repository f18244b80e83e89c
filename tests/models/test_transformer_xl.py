"""Transformer-XL: relative attention against a naive loop; the memory: detached, and what step reads
past it. The contract within the memory (causality, step, carried state) is test_backbone_contract's."""

from __future__ import annotations

import inspect

import pytest
import torch

from recurrent_attention.models.transformer_xl import (
    RelativeAttention,
    TransformerXL,
    rel_shift,
    relative_sinusoids,
)


def _model(mem_len: int = 16, n_layers: int = 2) -> TransformerXL:
    torch.manual_seed(0)
    return TransformerXL(
        d_model=16, n_heads=2, n_layers=n_layers, d_ff=32, mem_len=mem_len, dropout=0.0
    ).eval()


def _sinusoid(distance: int, d_model: int) -> torch.Tensor:
    inv_freq = 1.0 / (10000 ** (torch.arange(0.0, d_model, 2.0) / d_model))
    angles = distance * inv_freq
    return torch.cat([angles.sin(), angles.cos()])


def test_rel_shift_aligns_distances():
    n_query, n_mem = 4, 3
    n_keys = n_query + n_mem
    raw = torch.randn(2, n_query, n_keys)  # column c holds distance n_keys - 1 - c
    shifted = rel_shift(raw)
    for i in range(n_query):
        for j in range(n_mem + i + 1):
            distance = n_mem + i - j
            assert shifted[:, i, j].equal(raw[:, i, n_keys - 1 - distance])


def test_relative_attention_matches_naive_loop():
    torch.manual_seed(0)
    d_model, n_heads, d_head = 8, 2, 4
    u, v = torch.nn.Parameter(torch.randn(n_heads, d_head)), torch.nn.Parameter(torch.randn(n_heads, d_head))
    attn = RelativeAttention(d_model, n_heads, d_head, mem_len=3, r_w_bias=u, r_r_bias=v, dropout=0.0).eval()
    memory, x = torch.randn(1, 3, d_model), torch.randn(1, 4, d_model)
    out, new_memory = attn(x, memory)

    keys_in = torch.cat([memory, x], dim=1)[0]
    q, k, val = attn.qkv(keys_in).chunk(3, dim=-1)
    expected = []
    for i in range(4):
        qi = q[3 + i].view(n_heads, d_head)
        heads = []
        for h in range(n_heads):
            scores = []
            for j in range(3 + i + 1):
                r = attn.r_net(_sinusoid(3 + i - j, d_model)).view(n_heads, d_head)[h]
                kj = k[j].view(n_heads, d_head)[h]
                scores.append(((qi[h] + u[h]) @ kj + (qi[h] + v[h]) @ r) / d_head**0.5)
            weights = torch.softmax(torch.stack(scores), dim=0)
            heads.append(sum(w * val[j].view(n_heads, d_head)[h] for j, w in enumerate(weights)))
        expected.append(attn.out(torch.cat(heads)))
    assert torch.allclose(out[0], torch.stack(expected), atol=1e-5)
    assert torch.equal(new_memory, torch.cat([memory, x], dim=1)[:, -3:])


def test_without_position_terms_scores_are_content_alone():
    """Transformer-XL's block with the positions left to the caller (CRT's positional RNN under
    compat=reference): softmax over ``q·k / sqrt(d_head)`` of the visible keys, no ``r_net``, u or v."""
    torch.manual_seed(0)
    d_model, n_heads, d_head = 8, 2, 4
    attn = RelativeAttention(d_model, n_heads, d_head, mem_len=3, r_w_bias=None, r_r_bias=None).eval()
    assert not hasattr(attn, "r_net") and sum(p.numel() for p in attn.parameters()) == 4 * d_model * d_model
    memory, x = torch.randn(1, 3, d_model), torch.randn(1, 4, d_model)
    out, _ = attn(x, memory)
    q, k, val = attn.qkv(torch.cat([memory, x], dim=1)[0]).chunk(3, dim=-1)
    expected = []
    for i in range(4):
        heads = []
        for h in range(n_heads):
            head = slice(h * d_head, (h + 1) * d_head)
            scores = torch.stack([q[3 + i, head] @ k[j, head] / d_head**0.5 for j in range(3 + i + 1)])
            heads.append(sum(w * val[j, head] for j, w in enumerate(torch.softmax(scores, dim=0))))
        expected.append(attn.out(torch.cat(heads)))
    assert torch.allclose(out[0], torch.stack(expected), atol=1e-5)


def test_memory_changes_outputs_and_is_detached():
    model = _model(mem_len=4)
    x1 = torch.randn(1, 4, 16, requires_grad=True)
    x2 = torch.randn(1, 4, 16)
    _, state = model(x1)
    with_memory, _ = model(x2, state)
    without, _ = model(x2)
    assert not torch.allclose(with_memory, without, atol=1e-3)
    assert all(not m.requires_grad for m in state)


def test_step_past_the_memory_reads_exactly_n_layers_times_mem_len_tokens():
    """What step guarantees once the memory slides (test_backbone_contract holds it to ``forward``
    within ``mem_len + 1`` tokens): layer l at t reads layer l's inputs at t - mem_len .. t, so the
    output at t depends on x_s exactly when t - s <= n_layers * mem_len (the receptive field that
    grows with depth, Dai et al. 2019 §3.2), and the memory stays ``mem_len`` long."""
    mem_len, n_layers = 3, 2
    model = _model(mem_len=mem_len, n_layers=n_layers).double()
    x = torch.randn(2, n_layers * mem_len + 4, 16, dtype=torch.float64)
    perturbed = x.clone()
    perturbed[:, 0] += 1.0
    outputs = []
    with torch.no_grad():
        for tokens in (x, perturbed):
            state, steps = model.init_state(2, dtype=torch.float64), []
            for x_t in tokens.unbind(1):
                y_t, state = model.step(x_t, state)
                steps.append(y_t)
            outputs.append(torch.stack(steps, dim=1))
            assert all(m.shape == (2, mem_len, 16) for m in state)
    reach = n_layers * mem_len
    for t in range(x.shape[1]):
        assert torch.equal(outputs[0][:, t], outputs[1][:, t]) == (t > reach), t


@pytest.mark.parametrize("shared", [True, False], ids=["shared", "per_layer"])
def test_one_positional_dropout_mask_serves_every_layer(shared: bool) -> None:
    """Transformer-XL's ``_forward`` applies ``pos_emb = self.drop(pos_emb)`` once, before its layers,
    and hands every layer that tensor: with dropout, each layer's r_net reads the same dropped
    encodings (``shared_position_dropout``, the class's default); ``False`` draws a mask per layer.
    The encodings are those of the distances over memory + segment, kept entries scaled by 1 / (1 - p),
    in ``forward`` and in a training-mode ``step`` alike."""
    torch.manual_seed(0)
    model = TransformerXL(16, 2, 3, 32, mem_len=4, dropout=0.5, shared_position_dropout=shared).train()
    seen: list[torch.Tensor] = []
    for block in model.blocks:
        block.mixer.r_net.register_forward_hook(lambda _module, inputs, _out: seen.append(inputs[0]))
    _, state = model(torch.randn(2, 4, 16))  # fills the memory: 4 tokens
    runs = {7: lambda: model(torch.randn(2, 3, 16), state), 5: lambda: model.step(torch.randn(2, 16), state)}
    for n_keys, run in runs.items():  # 4 in memory + this call's tokens
        seen.clear()
        run()
        encodings = torch.stack([_sinusoid(distance, 16) for distance in range(n_keys - 1, -1, -1)])
        assert len(seen) == 3 and all(layer_input.shape == (n_keys, 16) for layer_input in seen)
        for layer_input in seen:
            assert torch.allclose(layer_input[layer_input != 0], 2 * encodings[layer_input != 0])
            assert (layer_input == 0).sum() > (encodings == 0).sum()  # dropout did drop
        assert all(torch.equal(layer_input, seen[0]) for layer_input in seen) is shared


def test_relative_sinusoids_are_the_distances_n_minus_one_down_to_zero_clamped() -> None:
    """Row i encodes distance ``n - 1 - i`` (sin half, cos half); ``clamp_len`` caps the distance."""
    table = relative_sinusoids(5, 8, None, torch.device("cpu"))
    torch.testing.assert_close(table, torch.stack([_sinusoid(d, 8) for d in (4, 3, 2, 1, 0)]))
    clamped = relative_sinusoids(5, 8, 2, torch.device("cpu"))
    torch.testing.assert_close(clamped, torch.stack([_sinusoid(d, 8) for d in (2, 2, 2, 1, 0)]))


def test_the_layers_are_transformer_xls_without_biases_and_its_position_biases_drawn_n_0_002() -> None:
    """Transformer-XL's code: ``qkv_net``, ``r_net`` and ``o_net`` without biases, ``r_w_bias`` and
    ``r_r_bias`` shared by the layers and drawn N(0, 0.02^2) (its ``init_std``; 512 draws each, the
    sample std within 10 %); a post-norm stack with no norm after it."""
    torch.manual_seed(0)
    model = TransformerXL(d_model=64, n_heads=8, n_layers=2, d_ff=32)
    for block in model.blocks:
        mixer = block.mixer
        assert [(name, p.shape) for name, p in mixer.named_parameters()] == [
            ("r_w_bias", (8, 8)),
            ("r_r_bias", (8, 8)),
            ("qkv.weight", (192, 64)),
            ("r_net.weight", (64, 64)),
            ("out.weight", (64, 64)),
        ]
        assert mixer.r_w_bias is model.blocks[0].mixer.r_w_bias
    big = TransformerXL(d_model=512, n_heads=8, n_layers=1, d_ff=32).blocks[0].mixer
    for bias in (big.r_w_bias, big.r_r_bias):
        assert abs(bias.std().item() / 0.02 - 1) < 0.1
    assert not model.blocks[0].norm_first and isinstance(model.norm, torch.nn.Identity)


@pytest.mark.parametrize(
    ("norm_first", "final_norm", "normed"),
    [(False, None, False), (True, None, True), (False, True, True), (True, False, False)],
)
def test_a_norm_after_the_stack_only_for_pre_norm_blocks_unless_told(
    norm_first: bool, final_norm: bool | None, normed: bool
) -> None:
    model = TransformerXL(16, 2, 1, 32, norm_first=norm_first, final_norm=final_norm)
    assert isinstance(model.norm, torch.nn.LayerNorm) is normed


@pytest.mark.parametrize("mem_len", [None, 1])
def test_the_memory_keeps_the_last_mem_len_inputs_and_none_by_default(mem_len: int | None) -> None:
    """``mem_len=0`` (the default): every segment alone, each layer's memory empty (B, 0, d_model);
    ``mem_len=1``: the segment's last token, the first layer's being the input's."""
    options = {} if mem_len is None else {"mem_len": mem_len}
    model = TransformerXL(16, 2, 2, 32, dropout=0.0, **options).eval()
    x = torch.randn(2, 5, 16)
    _, state = model(x)
    kept = mem_len or 0
    assert model.mem_len == kept and [m.shape for m in state] == [(2, kept, 16), (2, kept, 16)]
    torch.testing.assert_close(state[0], x[:, 5 - kept :])


def test_a_segment_and_a_memory_longer_than_d_model_in_a_one_layer_stack() -> None:
    """Distances up to memory + segment - 1 (here 23, over d_model = 8): the shared table covers them
    all, and carrying a state in a one-layer stack reads that layer's memory."""
    torch.manual_seed(0)
    model = TransformerXL(8, 2, 1, 16, mem_len=12, dropout=0.0).double().eval()
    x = torch.randn(2, 24, 8, dtype=torch.float64)
    whole, _ = model(x)
    _, state = model(x[:, :12])
    rest, _ = model(x[:, 12:], state)
    torch.testing.assert_close(rest, whole[:, 12:])


def test_step_is_forward_on_one_token_with_its_reinjection() -> None:
    """The stack's and a layer's ``step`` (B, d_model) -> (B, d_model): forward on a one-token segment
    of a batch of two, the reinjected tensor at that token too; the empty state in the model's dtype."""
    torch.manual_seed(0)
    model = TransformerXL(8, 2, 2, 16, mem_len=4, dropout=0.0).double().eval()
    x, reinject = torch.randn(2, 3, 8, dtype=torch.float64), torch.randn(2, 3, 8, dtype=torch.float64)
    state = model.init_state(2)
    assert [(m.shape, m.dtype) for m in state] == [((2, 0, 8), torch.float64)] * 2
    expected, _ = model(x, model.init_state(2), reinject)
    for t in range(3):
        y_t, state = model.step(x[:, t], state, reinject[:, t])
        torch.testing.assert_close(y_t, expected[:, t])
    layer = model.blocks[0].mixer
    memory = torch.randn(2, 2, 8, dtype=torch.float64)
    out, new_memory = layer.step(x[:, 0], memory)
    whole, whole_memory = layer(x[:, :1], memory)
    torch.testing.assert_close(out, whole[:, 0])
    torch.testing.assert_close(new_memory, whole_memory)
    assert layer.init_state(2).dtype == torch.float64


def _defaults(cls: type) -> dict[str, object]:
    parameters = inspect.signature(cls.__init__).parameters.values()
    return {p.name: p.default for p in parameters if p.default is not inspect.Parameter.empty}


def test_the_defaults_are_the_documented_original() -> None:
    """The module docstring's defaults: no memory, post-norm ReLU blocks, no q/k/v biases, the final
    norm by the blocks' placement, relative positions with one dropout mask for all layers, no
    attention dropout; the layer's options default to the stack's."""
    stack = _defaults(TransformerXL)
    assert stack == {
        "mem_len": 0,
        "dropout": 0.1,
        "attn_dropout": 0.0,
        "activation": "relu",
        "norm_first": False,
        "d_head": None,
        "clamp_len": None,
        "final_norm": None,
        "qkv_bias": False,
        "norm_eps": 1e-5,
        "relative_positions": True,
        "shared_position_dropout": True,
    }
    assert _defaults(RelativeAttention) == {
        k: stack[k] for k in ("dropout", "attn_dropout", "clamp_len", "qkv_bias")
    }

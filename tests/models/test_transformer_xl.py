"""Transformer-XL: relative attention against a naive loop; memory equals processing the concatenation."""

from __future__ import annotations

import torch

from recurrent_attention.models.transformer_xl import RelativeAttention, TransformerXL, rel_shift


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


def test_memory_across_two_segments_equals_the_concatenation():
    model = _model(mem_len=8)
    x1, x2 = torch.randn(2, 6, 16), torch.randn(2, 5, 16)
    y1, state = model(x1)
    y2, state = model(x2, state)
    together, _ = model(torch.cat([x1, x2], dim=1))
    assert torch.allclose(y1, together[:, :6], atol=1e-5)
    assert torch.allclose(y2, together[:, 6:], atol=1e-5)
    assert all(m.shape == (2, 8, 16) for m in state)  # capped at mem_len


def test_memory_changes_outputs_and_is_detached():
    model = _model(mem_len=4)
    x1 = torch.randn(1, 4, 16, requires_grad=True)
    x2 = torch.randn(1, 4, 16)
    _, state = model(x1)
    with_memory, _ = model(x2, state)
    without, _ = model(x2)
    assert not torch.allclose(with_memory, without, atol=1e-3)
    assert all(not m.requires_grad for m in state)


def test_causal_and_step_equals_forward_within_mem_len():
    model = _model(mem_len=10)
    x = torch.randn(2, 7, 16)
    y, _ = model(x)
    x_changed = x.clone()
    x_changed[:, 4] += 1.0
    y_changed, _ = model(x_changed)
    assert torch.equal(y[:, :4], y_changed[:, :4])
    assert not torch.allclose(y[:, 4:], y_changed[:, 4:])
    state = model.init_state(2)
    for t in range(7):
        y_t, state = model.step(x[:, t], state)
        assert torch.allclose(y_t, y[:, t], atol=1e-5)

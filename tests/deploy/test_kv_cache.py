"""The Transformer's deployed step keeps a real KV cache: written in place, doubled when full, safe
to branch."""

from __future__ import annotations

import torch

from recurrent_attention.deploy import LeanStepper
from recurrent_attention.deploy.kv_cache import with_capacity
from recurrent_attention.models import Transformer
from recurrent_attention.models.transformer import KVCache

D_MODEL, HEADS = 16, 4


def model() -> LeanStepper:
    torch.manual_seed(0)
    return LeanStepper(Transformer(D_MODEL, HEADS, 2, 32, dropout=0.0).double().eval())


def run(m: LeanStepper, tokens: torch.Tensor, state: list[KVCache]) -> tuple[torch.Tensor, list[KVCache]]:
    outputs = []
    with torch.no_grad():
        for x_t in tokens:
            y, state = m.step(x_t, state)
            outputs.append(y)
    return torch.stack(outputs), state


def test_cache_is_written_in_place_and_doubles_when_full() -> None:
    m = model()
    tokens = torch.randn(40, 2, D_MODEL, dtype=torch.float64)
    state = m.init_state(2, dtype=torch.float64)
    capacities, moves = [], 0
    with torch.no_grad():
        for x_t in tokens:
            before = state[0].k
            _, state = m.step(x_t, state)
            moves += state[0].k.data_ptr() != before.data_ptr()
            capacities.append(state[0].k.shape[-2])
    assert state[0].size == 40
    assert sorted(set(capacities)) == [16, 32, 64]
    assert moves == 3  # the empty state, then full at 16 and at 32: every other token in place


def test_branching_from_one_state_leaves_both_branches_intact() -> None:
    """Two continuations of one prefix: running branch b must not overwrite the tokens that branch
    a's state still reads (both wrote after the same 5 tokens of one buffer)."""
    m = model()
    prefix, a, b, later = (torch.randn(n, 2, D_MODEL, dtype=torch.float64) for n in (5, 4, 4, 3))
    _, shared = run(m, prefix, m.init_state(2, dtype=torch.float64))
    _, state_a = run(m, a, shared)
    out_b, _ = run(m, b, shared)
    out_a_later, _ = run(m, later, state_a)
    _, fresh = run(m, prefix, m.init_state(2, dtype=torch.float64))
    torch.testing.assert_close(run(m, b, fresh)[0], out_b, rtol=0, atol=0)
    _, fresh_a = run(m, a, run(m, prefix, m.init_state(2, dtype=torch.float64))[1])
    torch.testing.assert_close(run(m, later, fresh_a)[0], out_a_later, rtol=0, atol=0)


def test_with_capacity_holds_the_given_tokens() -> None:
    k, v = torch.randn(2, 2, 3, 5, 4).unbind(0)
    cache = with_capacity(k, v, 8)
    assert cache.k.shape == (2, 3, 8, 4) and cache.size == 5
    torch.testing.assert_close(cache.tokens(), (k, v), rtol=0, atol=0)

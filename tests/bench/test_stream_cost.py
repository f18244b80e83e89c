"""Figure 5's streams: read at powers of two, time accumulating, a KV cache growing, Aaren's state not."""

from __future__ import annotations

import torch

from recurrent_attention.bench.stream_cost import StreamRunner, checkpoints, stream_costs
from recurrent_attention.models import Aaren, Transformer


def test_checkpoints_are_powers_of_two_and_the_end() -> None:
    assert checkpoints(16) == [1, 2, 4, 8, 16]
    assert checkpoints(20) == [1, 2, 4, 8, 16, 20]


def test_stream_costs_follow_each_state_as_it_grows() -> None:
    torch.manual_seed(0)
    models = {
        "transformer": Transformer(16, 4, 2, 32, dropout=0.0),
        "aaren": Aaren(16, 4, 2, 32, dropout=0.0),
    }
    runners = {name: StreamRunner(m.eval().step, m.init_state(2)) for name, m in models.items()}
    rows = stream_costs(runners, list(torch.randn(40, 2, 16)))
    by_model = {name: [r for r in rows if r.model == name] for name in models}
    for name, series in by_model.items():
        assert [r.n for r in series] == [1, 2, 4, 8, 16, 32, 40], name
        seconds = [r.seconds for r in series]
        assert seconds == sorted(seconds) and seconds[0] > 0
    aaren_bytes = {r.state_bytes for r in by_model["aaren"]}
    assert len(aaren_bytes) == 1  # (m, u, w): constant whatever N
    kv = 2 * 2 * 2 * 16 * 4  # layers x (k, v) x batch x d_model x fp32 bytes, per cached slot
    # The lean cache allocates 16 slots, then doubles: 16, 16, 16, 16, 16, 32, 64 slots.
    assert [r.state_bytes for r in by_model["transformer"]] == [kv * s for s in (16, 16, 16, 16, 16, 32, 64)]

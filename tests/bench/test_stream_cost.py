"""Figure 5's streams: read at powers of two, time accumulating, a KV cache growing, Aaren's state
not, and the resident memory each stream takes measured where it is taken."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from recurrent_attention.bench.stream_cost import StreamSpec, checkpoints, stream_costs
from recurrent_attention.models import Aaren, Transformer


def test_checkpoints_are_powers_of_two_and_the_end() -> None:
    assert checkpoints(16) == [1, 2, 4, 8, 16]
    assert checkpoints(20) == [1, 2, 4, 8, 16, 20]


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="resident memory is read on Linux")
def test_stream_costs_follow_each_state_and_the_memory_it_takes() -> None:
    """2048 tokens of d_model 256 (the Transformer's cache: 8 MiB, 12 MiB while it doubles the
    last time), after this process has allocated and freed more than that: memory a stream run
    here would reuse without growing, which each stream's fresh process does not inherit."""
    torch.manual_seed(0)
    arguments = {"d_model": 256, "n_heads": 4, "n_layers": 2, "d_ff": 256, "dropout": 0.0}
    models = {"transformer": Transformer(**arguments), "aaren": Aaren(**arguments)}
    earlier_work = [torch.ones(2**16) for _ in range(256)] + [torch.ones(2**23)]  # 64 MiB + 32 MiB
    del earlier_work
    specs = {name: StreamSpec.of(model, arguments) for name, model in models.items()}
    rows = stream_costs(specs, torch.randn(2048, 1, 256))
    by_model = {name: [r for r in rows if r.model == name] for name in models}
    for name, series in by_model.items():
        assert [r.n for r in series] == checkpoints(2048), name
        seconds = [r.seconds for r in series]
        assert seconds == sorted(seconds) and seconds[0] > 0
    aaren, transformer = by_model["aaren"], by_model["transformer"]
    assert {r.state_bytes for r in aaren} == {2 * (4 + 4 + 256) * 4}  # (m, u, w) per layer, whatever N
    slot = 2 * 2 * 256 * 4  # layers x (k, v) x d_model x fp32 bytes
    # The lean cache allocates 16 slots, then doubles when full.
    assert [r.state_bytes for r in transformer] == [slot * max(16, r.n) for r in transformer]
    assert transformer[-1].peak_bytes >= transformer[-1].state_bytes == 8 * 2**20
    assert aaren[-1].peak_bytes < 2**20

"""A training step of Aaren and linear attention makes no host-device sync (issue 64).

On a GPU every sync stalls the queue; :mod:`tests.helpers.host_sync` records them on the CPU too.
Aaren's chunked path chooses a kernel by reading the scores on the CPU only, where that read is a
memory access; the test runs it as it runs off the CPU, which is what must read nothing.
"""

from __future__ import annotations

import importlib

import pytest
import torch

from tests.helpers.backbones import build_backbone
from tests.helpers.host_sync import record_host_syncs
from tests.ops.kernels import use_cumulative_kernel

prefix_attention_module = importlib.import_module("recurrent_attention.ops.prefix_attention")


@pytest.mark.parametrize("name", ["aaren", "linear_attention"])
def test_training_step_makes_no_host_sync(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prefix_attention_module, "reads_are_free", lambda _device: False)
    use_cumulative_kernel(False, monkeypatch)  # a GPU has no C++ kernel
    model = build_backbone(name).train()
    x = torch.randn(2, 70, model.d_model, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    with record_host_syncs() as syncs:
        y, _ = model(x)
        y.square().sum().backward()
    assert not syncs.found, syncs.summary()
    assert all(p.grad is not None for p in model.parameters())

"""No sequence backbone makes a GPU wait for the host in a training step (issue 64).

A training step's forward and backward are recorded (``tests/helpers/host_sync.py``: every op that
reads a value back or sizes an output by the data) after an optimiser step has changed the
weights, so that what runs only after a change (NCGRU's refresh of its stored inverse) is
recorded too. The step runs as it runs on a GPU: without the C++ kernels (whose reads a dispatch
mode cannot see) and with Aaren's chunked path choosing its kernel as off the CPU (on the CPU it
reads the scores, where a read is a memory access). 70 tokens cross Aaren's dense chunks (64, then
32), CRT's segments and Transformer-XL's memory at the test sizes. Each backbone is built from its
``conf/model`` config, so a new one is held to this without editing the test.
"""

from __future__ import annotations

import pytest
import torch

from recurrent_attention.ops import host_reads, native
from tests.helpers.backbones import D_MODEL, build_backbone, sequence_backbones
from tests.helpers.host_sync import record_host_syncs

N_TOKENS = 70


def _loss(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    y, _ = model(x)
    return y.square().mean()


@pytest.mark.parametrize("name", sequence_backbones())
def test_a_training_step_after_an_optimizer_step_reads_nothing_back(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(native, "extension", lambda: None)  # a GPU has no C++ kernel
    monkeypatch.setattr(host_reads, "HOST_READ_DEVICES", frozenset())
    model = build_backbone(name).float().train()
    x = torch.randn(2, N_TOKENS, D_MODEL, generator=torch.Generator().manual_seed(0))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    _loss(model, x).backward()
    optimizer.step()  # the weights change in place, as in training
    optimizer.zero_grad()
    with record_host_syncs() as syncs:
        _loss(model, x).backward()
    assert not syncs.found, f"{name}: host-device syncs in a training step:\n{syncs.summary()}"
    assert all(p.grad is not None for p in model.parameters()), f"{name}: a parameter got no gradient"

"""No sequence backbone makes a GPU wait for the host in a training step (issue 64).

A training step's forward and backward are recorded (``tests/helpers/host_sync.py``: every op that
reads a value back or sizes an output by the data) after an optimiser step has changed the
weights, so that what runs only after a change (NCGRU's refresh of its stored inverse) is
recorded too. Each backbone is built from its ``conf/model`` config, so a new one is held to this
without editing the test.
"""

from __future__ import annotations

import pytest
import torch

from tests.helpers.backbones import D_MODEL, build_backbone, sequence_backbones
from tests.helpers.host_sync import record_host_syncs

# Crosses CRT's segment (seg_len 4) and Transformer-XL's memory (mem_len 4) at the test sizes.
N_TOKENS = 6


def _loss(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    y, _ = model(x)
    return y.square().mean()


@pytest.mark.parametrize("name", sequence_backbones())
def test_a_training_step_after_an_optimizer_step_reads_nothing_back(name: str) -> None:
    model = build_backbone(name).float().train()
    x = torch.randn(2, N_TOKENS, D_MODEL)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    _loss(model, x).backward()
    optimizer.step()  # the weights change in place, as in training
    optimizer.zero_grad()
    with record_host_syncs() as syncs:
        _loss(model, x).backward()
    assert not syncs.found, f"{name}: host-device syncs in a training step:\n{syncs.summary()}"

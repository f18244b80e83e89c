"""The host-sync recorder (tests/helpers/host_sync.py) sees every kind of sync it promises, and
nothing in sync-free code: a detector that misses them would let every sync-free test pass."""

from __future__ import annotations

import pytest
import torch

from tests.helpers.host_sync import record_host_syncs

SYNCING = {
    "item": lambda x: x.sum().item(),
    "bool": lambda x: bool(x.sum() > 0),
    "if": lambda x: 1 if (x > 0).any() else 0,
    "tolist": lambda x: x.tolist(),
    "numpy": lambda x: x.detach().numpy(),
    "cpu": lambda x: x.cpu(),
    "nonzero": lambda x: torch.nonzero(x),
    "bool index": lambda x: x[x > 0],
    "masked_select": lambda x: torch.masked_select(x, x > 0),
    "masked_scatter": lambda x: x.masked_scatter(x > 0, torch.zeros(8)),
    "int": lambda x: int(x.sum()),
}


@pytest.mark.parametrize("name", sorted(SYNCING))
def test_each_kind_of_sync_is_recorded(name: str) -> None:
    x = torch.randn(8)
    with record_host_syncs() as syncs:
        SYNCING[name](x)
    assert syncs.found, f"{name} was not recorded"
    assert "test_host_sync_detector.py" in syncs.found[0].where


def test_sync_free_code_records_nothing_forward_and_backward() -> None:
    x = torch.randn(4, 8, requires_grad=True)
    mask = torch.rand(4, 8) > 0.5
    with record_host_syncs() as syncs:
        loss = (torch.where(mask, x.square(), 0).sum() / mask.sum().clamp_min(1)) + x[:, 1:3].sum()
        loss.backward()
    assert syncs.found == [], syncs.summary()

"""The shuffled order of an epoch depends on (seed, epoch) only, not on what ran before."""

from __future__ import annotations

import torch

from recurrent_attention.runs.resume import EpochShuffle


def order(seed: int, epoch: int, monkeypatch, noise: int = 0) -> list[int]:
    monkeypatch.setenv("PL_GLOBAL_SEED", str(seed))
    torch.rand(noise)  # draws from the global generator must not matter
    sampler = EpochShuffle(range(50))
    sampler.set_epoch(epoch)
    return list(sampler)


def test_order_is_a_permutation_fixed_by_seed_and_epoch(monkeypatch) -> None:
    first = order(1, 3, monkeypatch)
    assert sorted(first) == list(range(50))
    assert order(1, 3, monkeypatch, noise=7) == first
    assert order(1, 4, monkeypatch) != first and order(2, 3, monkeypatch) != first

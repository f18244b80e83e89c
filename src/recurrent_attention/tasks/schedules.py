"""Learning-rate schedules that reproduce reference code epoch by epoch.

Time-Series-Library (TSLib) calls ``adjust_learning_rate(optimizer, e, args)`` after the e-th
epoch (1-based) and, with ``lradj=type1``, *sets* the rate to ``lr0 * 0.5 ** (e - 1)``. The first
call (e = 1) therefore leaves ``lr0`` in place: forecasting trains epochs 1-4 with
``lr0, lr0, lr0/2, lr0/4`` (one halving fewer than ``ExponentialLR(gamma=0.5)``). Paper-era
classification (TSLib @a23cfce, before July 2024) makes the call only after every fifth epoch, so
epochs 1-5 keep ``lr0``, 6-10 train with ``lr0 * 0.5**4`` and 11-15 with ``lr0 * 0.5**9``.
"""

from __future__ import annotations

from functools import partial

import torch
from torch.optim.lr_scheduler import LambdaLR


def tslib_type1_factor(epoch: int, every: int = 1) -> float:
    """Multiplier of the initial rate during the 0-based ``epoch`` under TSLib's ``type1``.

    The rate in force is the one set at the end of the last epoch ``e`` (1-based) before this one
    with ``e % every == 0``; before any such call it is the initial rate.
    """
    if every < 1:
        raise ValueError(f"every={every}: TSLib adjusts the learning rate after every N >= 1 epochs")
    last_call = every * (epoch // every)
    return 1.0 if last_call == 0 else 0.5 ** (last_call - 1)


def tslib_type1(optimizer: torch.optim.Optimizer, every: int = 1) -> LambdaLR:
    """TSLib's ``lradj=type1`` as an epoch-interval scheduler (``every``: epochs between calls)."""
    return LambdaLR(optimizer, partial(tslib_type1_factor, every=every))

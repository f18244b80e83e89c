"""A padded batch cut into pieces of similar length, so that a CPU does not compute the padding.

A batch is padded to its longest sequence. Wikipedia's edit sequences run from 84 to 1936 events
(median 119): a batch of 16 is about three times its real events once padded, and the attention of
the padding grows with its square. Every quantity the EF task takes from a batch is a sum over its
sequences (:mod:`.likelihood`, :mod:`.metrics`), and every backbone is causal, so scoring the
sequences in any grouping, each group padded only to its own longest, gives the same loss, gradients
and metrics. The batch (the shuffle's sequences, Meta TPP's batch of 16) is unchanged; only the
work is regrouped. Each piece costs a fixed overhead (the kernels' dispatch) plus its padded events;
:func:`length_groups` finds the cheapest grouping of the sorted lengths. Tests hold the pieces'
loss, gradients and metrics to the whole batch's.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from recurrent_attention.ops.host_reads import reads_are_free

PIECE_OVERHEAD_EVENTS = 256
"""The fixed cost of one more piece, in padded events (its kernels' dispatch). On Wiki, 64, 256 and
1024 measured alike; at 256 a Sin batch (73 to 132 events) stays whole nearly always."""


def length_groups(lengths: Sequence[int], overhead: float = PIECE_OVERHEAD_EVENTS) -> list[list[int]]:
    """Rows grouped to minimise ``sum(overhead + rows * longest)`` over groups; each group is a run of
    rows in order of length (an optimal grouping always is), shortest first."""
    order = sorted(range(len(lengths)), key=lambda row: lengths[row])
    sorted_lengths = [lengths[row] for row in order]
    best = [0.0] + [float("inf")] * len(order)
    cut = [0] * (len(order) + 1)
    for end in range(1, len(order) + 1):
        for start in range(end):
            cost = best[start] + overhead + (end - start) * sorted_lengths[end - 1]
            if cost < best[end]:
                best[end], cut[end] = cost, start
    groups, end = [], len(order)
    while end:
        groups.append(order[cut[end] : end])
        end = cut[end]
    return groups[::-1]


def split_by_length(
    batch: dict[str, Tensor], overhead: float = PIECE_OVERHEAD_EVENTS
) -> list[dict[str, Tensor]]:
    """The batch as pieces of :func:`length_groups`, each trimmed to its longest sequence; a batch
    off the CPU stays whole (:func:`~recurrent_attention.ops.host_reads.reads_are_free`: reading its
    lengths would stall the device, and
    one large kernel suits an accelerator better than several small ones)."""
    lengths = batch["lengths"]
    if not reads_are_free(lengths.device):
        return [batch]
    as_list = lengths.tolist()
    groups = length_groups(as_list, overhead)
    if len(groups) == 1:
        return [batch]
    pieces = []
    for group in groups:
        rows, longest = torch.tensor(group), as_list[group[-1]]  # a group runs shortest to longest
        pieces.append({key: _rows(value, rows, longest) for key, value in batch.items()})
    return pieces


def _rows(value: Tensor, rows: Tensor, longest: int) -> Tensor:
    """Those rows of a ``(B,)`` or ``(B, N)`` batch entry, the latter cut to ``longest`` columns."""
    return value[rows, :longest] if value.dim() == 2 else value[rows]

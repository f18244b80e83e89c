"""Where reading a tensor's values on the host is free: the one rule every data-dependent shortcut asks.

Some code is faster when it looks at its data first: Aaren's chunked path picks its kernel by
reading the scores (:mod:`.prefix_attention`), the EF task skips a batch's padding by reading its
lengths and mask (``tasks/ef``). On the CPU such a read is a memory access. On an accelerator it
makes the host wait for the device's queue (a host-device sync) every training step, so there the
same code takes its data-independent form: the same results, nothing read back. Tests run that form
on the CPU by emptying :data:`HOST_READ_DEVICES`.
"""

from __future__ import annotations

import torch

HOST_READ_DEVICES = frozenset({"cpu"})
"""Device types whose tensors the host reads without waiting for a device."""


def reads_are_free(device: torch.device) -> bool:
    """Whether code may branch on, or size its outputs by, the values of a tensor on ``device``."""
    return device.type in HOST_READ_DEVICES

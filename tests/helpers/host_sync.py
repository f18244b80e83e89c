"""Record the operations that make a GPU wait for the host (a host-device sync), on any device.

On a GPU these stall the queue: reading a value (``item()``, ``bool(t)``, ``tolist()``,
``numpy()``, ``cpu()``), and every op whose output size depends on the data (``nonzero``,
boolean-mask indexing, ``masked_select``, ``masked_scatter``, ``unique``...). On the CPU they cost
nothing, so nothing there shows them; this records them wherever the tensors live, so the CPU
suite can hold a training step to having none.

Two modes see them: a ``TorchDispatchMode`` sees the aten ops (below autograd, so the backward
too), a ``TorchFunctionMode`` the Python-level reads that never reach aten on the CPU
(``Tensor.numpy``, ``Tensor.tolist``, ``Tensor.cpu``). Each record names the innermost frame of
the caller's code (not torch's); syncs made by Lightning itself (its logging and progress bar)
are kept apart in ``allowed``, since the project cannot change them.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

# aten ops that read a device value back to the host, or whose output shape depends on the data.
SYNC_OPS = {
    "aten::_local_scalar_dense",
    "aten::nonzero",
    "aten::nonzero_static",
    "aten::masked_select",
    "aten::masked_scatter",
    "aten::masked_scatter_",
    "aten::_unique2",
    "aten::unique_consecutive",
    "aten::unique_dim",
    "aten::repeat_interleave",
    "aten::item",
    "aten::is_nonzero",
    "aten::equal",
}
INDEX_OPS = {"aten::index", "aten::index_put", "aten::index_put_", "aten::_index_put_impl_"}
# Python-level reads of a tensor's value that need no aten op on the CPU.
HOST_READS = {"numpy", "tolist", "cpu", "item", "__bool__", "__int__", "__float__", "__index__"}

_TORCH_DIR = str(Path(torch.__file__).resolve().parent)
_HERE = str(Path(__file__).resolve())
_LIGHTNING = ("/lightning/", "/pytorch_lightning/", "/lightning_fabric/", "/torchmetrics/")


@dataclass
class SyncRecord:
    op: str
    where: str  # "file:line in function" of the innermost caller frame outside torch


@dataclass
class HostSyncs:
    """What one recording saw: ``found`` (the code's own syncs) and ``allowed`` (Lightning's)."""

    found: list[SyncRecord] = field(default_factory=list)
    allowed: list[SyncRecord] = field(default_factory=list)

    def add(self, op: str) -> None:
        frame = _caller_frame()
        where = f"{frame.filename}:{frame.lineno} in {frame.name}" if frame else "?"
        from_lightning = frame is not None and any(part in frame.filename for part in _LIGHTNING)
        (self.allowed if from_lightning else self.found).append(SyncRecord(op, where))

    def summary(self) -> str:
        return "\n".join(f"{r.op} at {r.where}" for r in self.found) or "none"


def _caller_frame() -> traceback.FrameSummary | None:
    """The innermost frame that is neither torch's nor this module's."""
    for frame in reversed(traceback.extract_stack()):
        path = frame.filename
        if path == _HERE or path.startswith(_TORCH_DIR) or "/torch/" in path or "contextlib" in path:
            continue
        return frame
    return None


def _is_bool_index(func_name: str, args: tuple) -> bool:
    if func_name not in INDEX_OPS or len(args) < 2:
        return False
    indices = args[1]
    masks = (torch.bool, torch.uint8)
    return any(isinstance(i, torch.Tensor) and i.dtype in masks for i in (indices or ()))


class _DispatchRecorder(TorchDispatchMode):
    def __init__(self, record: HostSyncs) -> None:
        super().__init__()
        self.record = record

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._schema.name
        if name in SYNC_OPS or _is_bool_index(name, args):
            self.record.add(name)
        return func(*args, **(kwargs or {}))


class _FunctionRecorder(TorchFunctionMode):
    def __init__(self, record: HostSyncs) -> None:
        super().__init__()
        self.record = record

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in HOST_READS and args and isinstance(args[0], torch.Tensor):
            self.record.add(f"Tensor.{name}")
        return func(*args, **(kwargs or {}))


class record_host_syncs:  # noqa: N801 - used as a context manager, like torch's modes
    """``with record_host_syncs() as syncs: ...`` then ``syncs.found`` lists the code's syncs."""

    def __enter__(self) -> HostSyncs:
        self.record = HostSyncs()
        self._dispatch = _DispatchRecorder(self.record)
        self._function = _FunctionRecorder(self.record)
        self._function.__enter__()
        self._dispatch.__enter__()
        return self.record

    def __exit__(self, *exc) -> None:
        self._dispatch.__exit__(*exc)
        self._function.__exit__(*exc)

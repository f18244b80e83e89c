"""CPU and GPU runs never share a table: the same config trained on another device is another result.

A GPU run's ``summary.json`` names its CUDA device (``NVIDIA H100 80GB HBM3 x1``); a CPU run's
begins with ``CPU``. Tables built from GPU runs are named ``<paper>_<family>_gpu_<rest>`` and say
the GPU in their title, beside the CPU tables of the same layout.
"""

from __future__ import annotations

import pandas as pd

from recurrent_attention.results.tables import Table

GPU_TAG = "gpu"


def is_gpu(device: object) -> bool:
    """``device`` names a CUDA device; records without one (older CPU runs) are CPU runs."""
    return isinstance(device, str) and bool(device) and not device.startswith("CPU")


def split_by_hardware(runs: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """{"cpu": runs, "gpu": runs}, leaving out a kind with no run."""
    on_gpu = runs["device"].map(is_gpu) if "device" in runs else pd.Series(False, index=runs.index)
    parts = {"cpu": runs[~on_gpu], GPU_TAG: runs[on_gpu]}
    return {kind: part for kind, part in parts.items() if not part.empty}


def gpu_table(table: Table) -> Table:
    """The same table renamed and titled for the GPU its runs used (``aaren_tsf_gpu_paper_default``)."""
    head, _, rest = table.name.partition("_")
    family, _, tail = rest.partition("_")
    name = "_".join(p for p in (head, family, GPU_TAG, tail) if p)
    runs = table.runs if table.runs is not None else pd.DataFrame()
    devices = sorted({str(d) for d in runs.get("device", pd.Series(dtype=object)).dropna()})
    title = f"{table.title}, on {', '.join(devices) or 'GPU'}"
    return Table(name, title, table.frame, table.notes, table.runs)

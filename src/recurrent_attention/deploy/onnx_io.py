"""Writing a step to ONNX and opening it in onnxruntime (the deploy extra, imported where a session
is opened, so that the package imports without it)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor, nn


def write_onnx(
    step: nn.Module,
    example: tuple[Tensor, ...],
    path: str | Path,
    input_names: Sequence[str],
    output_names: Sequence[str],
    dynamic: dict,
) -> Path:
    """``step`` traced on ``example`` by torch's ``torch.export``-based exporter into ``path``, with
    named inputs and outputs and the ``dynamic`` dimensions left free."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        torch.onnx.export(
            step,
            example,
            str(path),
            input_names=list(input_names),
            output_names=list(output_names),
            dynamic_shapes=dynamic,
            dynamo=True,
            verbose=False,
        )
    return path


def onnx_session(path: str | Path, threads: int, batch: int | None = None) -> object:
    """An onnxruntime CPU session on ``threads`` threads (onnxruntime is the deploy extra, so it is
    imported on use). For a stream of one row (``batch == 1``) two defaults that cost more than
    they save there are off: prepacked weights (a one-row product ran slower from the packed matrix
    than from the plain one) and memory-reuse planning. Measured on both exported steps at d_model
    128, 1 thread: Aaren's 69 -> 62 µs, the Transformer's (1.6k cached tokens) 402 -> 369 µs; at
    batch 64 the two slowed Aaren's step by 8 %, so other batches keep the defaults."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = threads
    if batch == 1:
        options.enable_mem_reuse = False
        options.add_session_config_entry("session.disable_prepacking", "1")
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

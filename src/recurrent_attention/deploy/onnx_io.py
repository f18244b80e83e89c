"""Writing a step to ONNX and opening it in onnxruntime (the deploy extra, imported where a session
is opened, so that the package imports without it)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

import numpy as np
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


Result = TypeVar("Result")
# A denormal float32 and one: their product reads back as zero only where denormals are flushed.
_DENORMAL, _ONE = np.float32(1e-39), np.float32(1.0)


def denormals_flushed() -> bool:
    """Whether this thread flushes denormal floats to zero now (x86's FTZ/DAZ, as
    ``torch.set_flush_denormal(True)`` sets them)."""
    return bool(_DENORMAL * _ONE == 0)


def run_flushing_denormals(run: Callable[[], Result]) -> Result:
    """``run()`` (an onnxruntime session's run) with this thread flushing denormal floats to zero, then
    the thread's flag as it was before the call (read at each call, ~0.2 µs: a stream may be pushed
    from another thread than the one that made it, or after its caller changed the flag).

    A session's kernels can meet denormals in lanes whose results are thrown away (memory the session
    never wrote), and each costs a microcode assist: the same session of Aaren's exported step took
    55-60 µs a token or 85-92 µs, by session, at batch 1 (d_model 128, one thread); flushed, every
    session took 55-60. Only values below ~1.2e-38 change (to zero), far inside the tolerance the
    streams are tested to. onnxruntime's own ``session.set_denormal_as_zero`` option sets the flag on
    the calling thread for good, and with it every later torch and numpy operation there: here it
    holds for the run only. With more than one thread, onnxruntime's pool threads keep their own flag.
    """
    flushed_before = denormals_flushed()
    torch.set_flush_denormal(True)
    try:
        return run()
    finally:
        torch.set_flush_denormal(flushed_before)

"""Aaren's ``step`` as a standalone graph for small devices: the state as explicit inputs and outputs.

A device that streams tokens needs only the step: ``(x_t, m, u, w) -> (y_t, m', u', w')`` with
``m, u (layers, B, heads)`` and ``w (layers, B, heads, d_head)``, a few KiB whatever the number of
tokens seen. :func:`export_onnx` writes that graph as ONNX (torch's ``torch.export``-based exporter,
batch size left dynamic); :class:`OnnxStep` runs it with onnxruntime. The weights are frozen into
the graph in the form the eager no-grad step uses (values and scores from one matrix).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from recurrent_attention.models.aaren import Aaren
from recurrent_attention.ops import ScanState

INPUT_NAMES = ("x_t", "m", "u", "w")
OUTPUT_NAMES = ("y_t", "m_out", "u_out", "w_out")


def pack_state(state: list[ScanState]) -> tuple[Tensor, Tensor, Tensor]:
    """One ``ScanState`` per layer -> stacked ``(m, u, w)``, layers first."""
    return tuple(torch.stack(parts) for parts in zip(*state, strict=True))  # type: ignore[return-value]


def unpack_state(m: Tensor, u: Tensor, w: Tensor) -> list[ScanState]:
    return [ScanState(*parts) for parts in zip(m, u, w, strict=True)]


class ExplicitStateStep(nn.Module):
    """``backbone.step`` with tensors in and out, the form exporters and runtimes take."""

    def __init__(self, backbone: Aaren) -> None:
        super().__init__()
        self.backbone = backbone

    def forward(self, x_t: Tensor, m: Tensor, u: Tensor, w: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        y_t, state = self.backbone.step(x_t, unpack_state(m, u, w))
        return (y_t, *pack_state(state))


def export_onnx(backbone: Aaren, path: str | Path) -> Path:
    """Write the fp32 step of ``backbone`` (in eval mode) to ``path``; the batch size stays free."""
    if not isinstance(backbone, Aaren):
        raise TypeError(
            f"only Aaren's step has a constant-size state to export, not {type(backbone).__name__}"
        )
    step = ExplicitStateStep(backbone.float().eval())
    example = (torch.zeros(2, backbone.d_model), *pack_state(backbone.init_state(2)))
    batch = torch.export.Dim("batch")
    dynamic = {"x_t": {0: batch}, "m": {1: batch}, "u": {1: batch}, "w": {1: batch}}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        torch.onnx.export(
            step,
            example,
            str(path),
            input_names=list(INPUT_NAMES),
            output_names=list(OUTPUT_NAMES),
            dynamic_shapes=dynamic,
            dynamo=True,
            verbose=False,
        )
    return path


class OnnxStep:
    """An exported step in onnxruntime, called like ``backbone.step`` on numpy arrays."""

    def __init__(self, path: str | Path, threads: int = 1) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = threads
        self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    def __call__(
        self, x_t: np.ndarray, state: tuple[np.ndarray, np.ndarray, np.ndarray]
    ) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray]]:
        y_t, m, u, w = self.session.run(
            list(OUTPUT_NAMES), dict(zip(INPUT_NAMES, (x_t, *state), strict=True))
        )
        return y_t, (m, u, w)

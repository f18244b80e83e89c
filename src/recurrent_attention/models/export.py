"""Aaren's ``step`` as a standalone graph for small devices: the state as explicit inputs and outputs.

A device that streams tokens needs only the step: ``(x_t, m, u, w) -> (y_t, m', u', w')`` with
``m, u (layers, B, heads)`` and ``w (layers, B, heads, d_head)``, a few KiB whatever the number of
tokens seen. :func:`export_onnx` writes that graph as ONNX (torch's ``torch.export``-based exporter,
batch size left dynamic); :class:`OnnxStep` runs it with onnxruntime, :class:`OnnxStream` too with
the state kept in onnxruntime's buffers (the fast way to stream). The weights are frozen into
the graph in the form the eager no-grad step uses (values and scores from one matrix).
This module is the model layer's part only: loading a trained run is ``runs.finished``'s, timing
the exported step ``bench.streaming``'s, and the command line ``cli.export_step``'s.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
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
    """Stacked ``(m, u, w)`` -> one ``ScanState`` per layer (the inverse of :func:`pack_state`)."""
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
    step = ExplicitStateStep(copy.deepcopy(backbone).float().eval())
    example = (torch.zeros(2, backbone.d_model), *pack_state(backbone.init_state(2)))
    batch = torch.export.Dim("batch")
    dynamic = {"x_t": {0: batch}, "m": {1: batch}, "u": {1: batch}, "w": {1: batch}}
    return write_onnx(step, example, path, INPUT_NAMES, OUTPUT_NAMES, dynamic)


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


def onnx_session(path: str | Path, threads: int) -> object:
    """An onnxruntime CPU session on ``threads`` threads (onnxruntime is the deploy extra, so it is
    imported only here)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = threads
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


class OnnxStep:
    """An exported step in onnxruntime, called like ``backbone.step`` on numpy arrays."""

    def __init__(self, path: str | Path, threads: int = 1) -> None:
        self.session = onnx_session(path, threads)

    def __call__(
        self, x_t: np.ndarray, state: tuple[np.ndarray, np.ndarray, np.ndarray]
    ) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray]]:
        y_t, m, u, w = self.session.run(
            list(OUTPUT_NAMES), dict(zip(INPUT_NAMES, (x_t, *state), strict=True))
        )
        return y_t, (m, u, w)


class OnnxStream:
    """An exported step that keeps the state inside onnxruntime: ``push(x_t) -> y_t``, token after token.

    :class:`OnnxStep` passes the state through numpy on every token (inputs converted, outputs
    allocated and converted). Here every buffer is allocated once and bound (IO binding): a push
    copies the token in, reads one of two state buffers and writes the other, and the two swap.
    This is the exported step ``make bench`` times (results/bench/bench.md, "Aaren ONNX").
    The batch size is the starting state's.
    """

    def __init__(self, path: str | Path, state: tuple[np.ndarray, ...], threads: int = 1) -> None:
        import onnxruntime as ort

        self.session = onnx_session(path, threads)
        shape = (state[0].shape[1], self.session.get_inputs()[0].shape[1])  # (batch, d_model)
        self._x = ort.OrtValue.ortvalue_from_numpy(np.zeros(shape, np.float32))
        self._y = ort.OrtValue.ortvalue_from_numpy(np.zeros(shape, np.float32))
        self._states = [
            [ort.OrtValue.ortvalue_from_numpy(np.array(part, np.float32)) for part in state] for _ in range(2)
        ]
        self._bindings = [self._binding(reads=k) for k in range(2)]
        self._current = 0

    def _binding(self, reads: int) -> object:
        """Token and output bound once; state read from buffer set ``reads``, written to the other."""
        binding = self.session.io_binding()
        binding.bind_ortvalue_input(INPUT_NAMES[0], self._x)
        binding.bind_ortvalue_output(OUTPUT_NAMES[0], self._y)
        for name_in, name_out, read, write in zip(
            INPUT_NAMES[1:], OUTPUT_NAMES[1:], self._states[reads], self._states[1 - reads], strict=True
        ):
            binding.bind_ortvalue_input(name_in, read)
            binding.bind_ortvalue_output(name_out, write)
        return binding

    def push(self, x_t: np.ndarray) -> np.ndarray:
        """The output for token ``x_t (batch, d_model)`` (a new array); the state moves on."""
        self._x.update_inplace(np.ascontiguousarray(x_t, dtype=np.float32))
        self.session.run_with_iobinding(self._bindings[self._current])
        self._current ^= 1
        return self._y.numpy()

    @property
    def state(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(m, u, w)`` after the last push, as new arrays."""
        return tuple(value.numpy() for value in self._states[self._current])  # type: ignore[return-value]

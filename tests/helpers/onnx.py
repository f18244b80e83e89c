"""The mark for tests that run an exported step: they need the deploy extra (onnxruntime, onnxscript)."""

from __future__ import annotations

import importlib.util

import pytest

needs_onnx = pytest.mark.skipif(
    any(importlib.util.find_spec(name) is None for name in ("onnxruntime", "onnxscript")),
    reason="the deploy extra (onnxruntime, onnxscript) is not installed",
)

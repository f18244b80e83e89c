"""Picking the cumulative kernel's implementation in tests: the compiled one or the PyTorch one."""

from __future__ import annotations

import importlib
import os
import shutil
from collections.abc import Callable

import pytest

from recurrent_attention.ops import native

prefix_attention_module = importlib.import_module("recurrent_attention.ops.prefix_attention")


def require_native() -> Callable:
    """The compiled kernel; a machine without a C++ compiler, or with the kernels switched off
    (``RA_NATIVE_KERNELS=0``: a device window's test step, which must not spend minutes building
    them), skips; one whose build fails fails."""
    if shutil.which("c++") is None and shutil.which("g++") is None:
        pytest.skip("no C++ compiler: the native kernel cannot be built here")
    if os.environ.get(native.SWITCH, "1") == "0":
        pytest.skip(f"native kernels switched off ({native.SWITCH}=0)")
    module = native.extension()
    assert module is not None, "the native kernel failed to build (see the warning)"
    return module.cumulative_attention


def use_cumulative_kernel(compiled: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Route ``attention_chunked``'s cumulative kernel to C++ (compiled) or to PyTorch."""
    if compiled:
        require_native()
    else:
        monkeypatch.setattr(native, "cumulative_attention", lambda _scores: None)


def cumulative_kernels(compiled: bool) -> Callable:
    """``(s, v, carry_m, carry_u, carry_w) -> (out, m, u, w, late)`` of one implementation."""
    if not compiled:
        return prefix_attention_module._ChunkCumulativeAttention.apply
    kernel = require_native()

    def call(s, v, carry_m, carry_u, carry_w):
        return kernel(s, v, carry_m, carry_u, carry_w, prefix_attention_module._spread_limit(s.dtype))

    return call

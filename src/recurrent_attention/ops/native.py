"""Compiled CPU kernels (``csrc/``), built on first use by torch's JIT extension builder.

At the sizes Aaren trains at on a CPU (event forecasting: ~6 tokens, d_model 64) the PyTorch form
of its two attention-specific pieces, the cumulative prefix-attention kernel and the values-and-
scores projection, is dozens of small ops whose dispatch, not arithmetic, is the cost. The C++ forms are
one call each way (what that gives training: ``results/bench/bench.md``, training steps/s).
Aaren's and linear attention's deployed step (``StackStepper``, :mod:`~recurrent_attention.deploy.compiled`)
is the third: a token's whole step as loops over its weights.
The build (ninja runs g++ -O3 on each ``csrc/*.cpp`` against torch's headers, in parallel, then
links; :func:`build_note` says how long) runs once per source version and Python environment
and is cached under ``TORCH_EXTENSIONS_DIR`` (default ``~/.cache/torch_extensions``), in a folder
named by both and by the checkout (:func:`build_name`): venvs and checkouts (git worktrees) on one
machine never share, and so never rebuild in turn, one entry. It targets the CPU it builds on
(:func:`arch_flags`). Where it cannot build (no compiler), or with ``RA_NATIVE_KERNELS=0``, the
PyTorch forms run: same results to rounding.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import torch

log = logging.getLogger(__name__)

SWITCH = "RA_NATIVE_KERNELS"
NAME = "recurrent_attention_native"
SOURCES = sorted(Path(__file__).with_name("csrc").glob("*.cpp"))
HEADERS = sorted(Path(__file__).with_name("csrc").glob("*.h"))
"""Hashed with the sources into the build's name (:func:`build_name`): a header change rebuilds too."""
# CPU time of a cold build, measured (torch 2.13, g++ -O3, 4 files: 108.6 s user + 6.8 s sys; each file
# ~30 s, the link under a second). Its wall time is this over the free cores: 207 s on a 2-core
# machine busy with other work, so the log line says the estimate for the cores it has.
BUILD_CPU_S = 115


def build_note(cores: int | None = None) -> str:
    """What the first load does and how long it takes on ``cores`` free cores (default: this machine's)."""
    parallel = max(1, min(cores or os.cpu_count() or 1, len(SOURCES)))
    minutes = max(1, round(BUILD_CPU_S / parallel / 60))
    return (
        f"the first load per source version compiles {len(SOURCES)} C++ files with g++ -O3: "
        f"~{BUILD_CPU_S} CPU-seconds, about {minutes} min on {parallel} free core(s), longer on a busy one"
    )


def _put_ninja_on_path() -> None:
    """torch's builder runs ``ninja`` from PATH; the ``ninja`` package's binary sits in the
    environment's bin folder, which is not on PATH when the venv's python is run without activation."""
    if shutil.which("ninja") is None:
        import ninja

        os.environ["PATH"] = os.pathsep.join([ninja.BIN_DIR, os.environ.get("PATH", "")])


ARCH_FLAG = "-march=native"


@functools.cache
def arch_flags() -> list[str]:
    """``[ARCH_FLAG]`` where the compiler takes it, else ``[]`` (the portable build). The kernels
    build at first use on the machine that runs them, so they may use all of its vector units: the
    deployed step's loops (``csrc/stack_step.cpp``) read their weights in 64-byte vectors with
    AVX-512 where x86-64's default target has 16."""
    compiler = os.environ.get("CXX", "c++")
    with tempfile.TemporaryDirectory() as folder:
        source = Path(folder) / "probe.cpp"
        source.write_text("int main() { return 0; }\n")
        try:
            command = [compiler, ARCH_FLAG, "-c", str(source), "-o", str(Path(folder) / "probe.o")]
            subprocess.run(command, check=True, capture_output=True, timeout=120)
        except (OSError, subprocess.SubprocessError):
            return []
    return [ARCH_FLAG]


def cpu_identity() -> str:
    """This machine's CPU: its model and feature flags (``/proc/cpuinfo``), or what ``platform`` knows."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return f"{platform.machine()} {platform.processor()}"
    keys = ("model name", "flags", "Features", "CPU implementer", "CPU part")
    return "\n".join(dict.fromkeys(line for line in lines if line.startswith(keys)))


def build_name(flags: list[str]) -> str:
    """The module's name and cache folder: ``NAME`` plus a hash of the sources' bytes and folder, the
    flags, this environment (``sys.prefix``), its Python and its torch, and, for a build that targets
    this CPU (:data:`ARCH_FLAG`), the CPU: a cache folder shared between machines (a cluster's home
    folder) never hands one CPU's build to another. torch's builder keys its cache by name alone and
    rebuilds when the sources' paths change, so one shared name made every venv, and every checkout
    of the same sources, rebuild over the others' build."""
    digest = hashlib.sha256()
    for source in (*SOURCES, *HEADERS):
        digest.update(source.read_bytes())
    digest.update(repr((str(SOURCES[0].parent), flags, sys.prefix, sys.version, torch.__version__)).encode())
    if ARCH_FLAG in flags:
        digest.update(cpu_identity().encode())
    return f"{NAME}_{digest.hexdigest()[:12]}"


def built(name: str) -> bool:
    """Whether torch's builder holds module ``name`` built (its cache folder has the library), so
    loading it takes a second, not a build."""
    from torch.utils.cpp_extension import _get_build_directory

    folder = Path(_get_build_directory(name, verbose=False))
    return any((folder / f"{name}{suffix}").is_file() for suffix in (".so", ".pyd"))


@functools.cache
def extension() -> ModuleType | None:
    """The compiled module, or None (switched off, or the build failed: warned once, with the reason)."""
    if os.environ.get(SWITCH, "1") == "0":
        return None
    from torch.utils.cpp_extension import load

    try:
        _put_ninja_on_path()
        # OpenMP makes at::parallel_for split rows over torch's threads (its libgomp is the one
        # already loaded); without it the kernels run serially, and correctly.
        openmp = ["-fopenmp"] if sys.platform.startswith("linux") else []
        # No fused multiply-add contraction: with it (-march=native turns FMA on) a kernel's last bits
        # depend on which loop, vector or tail, reached an element, and a checkpoint of the old layout
        # would not resume bit for bit as the fused one (tests/test_migration.py).
        sources, cflags = [str(s) for s in SOURCES], ["-O3", "-ffp-contract=off", *arch_flags(), *openmp]
        name = build_name(cflags)
        cold = not built(name)
        if cold:  # the one long, silent call of a first run: say so before, and how long it took
            log.info(f"building the native attention kernels: {build_note()}; later runs load them")
        start = time.perf_counter()
        module = load(name=name, sources=sources, extra_cflags=cflags, extra_ldflags=openmp)
        if cold:
            log.info(f"built the native attention kernels in {time.perf_counter() - start:.0f} s")
        return module
    except (ImportError, OSError, RuntimeError) as err:
        warnings.warn(
            f"native attention kernels unavailable ({err}); using the PyTorch forms "
            f"(same results, slower at short sequences). Set {SWITCH}=0 to skip the build.",
            stacklevel=2,
        )
        return None


def in_use() -> bool:
    """Whether this process has run on the compiled kernels: loaded them (never built here: False
    until a CPU float32/float64 Aaren forward asks for them). Run summaries record it, since the
    two forms agree to rounding, not bit for bit."""
    return extension.cache_info().currsize > 0 and extension() is not None


def _kernel(name: str, tensor: torch.Tensor) -> Callable | None:
    """``name`` from the compiled module for eager CPU float32/float64 tensors; None under a tracer
    (``torch.compile``, ``torch.export``, the ONNX exporter, ``torch.jit.trace``), which cannot see
    into it, and elsewhere."""
    if (
        tensor.device.type != "cpu"
        or tensor.dtype not in (torch.float32, torch.float64)
        or torch.compiler.is_compiling()
        or torch.jit.is_tracing()
    ):
        return None
    module = extension()
    return None if module is None else getattr(module, name)


def cumulative_attention(scores: torch.Tensor) -> Callable | None:
    """The compiled cumulative prefix-attention kernel for these scores (CPU, float32/64), or None."""
    return _kernel("cumulative_attention", scores)


def value_score_projection(query: torch.Tensor) -> Callable | None:
    """The compiled values-and-scores projection for this query parameter (CPU, float32/64), or None."""
    return _kernel("value_score_projection", query)


def stack_stepper(token: torch.Tensor) -> type | None:
    """The compiled ``StackStepper`` class for this token (CPU, float32/64, eager), or None."""
    return _kernel("StackStepper", token)

"""The device the GPU tests run on: CUDA where there is one, else this CPU, so that they cannot rot.

``RA_GPU_TEST_DEVICE`` picks it: ``cuda`` (a ``verify`` window), ``cpu`` (here: every test, every
family's smoke run included), or ``meta`` (no values: the tests that hold devices and shapes run,
those that compare values skip). Unset, it is ``cuda`` where torch sees one, else ``cpu``.
"""

from __future__ import annotations

import os

import pytest
import torch

ENV = "RA_GPU_TEST_DEVICE"
CHOICES = ("cuda", "cpu", "meta")


def chosen_device() -> torch.device:
    """The device named by ``RA_GPU_TEST_DEVICE``, else CUDA where there is one, else the CPU."""
    name = os.environ.get(ENV) or ("cuda" if torch.cuda.is_available() else "cpu")
    if name not in CHOICES:
        raise pytest.UsageError(f"{ENV}={name!r}: choose one of {', '.join(CHOICES)}")
    if name == "cuda" and not torch.cuda.is_available():
        raise pytest.UsageError(f"{ENV}=cuda but torch {torch.__version__} sees no CUDA device: unset it")
    return torch.device(name)


def explicitly_chosen() -> bool:
    """Whether the device was named (``RA_GPU_TEST_DEVICE``) rather than found."""
    return bool(os.environ.get(ENV))


@pytest.fixture(scope="session")
def device() -> torch.device:
    return chosen_device()


def needs_values(device: torch.device) -> None:
    """Skip a test that compares values on the meta device, which holds none."""
    if device.type == "meta":
        pytest.skip("the meta device holds no values: this test compares them")

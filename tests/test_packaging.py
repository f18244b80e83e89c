"""An installed package (a built wheel, not this checkout) carries its configs and manifests."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The wheel built from a copy of the checkout (no network), unpacked as pip would install it."""
    pytest.importorskip("setuptools")
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for name in ("src", "conf"):
        shutil.copytree(
            ROOT / name, source / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__")
        )
    wheels = tmp_path_factory.mktemp("wheels")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            wheels,
            source,
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = wheels.glob("*.whl")
    site = tmp_path_factory.mktemp("site")
    zipfile.ZipFile(wheel).extractall(site)
    return site


def test_wheel_carries_every_config_and_manifest(installed: Path) -> None:
    package = installed / "recurrent_attention"
    shipped = {p.relative_to(package / "conf") for p in (package / "conf").rglob("*.yaml")}
    assert shipped == {p.relative_to(ROOT / "conf") for p in (ROOT / "conf").rglob("*.yaml")}
    assert not (package / "conf").is_symlink()
    assert {p.name for p in (package / "data" / "manifests").glob("*.yaml")} >= {"tsf.yaml", "lm.yaml"}


def test_wheel_carries_the_kernel_sources_it_builds_from(installed: Path) -> None:
    """The compiled kernels are built at first use from the installed package's own sources."""
    csrc = ROOT / "src" / "recurrent_attention" / "ops" / "csrc"
    shipped = {p.name for p in (installed / "recurrent_attention" / "ops" / "csrc").iterdir()}
    assert shipped == {p.name for p in csrc.iterdir()} >= {"native.h", "bindings.cpp"}


def test_installed_entry_point_finds_its_configs(installed: Path, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(installed)}
    where = subprocess.run(
        [sys.executable, "-c", "from recurrent_attention.config import CONFIG_DIR; print(CONFIG_DIR)"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert Path(where.stdout.strip()) == installed / "recurrent_attention" / "conf"
    # What ``ra-train --help`` runs (the console script calls recurrent_attention.train:main).
    helped = subprocess.run(
        [sys.executable, "-c", "from recurrent_attention.train import main; main()", "--help"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert helped.returncode == 0, helped.stderr[-2000:]
    assert "== Config groups" in helped.stdout and "tsf/etth1" in helped.stdout

"""An installed package (a built wheel, not this checkout) carries its configs and manifests."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import tomllib
import torch
from packaging.requirements import Requirement
from packaging.version import Version

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


@pytest.mark.slow
def test_wheel_carries_every_config_and_manifest(installed: Path) -> None:
    package = installed / "recurrent_attention"
    shipped = {p.relative_to(package / "conf") for p in (package / "conf").rglob("*.yaml")}
    assert shipped == {p.relative_to(ROOT / "conf") for p in (ROOT / "conf").rglob("*.yaml")}
    assert not (package / "conf").is_symlink()
    assert {p.name for p in (package / "data" / "manifests").glob("*.yaml")} >= {"tsf.yaml", "lm.yaml"}


@pytest.mark.slow
def test_wheel_carries_the_papers_numbers(installed: Path) -> None:
    """``make tables`` reads the papers' columns from the package (importlib.resources), wherever it is."""
    folder = ROOT / "src" / "recurrent_attention" / "results" / "reference"
    shipped = installed / "recurrent_attention" / "results" / "reference"
    assert (
        {p.name for p in shipped.iterdir()}
        == {p.name for p in folder.iterdir()}
        >= {"aaren_tsf.csv", "crt_lm.csv"}
    )
    assert (shipped / "aaren_tsf.csv").read_bytes() == (folder / "aaren_tsf.csv").read_bytes()


@pytest.mark.slow
def test_wheel_carries_the_kernel_sources_it_builds_from(installed: Path) -> None:
    """The compiled kernels are built at first use from the installed package's own sources."""
    csrc = ROOT / "src" / "recurrent_attention" / "ops" / "csrc"
    shipped = {p.name for p in (installed / "recurrent_attention" / "ops" / "csrc").iterdir()}
    assert shipped == {p.name for p in csrc.iterdir()} >= {"native.h", "bindings.cpp"}


@pytest.mark.slow
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
    # What ``ra-train --help`` runs: the console script (argv[0] ra-train) calls train:main.
    as_console_script = (
        "import sys; sys.argv[0] = 'ra-train'; from recurrent_attention.train import main; main()"
    )
    helped = subprocess.run(
        [sys.executable, "-c", as_console_script, "--help"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert helped.returncode == 0, helped.stderr[-2000:]
    assert "== Config groups" in helped.stdout and "tsf/etth1" in helped.stdout
    # it names itself, not the checkout's python train.py
    assert helped.stdout.startswith("== ra-train (recurrent-attention) ==")
    assert "ra-train model=aaren task=tsf/etth1" in helped.stdout and "python train.py" not in helped.stdout


def test_torch_is_a_range_that_keeps_the_installed_torch() -> None:
    """The bug: torch==2.13.0 made pip replace whatever torch a machine had (a cluster's CUDA build)."""
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (torch_requirement,) = [Requirement(d) for d in dependencies if Requirement(d).name == "torch"]
    operators = {spec.operator for spec in torch_requirement.specifier}
    assert operators == {">=", "<"}, torch_requirement
    assert Version(torch.__version__).public in torch_requirement.specifier


@pytest.mark.parametrize(
    "path", ["MUJOCO_LOG.TXT", "scripts/MUJOCO_LOG.TXT", "build/lib/x.py", "wheelhouse/a.whl"]
)
def test_tool_droppings_are_git_ignored(path: str) -> None:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout")
    assert subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT).returncode == 0, path


def install_torch(tmp_path: Path, gpus: str | None, **env: str) -> subprocess.CompletedProcess:
    """``scripts/install_torch.py --dry-run``, on a PATH whose ``nvidia-smi`` lists ``gpus`` (None: none)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    if gpus is not None:
        tool = bin_dir / "nvidia-smi"
        tool.write_text(f"#!/bin/sh\nprintf '{gpus}'\n")
        tool.chmod(0o755)
    path = os.pathsep.join([str(bin_dir), "/usr/bin", "/bin"])
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "install_torch.py"), "2.13.0", "--dry-run"],
        env={**os.environ, "PATH": path, **env},
        capture_output=True,
        text=True,
    )


def test_setup_takes_the_cpu_build_where_no_gpu_is_found(tmp_path: Path) -> None:
    if shutil.which("nvidia-smi", path="/usr/bin:/bin"):
        pytest.skip("this machine has nvidia-smi on its system PATH")
    lines = install_torch(tmp_path, gpus=None).stdout.splitlines()
    assert lines[0] == "make setup: no NVIDIA GPU found (nvidia-smi lists none): torch 2.13.0, CPU build"
    # a torch wheel already on disk first (here: the CPU wheel pip's find-links holds) and its
    # dependencies from the usual index; else all from PyTorch's CPU index
    assert lines[1:] == [
        "  route 1: python -m pip install torch==2.13.0 --no-index --no-deps && "
        "python -m pip install torch==2.13.0",
        "  route 2: python -m pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu",
    ]


def test_setup_takes_pypis_cuda_build_where_a_gpu_is_found(tmp_path: Path) -> None:
    lines = install_torch(tmp_path, gpus="GPU 0: NVIDIA H100 (UUID: GPU-1)").stdout.splitlines()
    assert lines == [
        "make setup: NVIDIA GPU found (GPU 0: NVIDIA H100 (UUID: GPU-1)): torch 2.13.0, CUDA build (PyPI)",
        "  route 1: python -m pip install torch==2.13.0",
    ]
    forced = install_torch(tmp_path, gpus="GPU 0: NVIDIA H100", TORCH_BUILD="cpu").stdout.splitlines()
    assert forced[0] == "make setup: TORCH_BUILD=cpu: torch 2.13.0, CPU build"
    refused = install_torch(tmp_path, gpus=None, TORCH_BUILD="rocm")
    assert refused.returncode == 2 and refused.stderr.startswith("error: TORCH_BUILD='rocm'")


def test_setup_installs_the_package_of_every_shipped_logger() -> None:
    """``logger=wandb`` after ``make setup`` works: the loggers' extras are among those it installs."""
    import re

    from recurrent_attention.config_checks import LOGGER_EXTRAS

    (extras,) = re.findall(r'\.venv/bin/pip install -e "\.\[([a-z,]+)\]"', (ROOT / "Makefile").read_text())
    shipped = {
        line.split(":", 1)[1].strip()
        for f in (ROOT / "conf" / "logger").glob("*.yaml")
        for line in f.read_text().splitlines()
        if line.startswith("_target_:")
    }
    needed = {extra for target, (_, extra) in LOGGER_EXTRAS.items() if target in shipped}
    assert needed == {"wandb"} and needed <= set(extras.split(","))

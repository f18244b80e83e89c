"""Runs on a GPU make tables of their own (``*_gpu_*``), never rows or seeds of a CPU table."""

from __future__ import annotations

from pathlib import Path

from recurrent_attention.cli.make_tables import main
from tests.helpers.run_records import failure, summary

H100 = "NVIDIA H100 80GB HBM3 x1"


def test_gpu_runs_make_their_own_table(tmp_path: Path) -> None:
    runs, out = tmp_path / "runs", tmp_path / "tables"
    for seed, mse in ((1, 0.51), (2, 0.53)):
        summary(
            runs / f"cpu{seed}",
            seed,
            {"mse": mse, "mae": 0.5},
            preset="paper",
            device="CPU AMD EPYC, 2 cores",
        )
    for seed, mse in ((1, 0.41), (2, 0.43)):
        gpu = {"preset": "paper", "device": H100, "git_commit": "def"}
        summary(runs / f"gpu{seed}", seed, {"mse": mse, "mae": 0.4}, extra=["trainer=gpu"], **gpu)
    failure(
        runs / "gpu3", 3, "RuntimeError: CUDA out of memory", preset="paper", device=H100, git_commit="def"
    )
    assert main(["--runs", str(runs), "--out", str(out)]) == 0

    cpu = (out / "aaren_tsf_paper_default.md").read_text()
    gpu = (out / "aaren_tsf_gpu_paper_default.md").read_text()
    assert "0.520 ± 0.014" in cpu and "0.420" not in cpu and "CUDA" not in cpu
    assert "0.420 ± 0.014" in gpu and "0.520" not in gpu
    assert gpu.splitlines()[0].endswith(f"on {H100}")
    assert f"hardware: {H100}" in gpu and "commit: def" in gpu
    assert "seed 3: RuntimeError: CUDA out of memory" in gpu  # a failed GPU run is marked there


def test_cpu_only_runs_make_no_gpu_table(tmp_path: Path) -> None:
    summary(tmp_path / "runs" / "a", 1, {"mse": 0.5, "mae": 0.5}, preset="paper")
    assert main(["--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "tables")]) == 0
    assert sorted(p.name for p in (tmp_path / "tables").glob("*.md")) == ["aaren_tsf_paper_default.md"]

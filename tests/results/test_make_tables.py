"""`make tables` leaves the checkout alone; committed tables come only from runs of one clean commit."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from recurrent_attention.cli.make_tables import main as make_tables
from tests.helpers.run_records import failure, summary

ROOT = Path(__file__).resolve().parents[2]
needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="needs the git command")


def _recipe(target: str) -> str:
    """The command line of a Makefile target (the tab-indented line under it)."""
    lines = (ROOT / "Makefile").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{target}:"))
    return lines[start + 1].strip()


def _out(recipe: str) -> str:
    words = recipe.split()
    return words[words.index("--out") + 1]


@needs_git
def test_make_tables_writes_where_git_ignores_and_make_results_is_the_committed_path() -> None:
    """The bug: `make tables` rewrote the committed results/, so every later run was stamped -dirty."""
    inside = subprocess.run(["git", "rev-parse", "--is-inside-work-tree"], cwd=ROOT, capture_output=True)
    if inside.returncode != 0:
        pytest.skip("not a git checkout")
    out = _out(_recipe("tables"))
    ignored = subprocess.run(["git", "check-ignore", "-q", f"{out}/aaren_tsf_cpu_default.md"], cwd=ROOT)
    assert ignored.returncode == 0, f"make tables writes to {out}, which git tracks"
    assert _out(_recipe("results")) == "results"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git checkout that ignores outputs/, like this repository."""
    root = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / ".gitignore").write_text("/outputs/\n")
    return root


def _args(runs: Path, out: Path, *extra: str) -> list[str]:
    reference = runs.parent / "no_reference"
    reference.mkdir(exist_ok=True)
    return ["--runs", str(runs), "--out", str(out), "--reference", str(reference), *extra]


@needs_git
def test_committed_tables_refuse_dirty_and_mixed_commits(tmp_path: Path, repo: Path, capsys) -> None:
    runs = tmp_path / "runs"
    summary(runs / "a1", 1, {"mse": 0.4, "mae": 0.5}, git_commit="c1-dirty")
    summary(runs / "a2", 2, {"mse": 0.6, "mae": 0.5}, git_commit="c1")

    assert make_tables(_args(runs, repo / "results")) == 1
    assert not (repo / "results").exists()
    err = capsys.readouterr().err
    assert str(runs / "a1" / "summary.json") in err and "c1-dirty (uncommitted changes)" in err
    assert "runs from 2 commits" in err

    assert make_tables(_args(runs, repo / "outputs" / "tables")) == 0  # a git-ignored folder takes anything
    assert (repo / "outputs" / "tables" / "aaren_tsf_cpu_default.md").is_file()

    assert make_tables(_args(runs, repo / "results", "--allow-unclean")) == 0
    assert (
        "WARNING: not built from runs of one clean commit"
        in (repo / "results" / "aaren_tsf_cpu_default.md").read_text()
    )


@needs_git
def test_committed_tables_from_one_clean_commit_are_written(tmp_path: Path, repo: Path) -> None:
    runs = tmp_path / "runs"
    summary(runs / "a1", 1, {"mse": 0.4, "mae": 0.5}, git_commit="c1")
    summary(runs / "a2", 2, {"mse": 0.6, "mae": 0.5}, git_commit="c1")
    assert make_tables(_args(runs, repo / "results")) == 0
    text = (repo / "results" / "aaren_tsf_cpu_default.md").read_text()
    assert "WARNING" not in text and "commit: c1" in text


def test_failures_no_table_can_show_are_still_reported(tmp_path: Path, capsys) -> None:
    runs = tmp_path / "runs"
    summary(runs / "a1", 1, {"mse": 0.4, "mae": 0.5})
    summary(tmp_path / "copy" / "a1", 1, {"mse": 0.4, "mae": 0.5})
    old = runs / "old" / "failed.json"  # written before failures recorded which run they were
    old.parent.mkdir()
    old.write_text('{"error": "ValueError: bad", "traceback": "..."}')
    args = _args(runs, tmp_path / "out")
    assert make_tables([*args[:2], str(tmp_path / "copy"), *args[2:]]) == 0
    err = capsys.readouterr().err
    assert f"failed (in no table): {old}: ValueError: bad" in err
    assert (
        f"duplicate: {tmp_path / 'copy' / 'a1' / 'summary.json'} (same run as {runs / 'a1' / 'summary.json'}"
        in err
    )


def test_the_papers_numbers_ship_with_the_package(tmp_path: Path, monkeypatch, capsys) -> None:
    """The bug: a clone not beside shared/ made every paper column empty without a word."""
    monkeypatch.delenv("RA_REFERENCE_DIR", raising=False)
    monkeypatch.chdir(tmp_path)  # any clone location: nothing is read beside the checkout
    runs = tmp_path / "runs"
    summary(runs / "a1", 1, {"mse": 0.4, "mae": 0.5})
    assert make_tables(["--runs", str(runs), "--out", str(tmp_path / "out")]) == 0
    # Aaren, Table 5, ETTh1 at horizon 96: MSE 0.53 ± 0.04, MAE 0.52 ± 0.02
    assert (
        "| ETTh1 | 96 | aaren | 0.400 | 0.53 ± 0.04 | 0.500 | 0.52 ± 0.02 |"
        in (tmp_path / "out" / "aaren_tsf_cpu_default.md").read_text()
    )
    assert "warning" not in capsys.readouterr().err


def test_a_missing_reference_is_one_line_per_file(tmp_path: Path, monkeypatch, capsys) -> None:
    runs = tmp_path / "runs"
    summary(runs / "a1", 1, {"mse": 0.4, "mae": 0.5})
    summary(runs / "a2", 1, {"mse": 0.4, "mae": 0.5}, preset="smoke")  # a second table, same CSV
    args = _args(runs, tmp_path / "out")
    assert make_tables(args) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert lines == [
        f"warning: no paper reference {tmp_path / 'no_reference' / 'aaren_tsf.csv'}: the paper columns "
        "of its tables stay empty (--reference or RA_REFERENCE_DIR points there; leave both unset for "
        "the package's numbers)"
    ]


def test_a_table_of_failed_runs_only_is_not_written(tmp_path: Path, capsys) -> None:
    """The bug: a failed own-data run left empty table files (a header and no row)."""
    runs = tmp_path / "runs"
    failure(
        runs / "own",
        1,
        "DataError: mine.csv: line 5, column 'date': not a date",
        dataset="mine.csv",
        setting={"horizon": 96},
    )
    summary(runs / "a1", 1, {"mse": 0.4, "mae": 0.5}, preset="smoke")
    out = tmp_path / "out"
    assert make_tables(_args(runs, out)) == 0
    assert sorted(p.name for p in out.iterdir()) == [
        "aaren_tsf_smoke_default.csv",
        "aaren_tsf_smoke_default.md",
    ]
    err = capsys.readouterr().err
    assert (
        "tsf: Time-series forecasting (cpu preset, default protocol): no finished run, no table written"
        in err
    )
    # its failure is in no table written (the bug: "marked in its table" of the table not written)
    assert f"failed (in no table): {runs / 'own' / 'failed.json'}: DataError: mine.csv" in err
    (runs / "a1" / "summary.json").unlink()
    assert make_tables(_args(runs, tmp_path / "none")) == 1 and not (tmp_path / "none").exists()

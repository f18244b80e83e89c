"""Committed tables drawn as ours against the paper: cells parsed, columns paired, points placed."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from recurrent_attention.results.paper_figures import (
    Cell,
    CellError,
    agreement_markdown,
    draw,
    figures,
    metric_pairs,
    parse_cell,
    read_table,
)

ROOT = Path(__file__).resolve().parents[2]

# the committed format (make results): pairs of columns, "mean ± std", bare means, empty cells, n=k
TSF = """dataset,horizon,model,mse (ours),mse (paper),mae (ours),mae (paper),n,seeds,wall s/run
ETTh1,96,aaren,0.692 ± 0.004,0.53 ± 0.04,0.549 ± 0.004,0.52 ± 0.02,3,1–3,66
ETTh1,96,transformer,0.488,0.49 ± 0.01,0.486 ± 0.003 (n=2),,3,1–3,86
ETTh1,192,aaren,0.709 ± 0.006,0.59,-0.562 ± 0.005,0.55 ± 0.01,3,1–3,100
"""


def _write(tmp_path: Path, text: str, name: str = "aaren_tsf_tiny") -> Path:
    path = tmp_path / f"{name}.csv"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("text", "cell"),
    [
        ("14.35 ± 0.83", Cell(14.35, 0.83)),
        ("-0.422 ± 0.003", Cell(-0.422, 0.003)),
        ("305.90", Cell(305.90, 0.0)),
        ("7", Cell(7.0, 0.0)),
        ("1.5e-3 ± 2E-4", Cell(1.5e-3, 2e-4)),
        ("2.388 ± 0.007 (n=4)", Cell(2.388, 0.007)),
        (" 27.39 ± 1.46 ", Cell(27.39, 1.46)),
        ("", None),
        ("  ", None),
    ],
)
def test_parse_cell_reads_every_committed_form(text: str, cell: Cell | None) -> None:
    assert parse_cell(text) == cell


@pytest.mark.parametrize("text", ["n/a", "14.35 ±", "± 0.83", "1.2 ± 0.3 ± 0.1", "nan", "inf", "1,5", "12 %"])
def test_parse_cell_refuses_anything_else(text: str) -> None:
    with pytest.raises(CellError, match="not a number"):
        parse_cell(text)


def test_metric_pairs_in_column_order_with_or_without_a_paper_column() -> None:
    columns = ["dataset", "model", "nll (ours)", "nll (paper)", "rmse (ours)", "score (ours)", "n"]
    assert metric_pairs(columns) == [("nll", True), ("rmse", False), ("score", False)]


def test_read_table_places_each_row_at_paper_ours(tmp_path: Path) -> None:
    table = read_table(_write(tmp_path, TSF))
    assert [p.metric for p in table.panels] == ["mse", "mae"]
    mse, mae = table.panels
    assert [(p.setting, p.model, p.paper, p.ours) for p in mse.points] == [
        ("horizon 96", "aaren", Cell(0.53, 0.04), Cell(0.692, 0.004)),
        ("horizon 96", "transformer", Cell(0.49, 0.01), Cell(0.488, 0.0)),
        ("horizon 192", "aaren", Cell(0.59, 0.0), Cell(0.709, 0.006)),
    ]
    # the transformer's mae has no paper number: not drawn, and said so
    assert [(p.paper.mean, p.ours.mean) for p in mae.points] == [(0.52, 0.549), (0.55, -0.562)]
    assert mae.not_drawn == ["horizon 96 transformer (no paper number)"]
    assert table.common == "ETTh1"  # the dataset every row shares goes into the title
    # within the sum of the stds: |0.488 - 0.49| <= 0 + 0.01; |0.692 - 0.53| > 0.004 + 0.04
    assert [p.agrees for p in mse.points] == [False, True, False]
    assert not mse.log and not mae.log


def test_the_figure_draws_the_points_read(tmp_path: Path) -> None:
    table = read_table(_write(tmp_path, TSF))
    out = tmp_path / "figures" / "aaren_tsf_tiny.png"
    drawn = draw(table, out)
    assert drawn == {
        "mse": [(0.53, 0.692), (0.49, 0.488), (0.59, 0.709)],
        "mae": [(0.52, 0.549), (0.55, -0.562)],
    }
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in out.parent.iterdir()] == [out.name]  # no temporary file left beside it


def test_settings_leave_out_columns_the_model_and_other_columns_determine(tmp_path: Path) -> None:
    text = "seg_len,memory / seg,data,model,ppl (ours),ppl (paper)\n"
    text += "70,0 / 70,ptb,transformer,305.9,67.0\n70,1 / 70,ptb,crt,264.6,58.3\n"
    text += "35,0 / 35,ptb,transformer,295.2,70.9\n35,1 / 35,ptb,crt,261.8,61.0\n"
    table = read_table(_write(tmp_path, text))
    assert [(p.setting, p.model) for p in table.panels[0].points] == [
        ("seg_len 70", "transformer"),
        ("seg_len 70", "crt"),
        ("seg_len 35", "transformer"),
        ("seg_len 35", "crt"),
    ]
    assert table.common == "ptb"


def test_log_axes_when_a_metric_spans_a_factor_of_ten(tmp_path: Path) -> None:
    text = "dataset,model,rmse (ours),rmse (paper),ppl (ours),ppl (paper)\n"
    text += "a,m,0.28 ± 0.01,10.01 ± 0.52,305.9,67.0\nb,m,2.3,1.27,264.5,58.3\n"
    rmse, ppl = read_table(_write(tmp_path, text)).panels
    assert rmse.log and not ppl.log


def test_a_malformed_cell_names_file_line_and_column(tmp_path: Path) -> None:
    path = _write(tmp_path, TSF.replace("0.59,", "0.59 +- 0.03,"))
    with pytest.raises(CellError) as err:
        read_table(path)
    assert str(path) in str(err.value)
    message = str(err.value)
    assert "line 4" in message and "'mse (paper)'" in message and "'0.59 +- 0.03'" in message


def test_a_row_with_missing_fields_is_an_error(tmp_path: Path) -> None:
    path = _write(tmp_path, TSF + "ETTh1,336,aaren,0.7\n")
    with pytest.raises(CellError, match="line 5 has not as many fields"):
        read_table(path)


def test_tables_and_metrics_without_paper_numbers_are_skipped_and_said(tmp_path: Path) -> None:
    rl = _write(tmp_path, "dataset,model,score (ours),n\nhopper,aaren,31.3 ± 0.0,3\n", "rl_tiny")
    ef = _write(
        tmp_path,
        "dataset,model,nll step (ours),acc % (ours),acc % (paper)\nTaxi,aaren,-0.42,91.4,\n",
        "ef_tiny",
    )
    lines = figures([rl, ef, _write(tmp_path, TSF)], tmp_path / "figures")
    assert lines[0] == "skipped rl_tiny: nothing to set against the paper (no paper column: score)"
    assert lines[1] == (
        "skipped ef_tiny: nothing to set against the paper "
        "(no paper column: nll step; acc %: no row has both numbers)"
    )
    assert lines[2].startswith(f"wrote {tmp_path / 'figures' / 'aaren_tsf_tiny.png'}: mse (1/3 agree)")
    assert lines[3] == f"wrote {tmp_path / 'figures' / 'agreement.md'}: 1 of 5 cells inside"
    assert sorted(p.name for p in (tmp_path / "figures").iterdir()) == ["aaren_tsf_tiny.png", "agreement.md"]


def test_agreement_lists_every_drawn_cell_with_its_gap_and_verdict(tmp_path: Path) -> None:
    """Hand-computed from TSF: |0.692 - 0.53| = 0.162 > 0.044, |0.488 - 0.49| = 0.002 <= 0.01, ..."""
    text = agreement_markdown([read_table(_write(tmp_path, TSF))])
    rows = [line for line in text.splitlines() if line.startswith("| horizon")]
    assert rows == [
        "| horizon 96 | aaren | mse | 0.692 ± 0.004 | 0.53 ± 0.04 | 0.162 | 0.044 | no |",
        "| horizon 96 | transformer | mse | 0.488 | 0.49 ± 0.01 | 0.002 | 0.01 | yes |",
        "| horizon 192 | aaren | mse | 0.709 ± 0.006 | 0.59 | 0.119 | 0.006 | no |",
        "| horizon 96 | aaren | mae | 0.549 ± 0.004 | 0.52 ± 0.02 | 0.029 | 0.024 | no |",
        "| horizon 192 | aaren | mae | -0.562 ± 0.005 | 0.55 ± 0.01 | 1.11 | 0.015 | no |",
    ]
    assert "## aaren_tsf_tiny\n\nETTh1: 1 of 5 cells inside." in text


@pytest.mark.parametrize(("paper", "inside"), [("1.0 ± 0.25", "yes"), ("1.0 ± 0.24", "no")])
def test_a_gap_equal_to_the_summed_stds_is_inside(tmp_path: Path, paper: str, inside: str) -> None:
    table = read_table(_write(tmp_path, f"dataset,model,acc (ours),acc (paper)\nx,m,1.5 ± 0.25,{paper}\n"))
    assert agreement_markdown([table]).splitlines()[-1].endswith(f"| {inside} |")


def test_script_help_and_make_figures_draw_the_committed_tables(tmp_path: Path, capsys) -> None:
    spec = importlib.util.spec_from_file_location("paper_figures", ROOT / "scripts" / "paper_figures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(SystemExit):
        module.main(["--help"])
    assert "ours against the paper" in capsys.readouterr().out
    recipe = (ROOT / "Makefile").read_text().split("\nfigures:", 1)[1].splitlines()[1]
    assert "scripts/paper_figures.py --out results/figures" in recipe
    bad = _write(tmp_path, TSF.replace("0.692 ± 0.004", "0.692 ±"))
    assert module.main([str(bad), "--out", str(tmp_path / "out")]) == 1
    assert "line 2, column 'mse (ours)'" in capsys.readouterr().err

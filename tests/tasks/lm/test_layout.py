"""The LM layout: one table per dataset and depth, rows by segment length, the paper's numbers beside."""

from __future__ import annotations

from pathlib import Path

from recurrent_attention.results.collect import load_runs
from recurrent_attention.results.layouts.lm import build
from recurrent_attention.results.summary import write_summary
from tests.helpers.run_records import failure

REFERENCE = """dataset,layers,model,rnn,memory_len,seg_len,ppl,table,note
Word PTB,3,Transformer,,0,70,67.0,Table 2,
Word PTB,3,Transformer-XL,,70,70,65.1,Table 2,
Word PTB,3,CRT,NCGRU,1,70,58.3,Table 2,
Word PTB,3,CRT,GRU,1,70,59.4,Table 9,
Word PTB,3,CRT,NCGRU,1,17,66.0,Table 2,
"""


def _run(root: Path, model: str, seg_len: int, seed: int, ppl: float, **ids: str) -> None:
    write_summary(
        root / f"{model}-{seg_len}-{seed}",
        {
            "task": "lm/ptb",
            "family": "lm",
            "dataset": "ptb",
            "setting": {"seg_len": seg_len, "n_layers": 3},
            "model": model,
            "seed": seed,
            "preset": "cpu",
            "compat": "default",
            "metrics": {"ppl": ppl, "loss": 5.0},
            "wall_time_s": 100.0,
            "device": "CPU",
            "git_commit": "abc",
            **ids,
        },
    )


def test_lm_table_rows_and_paper_values(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    for model, ppl in (("transformer", 300.0), ("transformer_xl", 290.0), ("crt_gru", 281.0)):
        _run(runs, model, 70, 1, ppl)
    _run(runs, "crt", 70, 1, 280.0)
    _run(runs, "crt", 70, 2, 282.0)
    _run(runs, "crt", 17, 1, 310.0, config_id="crt17", run_id="crt17-1")
    # a failure that records no setting still lands in its config's row, in the right table
    lm_crt = {"task": "lm/ptb", "family": "lm", "dataset": "ptb", "model": "crt"}
    failure(runs / "crt-17-3", 3, "RuntimeError: boom", config_id="crt17", run_id="crt17-3", **lm_crt)
    reference = tmp_path / "ref"
    reference.mkdir()
    (reference / "crt_lm.csv").write_text(REFERENCE)
    (table,) = build(load_runs([runs]), reference)
    assert table.name == "crt_lm_ptb_3layer_cpu"
    rows = table.frame.to_dict("records")
    assert [(r["seg_len"], r["model"]) for r in rows] == [
        (70, "transformer"),
        (70, "transformer_xl"),
        (70, "crt"),
        (70, "crt_gru"),
        (17, "crt"),
    ]
    assert [r["memory / seg"] for r in rows[:3]] == ["0 / 70", "70 / 70", "1 / 70"]
    assert rows[2]["ppl (ours)"] == "281.00 ± 1.41"  # mean and sample std of 280 and 282
    # one run: the value alone; seeds 2 and 3 (tried for some rows only) marked missing elsewhere
    assert rows[0]["ppl (ours)"] == "300.00" and rows[0]["n"] == 1 and rows[0]["missing seeds"] == "2, 3"
    # the paper ran each once: no invented "± 0.00"
    assert [r["ppl (paper)"] for r in rows] == ["67.00", "65.10", "58.30", "59.40", "66.00"]
    assert rows[4]["failed seeds"] == "3" and rows[4]["missing seeds"] == "2"
    assert "failed: 3 17 crt, seed 3: RuntimeError: boom" in table.notes

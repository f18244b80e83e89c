"""``train.py ... task=lm/ptb preset=smoke`` for every LM backbone under both readings (``task.compat``:
ours and the CRT paper's), on a generated PTB-format corpus."""

from __future__ import annotations

import math
import random

import pytest

from tests.conftest import read_summaries, run_train

pytestmark = pytest.mark.slow

MODELS = ("transformer", "transformer_xl", "crt", "crt_gru")


def _corpus(tmp_path, n_lines: int, seed: int) -> str:
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(30)]
    path = tmp_path / f"ptb.{seed}.txt"
    path.write_text(
        "".join(" " + " ".join(rng.choices(words, k=rng.randint(3, 12))) + " \n" for _ in range(n_lines))
    )
    return str(path)


def corpus_files_override(tmp_path) -> str:
    """``task.files=...`` for a generated PTB-format train/valid/test corpus of 300/40/40 lines."""
    files = {
        key: _corpus(tmp_path, n, seed)
        for key, n, seed in (("train", 300, 0), ("valid", 40, 1), ("test", 40, 2))
    }
    return f"task.files={{train:{files['train']},valid:{files['valid']},test:{files['test']}}}"


def _model_choice(summary: dict) -> str:
    """The run's ``model=`` choice (``paper/transformer`` and ``transformer`` share a name)."""
    return next(o.partition("=")[2] for o in summary["overrides"] if o.startswith("model="))


def test_smoke_run_per_model(tmp_path):
    overrides = [
        "-m",
        f"model={','.join([*MODELS, 'paper/transformer'])}",
        "task=lm/ptb",
        "task.compat=default,reference",
        "preset=smoke",
        "task.vocab_size=31",
        "task.seg_len=8",
        corpus_files_override(tmp_path),
        "logger=csv",
    ]
    run_train(overrides, tmp_path / "out")
    summaries = {(_model_choice(s), s["compat"]): s for s in read_summaries(tmp_path / "out")}
    models = [*MODELS, "paper/transformer"]
    assert set(summaries) == {(m, c) for m in models for c in ("default", "reference")}
    # the paper's Transformer is Transformer-XL's with no memory: its parameters, another run; under
    # either protocol a model= builds one model (the protocol initialises it)
    paper_tr, default_tr = summaries["paper/transformer", "reference"], summaries["transformer", "reference"]
    assert paper_tr["params"] == summaries["transformer_xl", "reference"]["params"] != default_tr["params"]
    assert paper_tr["run_id"] != default_tr["run_id"]
    assert paper_tr["params"] == summaries["paper/transformer", "default"]["params"]
    for summary in summaries.values():
        assert summary["family"] == "lm" and summary["setting"] == {"seg_len": 8, "n_layers": 1}
        assert math.isfinite(summary["metrics"]["ppl"]) and 1 < summary["metrics"]["ppl"] < 100

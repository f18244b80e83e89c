"""Corpus readers and batching, on generated files in the real formats and on the real files when mirrored."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from recurrent_attention.data import sources as sources_module
from recurrent_attention.tasks.lm.data import EOS, LMDataModule, SegmentWindows, Vocabulary, batchify
from tests.helpers.wikitext_routes import serve_folder, wikitext_source, write_hub_folder, write_release_zip

PTB_TRAIN = " the cat sat on the mat \n the dog <unk> \n a cat N \n"
PTB_VALID = " the zebra sat \n"


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_ptb_format_counts_and_vocabulary(tmp_path):
    train = _write(tmp_path, "ptb.train.txt", PTB_TRAIN)
    vocab = Vocabulary.from_file(train)
    # 12 words + one <eos> per line (3 lines); <eos> first, then by count, ties by first appearance.
    assert vocab.symbols == [EOS, "the", "cat", "sat", "on", "mat", "dog", "<unk>", "a", "N"]
    ids = vocab.encode_file(train)
    assert ids.numel() == 12 + 3
    assert [vocab.symbols[i] for i in ids[:7]] == ["the", "cat", "sat", "on", "the", "mat", EOS]
    valid = vocab.encode_file(_write(tmp_path, "ptb.valid.txt", PTB_VALID))
    assert [vocab.symbols[i] for i in valid] == ["the", "<unk>", "sat", EOS]


def test_wikitext_format_blank_lines_are_one_eos(tmp_path):
    text = " \n = Title = \n \n Some words , here . \n"
    path = _write(tmp_path, "wiki.train.tokens", text)
    vocab = Vocabulary.from_file(path)
    ids = vocab.encode_file(path)
    assert [vocab.symbols[i] for i in ids] == [
        EOS,
        "=",
        "Title",
        "=",
        EOS,
        EOS,
        "Some",
        "words",
        ",",
        "here",
        ".",
        EOS,
    ]


def test_streams_are_contiguous_and_windows_cover_every_target_once():
    ids = torch.arange(103)
    streams = batchify(ids, 4)
    assert streams.shape == (4, 25) and torch.equal(streams[1], torch.arange(25, 50))
    windows = SegmentWindows(streams, window=7)
    xs = torch.cat([windows[i]["x"] for i in range(len(windows))], dim=1)
    ys = torch.cat([windows[i]["y"] for i in range(len(windows))], dim=1)
    assert torch.equal(xs, streams[:, :-1]) and torch.equal(ys, streams[:, 1:])
    assert len(windows) == 4  # 24 targets per stream in windows of 7: 7, 7, 7, 3


def test_datamodule_checks_vocab_size(tmp_path):
    files = {k: str(_write(tmp_path, f"{k}.txt", PTB_TRAIN * 20)) for k in ("train", "valid", "test")}
    dm = LMDataModule(
        "ptb", vocab_size=10, seg_len=3, bptt_segments=2, batch_size=2, eval_batch_size=1, files=files
    )
    dm.setup()
    assert dm.datasets["train"][0]["x"].shape == (2, 6)
    assert dm.datasets["test"][0]["x"].shape == (1, 3)
    by_tokens = LMDataModule("ptb", 10, seg_len=3, bptt_segments=2, tokens_per_step=12, files=files)
    assert by_tokens.batch_size == 2
    wrong = LMDataModule("ptb", vocab_size=11, seg_len=3, files=files)
    with pytest.raises(ValueError, match="vocab_size=10"):
        wrong.setup()


MIRROR = os.environ.get("RA_DATA_MIRROR")


@pytest.mark.skipif(
    not MIRROR or not (Path(MIRROR or ".") / "ptb/ptb.train.txt").is_file(), reason="no PTB mirror"
)
def test_real_ptb_counts():
    dm = LMDataModule("ptb", vocab_size=10000, seg_len=70, batch_size=20, mirror=MIRROR, download=False)
    vocab = Vocabulary.from_file(dm.file("train"))
    assert len(vocab) == 10000
    assert vocab.encode_file(dm.file("train")).numel() == 887521 + 42068
    assert vocab.encode_file(dm.file("valid")).numel() == 70390 + 3370
    assert vocab.encode_file(dm.file("test")).numel() == 78669 + 3761


@pytest.mark.skipif(
    not MIRROR or not (Path(MIRROR or ".") / "wikitext-2/wiki.valid.tokens").is_file(),
    reason="no WikiText-2 mirror",
)
def test_real_wikitext2_token_counts_match_the_release():
    dm = LMDataModule("wikitext2", vocab_size=0, seg_len=70, mirror=MIRROR, download=False)
    for key, expected in (("valid", 217646), ("test", 245569)):  # Merity et al. 2017, Table 1
        path = dm.file(key)
        assert Vocabulary.from_file(path).encode_file(path).numel() == expected


def test_datamodule_reads_either_wikitext_route_alike_and_says_which(tmp_path, monkeypatch):
    """The release zip (over HTTP) and the Hugging Face copy give the same batches; origins name the route."""
    pytest.importorskip("datasets")
    article = " \n = Title = \n \n Some words , here . \n More <unk> words . \n"
    texts = {"train": article * 20, "valid": article * 5, "test": article.replace("More", "Few") * 5}
    served = tmp_path / "served"
    zip_path = write_release_zip(served / "wikitext-2-v1.zip", "wikitext-2", texts)
    hub = write_hub_folder(tmp_path / "hub", "wikitext-2-v1", texts)
    monkeypatch.delenv("RA_DATA_MIRROR", raising=False)
    modules = {}
    with serve_folder(served) as base:
        for route, url in (("zip", f"{base}/wikitext-2-v1.zip"), ("hf", f"{base}/gone/wikitext-2-v1.zip")):
            source = wikitext_source("wt", "wikitext-2", url, zip_path, hub, "wikitext-2-v1", list(texts))
            monkeypatch.setattr(sources_module, "registry", lambda source=source: {"wt": source})
            dm = LMDataModule("wt", vocab_size=10, seg_len=4, batch_size=2, data_dir=str(tmp_path / route))
            dm.prepare_data()
            dm.setup()
            modules[route] = dm
    by_zip, by_hf = modules["zip"], modules["hf"]
    assert by_zip.vocab.symbols == by_hf.vocab.symbols
    for split in ("train", "val", "test"):
        assert torch.equal(by_zip.datasets[split].streams, by_hf.datasets[split].streams)
    assert all(o.endswith("/wikitext-2-v1.zip)") for o in by_zip.origins.values())
    assert all("(from Hugging Face datasets " in o for o in by_hf.origins.values())

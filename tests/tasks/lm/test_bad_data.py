"""Bad corpus files stop the LM datamodule with one DataError line naming the file (and line)."""

from __future__ import annotations

from pathlib import Path

import pytest

from recurrent_attention.config_checks import ConfigError
from recurrent_attention.data import DataError
from recurrent_attention.tasks.lm.data import LMDataModule

GOOD = " the cat sat on the mat \n the dog sat \n a cat sat \n"


def setup_with(tmp_path: Path, **contents: bytes) -> None:
    files = {}
    for key in ("train", "valid", "test"):
        files[key] = str(tmp_path / f"ptb.{key}.txt")
        Path(files[key]).write_bytes(contents.get(key, GOOD.encode()))
    LMDataModule("ptb", vocab_size=8, seg_len=2, batch_size=2, eval_batch_size=2, files=files).setup()


def test_bytes_that_are_not_utf8_name_their_line(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=rf"^{tmp_path / 'ptb.valid.txt'}: line 2 is not UTF-8 text$"):
        setup_with(tmp_path, valid=b" the cat \n the \xff\xfe dog \n a cat \n")


def test_empty_training_file(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=rf"^{tmp_path / 'ptb.train.txt'}: holds no words"):
        setup_with(tmp_path, train=b"")


def test_too_short_evaluation_file_names_itself(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=rf"^{tmp_path / 'ptb.test.txt'}: 2 tokens are too few for 2 streams"):
        setup_with(tmp_path, test=b" cat \n")


def test_own_files_without_valid_and_test_are_one_line() -> None:
    """The bug: ``ConfigKeyError`` from deep inside the datamodule, with a traceback."""
    with pytest.raises(ConfigError, match=r"task\.files has no valid, test"):
        LMDataModule("ptb", vocab_size=8, seg_len=2, files={"train": "a.txt"})


def test_train_py_gets_the_constructors_own_error_not_hydras_wrapper() -> None:
    """``train.build`` passes the one-line error on (exit 2) instead of Hydra's InstantiationException."""
    from omegaconf import OmegaConf

    from recurrent_attention.train import build

    node = OmegaConf.create(
        {"_target_": "recurrent_attention.tasks.lm.data.LMDataModule", "source": "ptb", "vocab_size": 8}
        | {"seg_len": 2, "files": {"train": "a.txt"}}
    )
    with pytest.raises(ConfigError, match=r"task\.files has no valid, test"):
        build(node)

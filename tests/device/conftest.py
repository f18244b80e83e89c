"""Fixtures of a simulated GPU window: a clean checkout with the recipe's RL files, stand-in wheels."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from recurrent_attention.device.chunks import BASE_REQUIREMENTS, RL_DATASETS, RL_REQUIREMENTS, rl_file
from tests.helpers.d4rl_files import write_tiny_d4rl
from tests.helpers.device_repo import clean_checkout, stand_in_wheels

MIRROR = os.environ.get("RA_DATA_MIRROR")
needs_mirror = pytest.mark.skipif(
    not (MIRROR and Path(MIRROR, "ptb").is_dir()), reason="needs the data mirror (RA_DATA_MIRROR)"
)


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = clean_checkout(tmp_path_factory.mktemp("checkout"))
    for dataset in RL_DATASETS:  # git-ignored under data/, as make rl-data-sac leaves them
        (repo / "data" / rl_file(dataset)).parent.mkdir(parents=True, exist_ok=True)
        write_tiny_d4rl(repo / "data" / rl_file(dataset))
    return repo


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return stand_in_wheels(tmp_path_factory.mktemp("wheels"), BASE_REQUIREMENTS + RL_REQUIREMENTS)

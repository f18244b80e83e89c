"""Fixtures for the video tests: real H.264 mp4 clips written in Toyota Smarthome's release layout."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("av", reason="the video family decodes with PyAV (pip install -e '.[video]')")

from recurrent_attention.tasks.video.synthetic import generate


@pytest.fixture(scope="session")
def release_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The release folder (holding ``mp4/``): one clip per motion class and split, plus Pour.Fromcup."""
    folder = tmp_path_factory.mktemp("smarthome")
    generate(folder, per_class=1, n_frames=12, size=32, seed=0, extra_activities=("Pour.Fromcup",))
    return folder

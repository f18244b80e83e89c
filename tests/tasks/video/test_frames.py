"""Decoding real mp4 files, clip sampling, and one clear error line for a bad clip."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from recurrent_attention.data import DataError
from recurrent_attention.tasks.video.frames import eval_transform, read_frames, window_indices
from recurrent_attention.tasks.video.scan import probe
from recurrent_attention.tasks.video.synthetic import MOTIONS, motion_frames, write_mp4
from tests.tasks.video.test_data import write_audio_only


def bright_area_and_row(frames: torch.Tensor) -> tuple[list[float], list[float]]:
    """Pixels of the bright square and the row of its centre, per frame of ``uint8 (T, H, W, 3)``."""
    bright = (frames.float().mean(-1) > 140).float()
    rows = torch.arange(frames.shape[1], dtype=torch.float32)
    area = bright.sum((1, 2))
    return area.tolist(), ((bright.sum(2) * rows).sum(1) / area).tolist()


def first_clip(folder: Path, activity: str) -> torch.Tensor:
    return read_frames(next((folder / "mp4").glob(f"{activity}_*.mp4")))[0]


def test_decoded_clips_keep_their_motion(release_folder: Path) -> None:
    enter = next((release_folder / "mp4").glob("Enter_*.mp4"))
    frames, length = read_frames(enter)
    assert frames.shape == (12, 32, 32, 3) and length == 12 and probe(enter) == (12, None)
    grows, _ = bright_area_and_row(frames)
    shrinks, _ = bright_area_and_row(first_clip(release_folder, "Leave"))
    _, up = bright_area_and_row(first_clip(release_folder, "Getup"))
    _, down = bright_area_and_row(first_clip(release_folder, "Sitdown"))
    assert grows[-1] > 3 * grows[0] and shrinks[0] > 3 * shrinks[-1]
    assert up[0] - up[-1] > 8 and down[-1] - down[0] > 8


def test_read_selected_frames_in_the_order_asked(tmp_path: Path) -> None:
    frames = motion_frames(MOTIONS["Enter"], 10, 32, np.random.default_rng(1))
    write_mp4(tmp_path / "clip.mp4", frames)
    every, _ = read_frames(tmp_path / "clip.mp4")
    picked, _ = read_frames(tmp_path / "clip.mp4", [7, 2, 2, 30])
    assert torch.equal(picked[0], every[7]) and torch.equal(picked[1], every[2])
    assert torch.equal(picked[3], every[9])  # past the end: the last frame


def test_window_indices() -> None:
    assert window_indices(100, 4, 2, 0.0) == [0, 2, 5, 7]
    assert window_indices(100, 4, 2, 1.0) == [92, 94, 97, 99]
    assert window_indices(5, 4, 4, 0.5) == [0, 4, 4, 4]  # a short clip repeats its last frame


def test_eval_transform_centre_crop() -> None:
    frames = torch.zeros(2, 20, 40, 3, dtype=torch.uint8)
    frames[:, :, 10:30] = 255
    out = eval_transform(frames, 10)  # short side 20 -> 10: the 20 x 40 frame becomes 10 x 20
    assert out.shape == (2, 3, 10, 10) and out.min() == 255.0


@pytest.mark.parametrize(
    ("content", "message"),
    [(None, "clip missing"), (b"", "empty file"), (b"this is not an mp4 file" * 40, "cannot be decoded")],
)
def test_bad_clip_is_one_line_naming_the_file(tmp_path: Path, content: bytes | None, message: str) -> None:
    path = tmp_path / "Walk_p02_r00_v00_c02.mp4"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(DataError, match=message) as caught:
        read_frames(path)
    assert str(path) in str(caught.value) and "\n" not in str(caught.value)


def test_audio_only_mp4_is_one_line_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "Walk_p02_r00_v00_c02.mp4"
    write_audio_only(path)
    with pytest.raises(DataError, match="no video stream") as caught:
        read_frames(path)
    assert str(path) in str(caught.value) and "\n" not in str(caught.value)

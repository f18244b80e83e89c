"""Which frames and crops each split reads under both protocols, and the up-front clip check,
on real mp4 files whose frames carry their own index as a grey level."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from recurrent_attention.data import DataError
from recurrent_attention.tasks.video.data import SmarthomeDataModule
from recurrent_attention.tasks.video.frames import window_indices
from recurrent_attention.tasks.video.release import scan_release
from recurrent_attention.tasks.video.scan import scan_clips
from recurrent_attention.tasks.video.synthetic import write_mp4
from tests.helpers.protocols import protocol

LENGTH, BASE, STEP = 40, 20, 5  # frame t is grey level BASE + STEP * t
NAMES = {
    "train": "Walk_p03_r00_v00_c01.mp4",
    "val": "Walk_p19_r00_v00_c05.mp4",
    "test": "Walk_p02_r00_v00_c02.mp4",
}


def indexed_frames(length: int = LENGTH) -> np.ndarray:
    """``(length, 32, 48, 3)``: grey level encodes the frame index; the top 3 rows are white."""
    frames = np.empty((length, 32, 48, 3), dtype=np.uint8)
    for t in range(length):
        frames[t] = BASE + STEP * t
    frames[:, :3] = 255
    return frames


@pytest.fixture(scope="module")
def indexed_release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("indexed")
    (folder / "mp4").mkdir()
    for name in NAMES.values():
        write_mp4(folder / "mp4" / name, indexed_frames())
    return folder


def datamodule(folder: Path, compat: str, **kwargs) -> SmarthomeDataModule:
    dm = SmarthomeDataModule(
        str(folder), "cs", 31, n_frames=4, stride=2, crop_size=16, short_side_min=20, short_side_max=24,
        mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0), test_views=4, rules=protocol("video", compat), **kwargs,
    )  # fmt: skip
    dm.setup()
    return dm


def frame_indices(view: torch.Tensor) -> list[int]:
    """``(3, T, H, W)`` in [0, 1] -> the index each frame encodes (read below the white rows)."""
    level = view[:, :, -4:].mul(255).mean(dim=(0, 2, 3))
    return ((level - BASE) / STEP).round().long().tolist()


def top_row_white(view: torch.Tensor) -> bool:
    return bool(view[:, :, 0].mul(255).mean() > view[:, :, -1].mul(255).mean() + 30)


@pytest.mark.parametrize("compat", ["default", "reference"])
def test_test_views_placement_and_crop(indexed_release: Path, compat: str) -> None:
    """View i of 4 starts at i/4 of the free range (40 - 8 frames): 0, 8, 16, 24. Positions 0, 2.33,
    4.67, 7 in a window round to 0 2 5 7, truncate (PI-ViT) to 0 2 4 7. Default: short side to the
    crop (16), so the white top rows stay in the centre crop; reference: short side 20 first, whose
    centre crop cuts them off."""
    video = datamodule(indexed_release, compat).datasets["test"][0]["video"]
    assert video.shape == (4, 3, 4, 16, 16)
    offsets = [0, 2, 5, 7] if compat == "default" else [0, 2, 4, 7]
    assert [frame_indices(view) for view in video] == [[s + o for o in offsets] for s in (0, 8, 16, 24)]
    assert all(top_row_white(view) == (compat == "default") for view in video)


def test_validation_view_default_is_the_central_one(indexed_release: Path) -> None:
    dataset = datamodule(indexed_release, "default").datasets["val"]
    assert frame_indices(dataset[0]["video"]) == [16, 18, 21, 23]  # start 16 = half the free range
    assert frame_indices(dataset[0]["video"]) == [16, 18, 21, 23] and top_row_white(dataset[0]["video"])


def test_validation_view_reference_is_a_random_training_view(indexed_release: Path) -> None:
    dataset = datamodule(indexed_release, "reference").datasets["val"]
    torch.manual_seed(0)
    draws = [frame_indices(dataset[0]["video"]) for _ in range(6)]
    assert len({tuple(d) for d in draws}) > 1  # the window moves from draw to draw
    assert all(d[-1] - d[0] == 7 for d in draws)  # still 4 frames over an 8-frame window


def test_truncated_indices_as_the_official_decoder() -> None:
    # start 32 * 0.3 = 9.6 -> 9; offsets linspace(0, 7, 4) = 0, 2.33, 4.67, 7 -> 0, 2, 4, 7
    assert window_indices(40, 4, 2, 0.3, truncate=True) == [9, 11, 13, 16]
    assert window_indices(40, 4, 2, 0.3) == [10, 12, 14, 17]  # 9.6 + offsets, rounded
    assert window_indices(5, 4, 4, 0.5, truncate=True) == [0, 4, 4, 4]  # clamped to the clip


def write_audio_only(path: Path) -> None:
    import av

    with av.open(str(path), mode="w") as container:
        stream = container.add_stream("aac", rate=16000)
        stream.layout = "mono"
        for _ in range(8):
            frame = av.AudioFrame.from_ndarray(
                np.zeros((1, 1024), dtype=np.float32), format="fltp", layout="mono"
            )
            frame.sample_rate = 16000
            container.mux(stream.encode(frame))
        container.mux(stream.encode())


def write_cut_short(path: Path) -> None:
    """An mp4 with its index first (``faststart``) whose last tenth of frame data is cut off."""
    import av

    with av.open(str(path), mode="w", options={"movflags": "faststart"}) as container:
        stream = container.add_stream("libx264", rate=10)
        stream.height, stream.width, stream.pix_fmt = 32, 48, "yuv420p"
        for frame in indexed_frames():
            container.mux(stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")))
        container.mux(stream.encode())
    whole = path.read_bytes()
    path.write_bytes(whole[: len(whole) * 9 // 10])


def test_every_bad_clip_is_named_in_one_error_before_training(indexed_release: Path, tmp_path: Path) -> None:
    mp4 = tmp_path / "mp4"
    shutil.copytree(indexed_release / "mp4", mp4)
    (mp4 / "Walk_p04_r00_v00_c01.mp4").write_bytes(b"")
    whole = (mp4 / NAMES["train"]).read_bytes()
    (mp4 / "Walk_p06_r00_v00_c01.mp4").write_bytes(whole[: len(whole) // 2])
    write_audio_only(mp4 / "Walk_p07_r00_v00_c01.mp4")
    write_mp4(mp4 / "Walk_p09_r00_v00_c01.mp4", indexed_frames(2))  # fewer frames than n_frames=4
    write_cut_short(mp4 / "Walk_p12_r00_v00_c01.mp4")
    with pytest.raises(DataError) as caught:
        datamodule(tmp_path, "default")
    message = str(caught.value)
    assert message.startswith("5 unusable clip(s)") and "\n" not in message
    for name, why in (
        ("Walk_p04_r00_v00_c01.mp4", "empty file"),
        ("Walk_p06_r00_v00_c01.mp4", "cannot be decoded"),
        ("Walk_p07_r00_v00_c01.mp4", "no video stream"),
        ("Walk_p09_r00_v00_c01.mp4", "2 frames, fewer than task.n_frames=4"),
        ("Walk_p12_r00_v00_c01.mp4", "cut short: the header states 40 frames"),
    ):
        assert f"{name} ({why}" in message
    assert NAMES["test"] not in message


def test_check_is_cached_by_size_and_mtime(indexed_release: Path, tmp_path: Path) -> None:
    clip = tmp_path / NAMES["test"]
    shutil.copy(indexed_release / "mp4" / NAMES["test"], clip)
    cache = tmp_path / "cache" / "scan.json"
    assert scan_clips([clip], 4, cache) == {clip: LENGTH}
    stat = clip.stat()
    clip.write_bytes(b"\0" * stat.st_size)  # same size, same mtime: the cached answer stands
    os.utime(clip, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert scan_clips([clip], 4, cache) == {clip: LENGTH}
    os.utime(clip, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))  # touched: checked again
    with pytest.raises(DataError, match="cannot be decoded"):
        scan_clips([clip], 4, cache)


def test_skipped_names_are_counted_in_a_warning(indexed_release: Path, tmp_path: Path) -> None:
    shutil.copy(indexed_release / "mp4" / NAMES["test"], tmp_path / NAMES["test"])
    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / "Walk_p02.mp4").write_bytes(b"x")
    with pytest.warns(UserWarning, match=r"2 file\(s\) skipped, not named <Activity>_pSS_rRR_vVV_cCC\.mp4"):
        clips = scan_release(tmp_path)
    assert [c.path.name for c in clips] == [NAMES["test"]]

"""Clip names and the official CS / CV1 / CV2 split rules, on a folder of real generated mp4 files."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from recurrent_attention.data import DataError
from recurrent_attention.tasks.video.release import (
    CS_CLASSES,
    CV_CLASSES,
    parse_clip_name,
    scan_release,
    split_clips,
)

# The protocols as docs/protocols.md states them, written out independently of the code under test.
CS_SUBJECTS = {"train": {3, 4, 6, 7, 9, 12, 13, 15, 17}, "val": {19, 25}, "test": {2, 10, 11, 14, 16, 18, 20}}
CV_CAMERAS = {
    "cv1": {"train": {1}, "val": {5}, "test": {2}},
    "cv2": {"train": {1, 3, 4, 6, 7}, "val": {5}, "test": {2}},
}


def test_parser_reads_every_field() -> None:
    clip = parse_clip_name(Path("mp4/Cook.Cleandishes_p02_r00_v13_c03.mp4"))
    assert clip is not None
    assert (clip.activity, clip.subject, clip.r, clip.v, clip.camera) == ("Cook.Cleandishes", 2, 0, 13, 3)
    assert parse_clip_name(Path("WatchTV_p25_r11_v02_c07.mp4")).camera == 7
    for bad in ("Walk_p02_r00_v01.mp4", "Walk_p02_r00_v01_c01.avi", "notes.txt", "Walk_pXX_r00_v01_c01.mp4"):
        assert parse_clip_name(Path(bad)) is None


def test_class_lists_in_official_order() -> None:
    assert len(CS_CLASSES) == 31 and len(CV_CLASSES) == 19
    assert CS_CLASSES[0] == "Cook.Cleandishes" and CS_CLASSES[12] == "Enter" and CS_CLASSES[30] == "WatchTV"
    assert CV_CLASSES[0] == "Cutbread" and CV_CLASSES[7] == "Enter" and CV_CLASSES[18] == "Walk"
    assert set(CV_CLASSES) <= set(CS_CLASSES) and "Pour.Fromcup" not in CS_CLASSES


@pytest.fixture
def many_cameras(release_folder: Path, tmp_path: Path) -> Path:
    """The generated clips plus copies under every camera and more subjects, and a CS-only class."""
    mp4 = tmp_path / "mp4"
    shutil.copytree(release_folder / "mp4", mp4)
    source = next(mp4.glob("Enter_*.mp4"))
    for subject in (9, 12, 16, 20, 25):
        for camera in range(1, 8):
            shutil.copy(source, mp4 / f"Walk_p{subject:02d}_r01_v03_c{camera:02d}.mp4")
    shutil.copy(source, mp4 / "Cook.Cut_p03_r00_v01_c01.mp4")
    shutil.copy(source, mp4 / "README.txt")
    return tmp_path


def test_cross_subject_split_and_labels(many_cameras: Path) -> None:
    clips = scan_release(many_cameras)
    splits = split_clips(clips, "cs")
    kept = 0
    for split, items in splits.items():
        for clip, label in items:
            assert clip.subject in CS_SUBJECTS[split]
            assert CS_CLASSES[label] == clip.activity
            kept += 1
    every_cs = [c for c in clips if c.activity != "Pour.Fromcup"]
    assert kept == len(every_cs)
    assert any(clip.activity == "Cook.Cut" for clip, _ in splits["train"])


@pytest.mark.parametrize("protocol", ["cv1", "cv2"])
def test_cross_view_split_by_camera(many_cameras: Path, protocol: str) -> None:
    clips = scan_release(many_cameras)
    splits = split_clips(clips, protocol)
    for split, items in splits.items():
        for clip, label in items:
            assert clip.camera in CV_CAMERAS[protocol][split]
            assert CV_CLASSES[label] == clip.activity
    expected_train = {
        c.path for c in clips if c.camera in CV_CAMERAS[protocol]["train"] and c.activity in CV_CLASSES
    }
    assert {c.path for c, _ in splits["train"]} == expected_train
    assert all(c.activity != "Cook.Cut" for items in splits.values() for c, _ in items)  # CS-only: dropped
    assert sum(c.camera in {3, 4, 6, 7} for c, _ in splits["train"]) == (20 if protocol == "cv2" else 0)


@pytest.mark.parametrize("protocol", ["cs", "cv1", "cv2"])
def test_pour_fromcup_dropped_never_relabelled(release_folder: Path, protocol: str) -> None:
    clips = scan_release(release_folder)
    assert sum(c.activity == "Pour.Fromcup" for c in clips) == 3
    splits = split_clips(clips, protocol)
    kept = [clip for items in splits.values() for clip, _ in items]
    assert all(clip.activity != "Pour.Fromcup" for clip in kept)
    assert len(kept) == len(clips) - 3


def test_path_may_be_the_mp4_folder_itself(release_folder: Path) -> None:
    assert [c.path for c in scan_release(release_folder / "mp4")] == [
        c.path for c in scan_release(release_folder)
    ]


def test_folder_without_clips_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"no clips named <Activity>_pSS_rRR_vVV_cCC\.mp4"):
        scan_release(tmp_path)
    with pytest.raises(DataError, match=r"task\.datamodule\.path=.*not a folder"):
        scan_release(tmp_path / "absent")

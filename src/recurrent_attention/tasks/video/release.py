"""Toyota Smarthome's release layout: clip names, the class lists and the official splits.

Clips are ``mp4/<Activity>_pSS_rRR_vVV_cCC.mp4``: the activity label, the subject ``p``, the
camera ``c`` (1–7); ``r`` and ``v`` are undocumented and only kept. Cross-subject (CS) uses 31
classes and splits by subject; cross-view (CV1, CV2) uses 19 classes and splits by camera. A clip
whose activity is not among the protocol's classes (``Pour.Fromcup`` in every protocol, and the 12
CS-only activities under CV) is dropped, never relabelled. Label = index in the class list.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from pathlib import Path

from recurrent_attention.data import DataError

CS_CLASSES = (
    "Cook.Cleandishes", "Cook.Cleanup", "Cook.Cut", "Cook.Stir", "Cook.Usestove", "Cutbread",
    "Drink.Frombottle", "Drink.Fromcan", "Drink.Fromcup", "Drink.Fromglass", "Eat.Attable",
    "Eat.Snack", "Enter", "Getup", "Laydown", "Leave", "Makecoffee.Pourgrains",
    "Makecoffee.Pourwater", "Maketea.Boilwater", "Maketea.Insertteabag", "Pour.Frombottle",
    "Pour.Fromcan", "Pour.Fromkettle", "Readbook", "Sitdown", "Takepills", "Uselaptop",
    "Usetablet", "Usetelephone", "Walk", "WatchTV",
)  # fmt: skip
CV_CLASSES = (
    "Cutbread", "Drink.Frombottle", "Drink.Fromcan", "Drink.Fromcup", "Drink.Fromglass",
    "Eat.Attable", "Eat.Snack", "Enter", "Getup", "Leave", "Pour.Frombottle", "Pour.Fromcan",
    "Readbook", "Sitdown", "Takepills", "Uselaptop", "Usetablet", "Usetelephone", "Walk",
)  # fmt: skip

CLIP_NAME = re.compile(
    r"^(?P<activity>[A-Za-z.]+)_p(?P<subject>\d+)_r(?P<r>\d+)_v(?P<v>\d+)_c(?P<camera>\d+)\.mp4$"
)
SPLITS = ("train", "val", "test")


@dataclass(frozen=True)
class Protocol:
    """Which clips go to which split (by ``key``: subject or camera) and the class list."""

    name: str
    key: str
    members: dict[str, frozenset[int]]
    classes: tuple[str, ...]

    def split_of(self, clip: Clip) -> str | None:
        value = getattr(clip, self.key)
        return next((split for split, ids in self.members.items() if value in ids), None)


PROTOCOLS = {
    "cs": Protocol(
        "cs",
        "subject",
        {
            "train": frozenset({3, 4, 6, 7, 9, 12, 13, 15, 17}),
            "val": frozenset({19, 25}),
            "test": frozenset({2, 10, 11, 14, 16, 18, 20}),
        },
        CS_CLASSES,
    ),
    "cv1": Protocol(
        "cv1", "camera", {"train": frozenset({1}), "val": frozenset({5}), "test": frozenset({2})}, CV_CLASSES
    ),
    "cv2": Protocol(
        "cv2",
        "camera",
        {"train": frozenset({1, 3, 4, 6, 7}), "val": frozenset({5}), "test": frozenset({2})},
        CV_CLASSES,
    ),
}


@dataclass(frozen=True)
class Clip:
    path: Path
    activity: str
    subject: int
    camera: int
    r: int
    v: int


def parse_clip_name(path: Path) -> Clip | None:
    """The fields of a release file name; None for a name not in the release pattern."""
    match = CLIP_NAME.match(path.name)
    if match is None:
        return None
    fields = match.groupdict()
    return Clip(
        path,
        fields["activity"],
        int(fields["subject"]),
        int(fields["camera"]),
        int(fields["r"]),
        int(fields["v"]),
    )


def clip_folder(path: Path) -> Path:
    """The folder holding the clips: ``path/mp4`` when it exists, else ``path`` itself."""
    path = Path(path).expanduser()
    if not path.is_dir():
        raise DataError(
            f"task.datamodule.path={path} is not a folder: point it at the release folder "
            "(the one holding mp4/, or mp4/ itself)"
        )
    return path / "mp4" if (path / "mp4").is_dir() else path


def scan_release(path: Path) -> list[Clip]:
    """Every release-named clip under the release folder, sorted by name; a warning counts (and
    names a few of) the files skipped because their names do not follow the release pattern."""
    folder = clip_folder(path)
    files = sorted(p for p in folder.iterdir() if p.is_file())
    clips = [clip for p in files if (clip := parse_clip_name(p)) is not None]
    skipped = [p.name for p in files if parse_clip_name(p) is None]
    if skipped:
        warnings.warn(
            f"{folder}: {len(skipped)} file(s) skipped, not named <Activity>_pSS_rRR_vVV_cCC.mp4 "
            f"(e.g. {', '.join(skipped[:3])})",
            stacklevel=2,
        )
    if not clips:
        raise DataError(
            f"{folder}: no clips named <Activity>_pSS_rRR_vVV_cCC.mp4; "
            "point task.datamodule.path at the Toyota Smarthome release folder"
        )
    return clips


def split_clips(clips: list[Clip], protocol: str) -> dict[str, list[tuple[Clip, int]]]:
    """``{split: [(clip, label)]}`` under ``protocol`` (cs, cv1, cv2); other classes are dropped."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"task.protocol={protocol!r}: choose one of {sorted(PROTOCOLS)}")
    rule = PROTOCOLS[protocol]
    labels = {name: index for index, name in enumerate(rule.classes)}
    splits: dict[str, list[tuple[Clip, int]]] = {split: [] for split in SPLITS}
    for clip in clips:
        split = rule.split_of(clip)
        if split is not None and clip.activity in labels:
            splits[split].append((clip, labels[clip.activity]))
    return splits

"""Synthetic clips in Toyota Smarthome's release layout, whose class is the direction of motion.

Each clip shows a bright square on a noisy background moving steadily in one direction; the
direction is the class, mapped onto real activity names that both protocols keep (``Enter``:
right, ``Leave``: left, ``Getup``: up, ``Sitdown``: down). No single frame tells the class (the
start position is random), and playing a clip backwards turns it into another class, so a model
must use frame order. Clips are written as real H.264 mp4 files named
``<Activity>_pSS_rRR_vVV_cCC.mp4`` over subjects and cameras from every split of CS and CV, so the
split rules and the reader see the layout they see on the release.

Run ``python -m recurrent_attention.tasks.video.synthetic OUT --per-class 12`` to write ``OUT/mp4``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

MOTIONS = {"Enter": (0, 1), "Leave": (0, -1), "Getup": (-1, 0), "Sitdown": (1, 0)}
# one subject from each CS split and one camera from each CV split, cycled over the clips
SUBJECTS = {"train": (3, 4, 6, 7), "val": (19, 25), "test": (2, 10, 11, 14)}
CAMERAS = {"train": (1,), "val": (5,), "test": (2,)}


def motion_frames(
    direction: tuple[int, int], n_frames: int, size: int, rng: np.random.Generator, square: int = 6
) -> np.ndarray:
    """``uint8 (n_frames, size, size, 3)``: a square moving along ``direction`` (rows, cols) per frame."""
    travel = size - square
    speed = travel / (n_frames - 1) * rng.uniform(0.6, 1.0)
    span = speed * (n_frames - 1)
    start = [rng.uniform(0, travel) for _ in range(2)]
    for axis, step in enumerate(direction):
        if step > 0:
            start[axis] = rng.uniform(0, travel - span)
        elif step < 0:
            start[axis] = rng.uniform(span, travel)
    background = rng.uniform(20, 90)
    colour = rng.uniform(170, 255, size=3)
    frames = np.empty((n_frames, size, size, 3), dtype=np.uint8)
    for t in range(n_frames):
        row = round(start[0] + direction[0] * speed * t)
        col = round(start[1] + direction[1] * speed * t)
        frame = background + rng.normal(0, 12, size=(size, size, 3))
        frame[row : row + square, col : col + square] = colour
        frames[t] = frame.clip(0, 255).astype(np.uint8)
    return frames


def write_mp4(path: Path, frames: np.ndarray, fps: int = 10) -> None:
    """H.264 (yuv420p) mp4 via PyAV; frame sides must be even."""
    import av

    with av.open(str(path), mode="w") as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.height, stream.width = frames.shape[1:3]
        stream.pix_fmt = "yuv420p"
        stream.options = {"crf": "12", "preset": "ultrafast"}
        for frame in frames:
            container.mux(stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")))
        container.mux(stream.encode())


def clip_name(activity: str, subject: int, repetition: int, camera: int) -> str:
    return f"{activity}_p{subject:02d}_r{repetition:02d}_v{repetition % 20:02d}_c{camera:02d}.mp4"


def generate(
    folder: Path,
    per_class: int = 12,
    n_frames: int = 24,
    size: int = 32,
    seed: int = 0,
    extra_activities: tuple[str, ...] = (),
) -> list[Path]:
    """Write ``per_class`` clips per motion class and per split under ``folder/mp4``; returns the paths.

    Each clip's subject comes from the split's CS subjects and its camera from the split's CV
    cameras, so CS and CV1 both find train, validation and test clips. ``extra_activities`` adds
    clips of other activities (e.g. ``Pour.Fromcup``, which every protocol must drop), moving right.
    """
    rng = np.random.default_rng(seed)
    out = Path(folder) / "mp4"
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    activities = [*MOTIONS, *extra_activities]
    for split in ("train", "val", "test"):
        for activity in activities:
            direction = MOTIONS.get(activity, (0, 1))
            for i in range(per_class):
                subject = SUBJECTS[split][i % len(SUBJECTS[split])]
                camera = CAMERAS[split][i % len(CAMERAS[split])]
                path = out / clip_name(activity, subject, i, camera)
                write_mp4(path, motion_frames(direction, n_frames, size, rng))
                paths.append(path)
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="release folder to create (clips go to FOLDER/mp4)")
    parser.add_argument("--per-class", type=int, default=12, help="clips per class and split")
    parser.add_argument("--frames", type=int, default=24)
    parser.add_argument("--size", type=int, default=32, help="frame side in pixels (even)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    paths = generate(args.folder, args.per_class, args.frames, args.size, args.seed)
    print(f"wrote {len(paths)} clips to {args.folder / 'mp4'}")


if __name__ == "__main__":
    main()

"""Synthetic clips in Toyota Smarthome's release layout, whose class is a motion over time.

Each clip shows a bright square on a noisy background that moves steadily up or down, or grows
or shrinks about its centre; the motion is the class, mapped onto real activity names that both
protocols keep (``Getup``: up, ``Sitdown``: down, ``Enter``: grows as if approaching, ``Leave``:
shrinks). No single frame tells the class (start position and size are random), and playing a
clip backwards turns it into another class, so a model must use frame order. The motions survive
the training augmentation (horizontal flip, scale jitter, crop), which left/right would not.
Clips are written as real H.264 mp4 files named ``<Activity>_pSS_rRR_vVV_cCC.mp4`` over subjects
and cameras from every split of CS and CV, so the split rules and the reader see the release layout.

Run ``python -m recurrent_attention.tasks.video.synthetic OUT --per-class 12`` to write ``OUT/mp4``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

MOTIONS = {"Enter": "grow", "Leave": "shrink", "Getup": "up", "Sitdown": "down"}
# one subject from each CS split and one camera from each CV split, cycled over the clips
SUBJECTS = {"train": (3, 4, 6, 7), "val": (19, 25), "test": (2, 10, 11, 14)}
CAMERAS = {"train": (1,), "val": (5,), "test": (2,)}


def motion_frames(motion: str, n_frames: int, size: int, rng: np.random.Generator) -> np.ndarray:
    """``uint8 (n_frames, size, size, 3)``: a square moving ``up``/``down`` or that ``grow``s/``shrink``s."""
    small, large = size // 8, size // 2
    progress = np.linspace(0.0, 1.0, n_frames) * rng.uniform(0.7, 1.0)
    if motion in ("grow", "shrink"):
        sides = small + (large - small) * (progress if motion == "grow" else 1.0 - progress)
        centre_row = np.full(n_frames, rng.uniform(large / 2, size - large / 2))
    else:
        sides = np.full(n_frames, rng.uniform(size / 6, size / 4))
        low, high = sides[0] / 2, size - sides[0] / 2
        rows = low + (high - low) * progress
        centre_row = rows[::-1] if motion == "up" else rows
    centre_col = rng.uniform(large / 2, size - large / 2)
    background = rng.uniform(20, 90)
    colour = rng.uniform(170, 255, size=3)
    frames = np.empty((n_frames, size, size, 3), dtype=np.uint8)
    for t in range(n_frames):
        half = sides[t] / 2
        top, bottom = round(centre_row[t] - half), round(centre_row[t] + half)
        left, right = round(centre_col - half), round(centre_col + half)
        frame = background + rng.normal(0, 12, size=(size, size, 3))
        frame[max(top, 0) : bottom, max(left, 0) : right] = colour
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
    clips of other activities (e.g. ``Pour.Fromcup``, which every protocol must drop), moving up.
    """
    rng = np.random.default_rng(seed)
    out = Path(folder) / "mp4"
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    activities = [*MOTIONS, *extra_activities]
    for split in ("train", "val", "test"):
        for activity in activities:
            motion = MOTIONS.get(activity, "up")
            for i in range(per_class):
                subject = SUBJECTS[split][i % len(SUBJECTS[split])]
                camera = CAMERAS[split][i % len(CAMERAS[split])]
                path = out / clip_name(activity, subject, i, camera)
                write_mp4(path, motion_frames(motion, n_frames, size, rng))
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

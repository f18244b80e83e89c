"""Toyota Smarthome clips from a folder in the release layout, split by protocol, as model inputs.

Items are ``{"video": (3, T, crop, crop), "y": label}`` for training and validation (one view)
and ``{"video": (V, 3, T, crop, crop), "y": label}`` for the test, with ``V = test_views`` temporal
views that the module combines. Every clip of the three splits is checked before training
(:mod:`~recurrent_attention.tasks.video.scan`).

``rules`` (:class:`~.protocol.VideoProtocol`) is the evaluation protocol (the README and
docs/video.md set them side by side):

- ``default``: validation on the central temporal view, short side resized to the crop, centre
  crop (deterministic, so epochs compare); test views the same way; frame indices rounded.
- ``reference`` (PI-ViT's Smarthome code, the protocol of CRT Table 7's numbers): validation on a
  random training-style view (random window, scale jitter, random crop and flip); test views with
  the short side resized to ``short_side_min`` (256) then centre-cropped (224); frame indices
  truncated as the official decoder does.
"""

from __future__ import annotations

from pathlib import Path

import lightning as L
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from recurrent_attention.data import DataError
from recurrent_attention.tasks.base import loader_options, make_loader
from recurrent_attention.tasks.video.frames import (
    eval_transform,
    normalise,
    read_frames,
    train_transform,
    window_indices,
)
from recurrent_attention.tasks.video.protocol import DEFAULT, VideoProtocol
from recurrent_attention.tasks.video.release import PROTOCOLS, Clip, scan_release, split_clips
from recurrent_attention.tasks.video.scan import scan_clips


class ClipSet(Dataset):
    """Clips with labels; ``views=0`` draws one random training view, else ``views`` fixed views.

    ``lengths``: frames per clip (from the up-front scan). Fixed views are resized so that their
    short side is ``eval_short_side`` (the crop when None) and centre-cropped; ``truncate`` cuts
    fractional frame positions down instead of rounding them.
    """

    def __init__(
        self,
        items: list[tuple[Clip, int]],
        lengths: dict[Path, int],
        n_frames: int,
        stride: int,
        crop_size: int,
        short_side: tuple[int, int],
        mean: list[float],
        std: list[float],
        views: int = 0,
        eval_short_side: int | None = None,
        truncate: bool = False,
    ) -> None:
        self.items, self.lengths, self.n_frames, self.stride = items, lengths, n_frames, stride
        self.crop_size, self.short_side, self.views = crop_size, short_side, views
        self.mean, self.std = mean, std
        self.eval_short_side, self.truncate = eval_short_side, truncate

    def __len__(self) -> int:
        return len(self.items)

    def indices(self, length: int, fraction: float) -> list[int]:
        return window_indices(length, self.n_frames, self.stride, fraction, self.truncate)

    def __getitem__(self, index: int) -> dict[str, Tensor]:
        clip, label = self.items[index]
        length = self.lengths[clip.path]
        if self.views == 0:
            frames, _ = read_frames(clip.path, self.indices(length, float(torch.rand(()))))
            video = normalise(train_transform(frames, self.crop_size, self.short_side), self.mean, self.std)
            return {"video": video, "y": torch.tensor(label)}
        fractions = [0.5] if self.views == 1 else [i / self.views for i in range(self.views)]
        per_view = [self.indices(length, f) for f in fractions]
        frames, _ = read_frames(clip.path, [i for view in per_view for i in view])
        views = [
            normalise(eval_transform(chunk, self.crop_size, self.eval_short_side), self.mean, self.std)
            for chunk in frames.split(self.n_frames)
        ]
        video = views[0] if self.views == 1 else torch.stack(views)
        return {"video": video, "y": torch.tensor(label)}


class SmarthomeDataModule(L.LightningDataModule):
    """``path``: the release folder (holding ``mp4/``) or ``mp4/`` itself; ``protocol``: cs, cv1, cv2.

    ``n_classes`` comes from the config (the model is built first) and is checked against the
    protocol's class list. ``scan_cache``: the JSON file remembering which clips were checked
    (None: check every clip on every start).
    """

    def __init__(
        self,
        path: str | None,
        protocol: str,
        n_classes: int,
        n_frames: int = 16,
        stride: int = 16,
        crop_size: int = 224,
        short_side_min: int = 256,
        short_side_max: int = 320,
        mean: tuple[float, float, float] = (0.45, 0.45, 0.45),
        std: tuple[float, float, float] = (0.225, 0.225, 0.225),
        test_views: int = 10,
        batch_size: int = 8,
        eval_batch_size: int = 4,
        num_workers: int = 0,
        pin_memory: bool = False,
        persistent_workers: bool = False,
        rules: VideoProtocol = DEFAULT,
        scan_cache: str | None = None,
    ) -> None:
        super().__init__()
        if protocol not in PROTOCOLS:
            raise ValueError(f"task.protocol={protocol!r}: choose one of {sorted(PROTOCOLS)}")
        if n_classes != len(PROTOCOLS[protocol].classes):
            expected = len(PROTOCOLS[protocol].classes)
            raise ValueError(f"task.n_classes={n_classes} but protocol {protocol} has {expected} classes")
        self.path, self.protocol = path, protocol
        self.sampling = {
            "n_frames": n_frames,
            "stride": stride,
            "crop_size": crop_size,
            "short_side": (short_side_min, short_side_max),
            "mean": list(mean),
            "std": list(std),
        }
        self.test_views, self.batch_size, self.eval_batch_size = test_views, batch_size, eval_batch_size
        self.rules = rules
        self.loader_options = loader_options(num_workers, pin_memory, persistent_workers)
        self.scan_cache = None if scan_cache is None else Path(scan_cache).expanduser()
        self.datasets: dict[str, ClipSet] = {}

    def setup(self, stage: str | None = None) -> None:
        if self.datasets:
            return
        if self.path is None:
            raise DataError(
                "task.datamodule.path is not set: point it at the Toyota Smarthome release folder "
                "(the one holding mp4/, or mp4/ itself); the release is on request from its authors"
            )
        splits = split_clips(scan_release(Path(self.path)), self.protocol)
        for split, items in splits.items():
            if not items:
                raise DataError(
                    f"{self.path}: no {split} clips under protocol {self.protocol} "
                    f"(its {PROTOCOLS[self.protocol].key} rule selects none of the clips)"
                )
        paths = [clip.path for items in splits.values() for clip, _ in items]
        lengths = scan_clips(paths, self.sampling["n_frames"], self.scan_cache)
        views = {"train": 0, "val": 0 if self.rules.val_view == "random" else 1, "test": self.test_views}
        evaluation = {
            "eval_short_side": self.sampling["short_side"][0]
            if self.rules.eval_short_side == "short_side_min"
            else None,
            "truncate": self.rules.truncate_frame_indices,
        }
        self.datasets = {
            split: ClipSet(items, lengths, **self.sampling, views=views[split], **evaluation)
            for split, items in splits.items()
        }

    def train_dataloader(self) -> DataLoader:
        return make_loader(
            self.datasets["train"],
            self.batch_size,
            shuffle=True,
            **self.loader_options,
            drop_last=False,
        )

    def val_dataloader(self) -> DataLoader:
        return make_loader(self.datasets["val"], self.eval_batch_size, shuffle=False, **self.loader_options)

    def test_dataloader(self) -> DataLoader:
        return make_loader(self.datasets["test"], self.eval_batch_size, shuffle=False, **self.loader_options)

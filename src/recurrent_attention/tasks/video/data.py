"""Toyota Smarthome clips from a folder in the release layout, split by protocol, as model inputs.

Items are ``{"video": (3, T, crop, crop), "y": label}`` for training and validation (one central
view) and ``{"video": (V, 3, T, crop, crop), "y": label}`` for the test, with ``V = test_views``
temporal views that the module combines.
"""

from __future__ import annotations

from pathlib import Path

import lightning as L
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from recurrent_attention.data import DataError
from recurrent_attention.tasks.base import make_loader
from recurrent_attention.tasks.video.frames import (
    eval_transform,
    frame_count,
    normalise,
    read_frames,
    train_transform,
    window_indices,
)
from recurrent_attention.tasks.video.release import PROTOCOLS, Clip, scan_release, split_clips


class ClipSet(Dataset):
    """Clips with labels; ``views=0`` draws one random training view, else ``views`` fixed views."""

    def __init__(
        self,
        items: list[tuple[Clip, int]],
        n_frames: int,
        stride: int,
        crop_size: int,
        short_side: tuple[int, int],
        mean: list[float],
        std: list[float],
        views: int = 0,
    ) -> None:
        self.items, self.n_frames, self.stride = items, n_frames, stride
        self.crop_size, self.short_side, self.views = crop_size, short_side, views
        self.mean, self.std = mean, std

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> dict[str, Tensor]:
        clip, label = self.items[index]
        length = frame_count(clip.path)
        if self.views == 0:
            indices = window_indices(length, self.n_frames, self.stride, float(torch.rand(())))
            frames, _ = read_frames(clip.path, indices)
            video = normalise(train_transform(frames, self.crop_size, self.short_side), self.mean, self.std)
            return {"video": video, "y": torch.tensor(label)}
        fractions = [0.5] if self.views == 1 else [i / self.views for i in range(self.views)]
        per_view = [window_indices(length, self.n_frames, self.stride, f) for f in fractions]
        frames, _ = read_frames(clip.path, [i for view in per_view for i in view])
        views = [
            normalise(eval_transform(chunk, self.crop_size), self.mean, self.std)
            for chunk in frames.split(self.n_frames)
        ]
        video = views[0] if self.views == 1 else torch.stack(views)
        return {"video": video, "y": torch.tensor(label)}


class SmarthomeDataModule(L.LightningDataModule):
    """``path``: the release folder (holding ``mp4/``) or ``mp4/`` itself; ``protocol``: cs, cv1, cv2.

    ``n_classes`` comes from the config (the model is built first) and is checked against the
    protocol's class list.
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
        self.num_workers = num_workers
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
        views = {"train": 0, "val": 1, "test": self.test_views}
        self.datasets = {
            split: ClipSet(items, **self.sampling, views=views[split]) for split, items in splits.items()
        }

    def train_dataloader(self) -> DataLoader:
        return make_loader(
            self.datasets["train"],
            self.batch_size,
            shuffle=True,
            num_workers=self.num_workers,
            drop_last=False,
        )

    def val_dataloader(self) -> DataLoader:
        return make_loader(
            self.datasets["val"], self.eval_batch_size, shuffle=False, num_workers=self.num_workers
        )

    def test_dataloader(self) -> DataLoader:
        return make_loader(
            self.datasets["test"], self.eval_batch_size, shuffle=False, num_workers=self.num_workers
        )

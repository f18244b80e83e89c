"""Decode, sample and augment clips as TimeSformer / PI-ViT do (SlowFast's video pipeline).

Temporal sampling: a window of ``n_frames * stride`` frames; ``n_frames`` indices evenly spaced in
it (clamped to the clip, so a short clip repeats frames; rounded, or truncated as the official
decoder does). Training draws the window's start uniformly; evaluation view ``i`` of ``V`` starts at
``i / V`` of the free range (SlowFast's ``delta * clip_idx / num_clips``). Spatial: training
rescales the short side to a random size in ``[short_side_min, short_side_max]``, crops
``crop_size`` at random and flips half the clips; evaluation rescales the short side to a given
size (``crop_size``, or PI-ViT's ``short_side_min``) and takes the centre crop. Pixels are scaled
to [0, 1] and normalised by ``mean`` and ``std`` (TimeSformer: 0.45 and 0.225).

Decoding uses PyAV (it bundles FFmpeg). A missing, empty or undecodable file raises
:class:`~recurrent_attention.data.DataError` naming it.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from recurrent_attention.data import DataError


def _open(path: Path):
    import av

    if not path.is_file():
        raise DataError(f"{path}: clip missing; restore it from the release or remove it from the folder")
    if path.stat().st_size == 0:
        raise DataError(f"{path}: clip is an empty file; restore it from the release or remove it")
    try:
        container = av.open(str(path))
    except av.FFmpegError as err:
        raise DataError(f"{path}: clip cannot be decoded ({err}); restore it from the release") from err
    if not container.streams.video:
        container.close()
        raise DataError(f"{path}: clip has no video stream (audio only?); restore it from the release")
    return container


def read_frames(path: Path, wanted: list[int] | None = None) -> tuple[Tensor, int]:
    """The clip's frames at indices ``wanted`` (all when None) as ``uint8 (N, H, W, 3)``, and its length.

    Decodes once from the start and keeps only the frames asked for, so long clips stay cheap in
    memory. Indices at or past the end are clamped to the last frame.
    """
    import av

    container = _open(path)
    keep = None if wanted is None else set(wanted)
    kept: dict[int, Tensor] = {}
    count, last = 0, None
    try:
        with container:
            for count, frame in enumerate(container.decode(video=0), start=1):
                last = frame
                if keep is None or count - 1 in keep:
                    kept[count - 1] = torch.from_numpy(frame.to_ndarray(format="rgb24"))
    except av.FFmpegError as err:
        raise DataError(f"{path}: clip cannot be decoded ({err}); restore it from the release") from err
    if last is None:
        raise DataError(f"{path}: clip holds no video frames; restore it from the release or remove it")
    if wanted is None:
        return torch.stack([kept[i] for i in range(count)]), count
    if count - 1 not in kept:
        kept[count - 1] = torch.from_numpy(last.to_ndarray(format="rgb24"))
    return torch.stack([kept[min(i, count - 1)] for i in wanted]), count


def window_indices(
    length: int, n_frames: int, stride: int, start_fraction: float, truncate: bool = False
) -> list[int]:
    """``n_frames`` indices evenly spaced over a ``n_frames * stride`` window of a ``length``-frame clip.

    ``start_fraction`` in [0, 1] places the window's start within the free range ``length - window``.
    Fractional positions are rounded to the nearest frame, or with ``truncate`` cut down as the
    official decoder does (``.long()`` on the window's start, then on each offset in it).
    """
    window = n_frames * stride
    start = max(length - window, 0) * start_fraction
    if truncate:
        offsets = torch.linspace(0, window - 1, n_frames).long()
        return (int(start) + offsets).clamp(0, length - 1).tolist()
    spaced = torch.linspace(start, start + window - 1, n_frames)
    return spaced.round().clamp(0, length - 1).long().tolist()


def resize_short_side(frames: Tensor, size: int) -> Tensor:
    """``(T, C, H, W)`` float -> the short side ``size``, aspect kept (bilinear)."""
    H, W = frames.shape[-2:]
    scale = size / min(H, W)
    new = (max(size, round(H * scale)), max(size, round(W * scale)))
    return F.interpolate(frames, size=new, mode="bilinear", align_corners=False)


def crop(frames: Tensor, top: int, left: int, size: int) -> Tensor:
    return frames[..., top : top + size, left : left + size]


def train_transform(frames: Tensor, crop_size: int, short_side: tuple[int, int]) -> Tensor:
    """``uint8 (T, H, W, 3)`` -> float ``(T, 3, crop, crop)``: scale jitter, random crop, random flip."""
    x = frames.permute(0, 3, 1, 2).float()
    x = resize_short_side(x, int(torch.randint(short_side[0], short_side[1] + 1, ()).item()))
    top = int(torch.randint(0, x.shape[-2] - crop_size + 1, ()).item())
    left = int(torch.randint(0, x.shape[-1] - crop_size + 1, ()).item())
    x = crop(x, top, left, crop_size)
    return x.flip(-1) if torch.rand(()) < 0.5 else x


def eval_transform(frames: Tensor, crop_size: int, short_side: int | None = None) -> Tensor:
    """``uint8 (T, H, W, 3)`` -> float ``(T, 3, crop, crop)``: short side to ``short_side`` (the crop
    when None), centre crop."""
    x = resize_short_side(frames.permute(0, 3, 1, 2).float(), short_side or crop_size)
    top, left = (x.shape[-2] - crop_size) // 2, (x.shape[-1] - crop_size) // 2
    return crop(x, top, left, crop_size)


def normalise(x: Tensor, mean: list[float], std: list[float]) -> Tensor:
    """``(T, 3, H, W)`` in [0, 255] -> ``(3, T, H, W)`` normalised, the layout the model reads."""
    mean_t = torch.tensor(mean).view(1, 3, 1, 1)
    std_t = torch.tensor(std).view(1, 3, 1, 1)
    return ((x / 255.0 - mean_t) / std_t).transpose(0, 1).contiguous()

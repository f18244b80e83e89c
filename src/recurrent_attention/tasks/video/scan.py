"""Every clip a run will read, checked before training starts: decodable, with enough frames.

Reading a clip happens deep inside a data loader, often only at test time after hours of
training; a zero-byte, truncated or audio-only file should stop the run at the start instead, and
all bad clips should be named at once, not one per attempt. The check demuxes every packet of the
video stream (cheap: no decoding), decodes the first frame, and compares the packet count with
the frame count the header states (fewer packets: the file was cut short). Results are cached in
a JSON file keyed by the clip's path, size and modification time, so a folder is checked once and
a replaced clip is checked again.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from recurrent_attention.data import DataError

LISTED = 20  # bad clips named in the error; the count covers the rest


def probe(path: Path) -> tuple[int, str | None]:
    """``(frames, None)`` for a usable clip, else ``(0, why it is not)``."""
    import av

    if not path.is_file():
        return 0, "missing"
    if path.stat().st_size == 0:
        return 0, "empty file"
    try:
        with av.open(str(path)) as container:
            if not container.streams.video:
                return 0, "no video stream (audio only?)"
            stream = container.streams.video[0]
            stated, packets, decoded = int(stream.frames or 0), 0, False
            for packet in container.demux(stream):
                if not packet.size:  # the demuxer's final flush packet
                    continue
                packets += 1
                decoded = decoded or bool(packet.decode())
    except av.FFmpegError as err:
        return 0, f"cannot be decoded ({err})"
    if packets and not decoded:  # a decoder holding frames back gives them at the flush
        decoded = _decodes_any(path)
    if not decoded:
        return 0, "no frame decodes"
    if stated and packets < stated:
        return 0, f"cut short: the header states {stated} frames, {packets} are there"
    return packets, None


def _decodes_any(path: Path) -> bool:
    import av

    try:
        with av.open(str(path)) as container:
            return next(container.decode(video=0), None) is not None
    except av.FFmpegError:
        return False


def scan_clips(paths: list[Path], min_frames: int, cache: Path | None) -> dict[Path, int]:
    """Frames per clip; one :class:`DataError` naming every unusable clip (fewer than ``min_frames``
    frames counts as unusable). ``cache``: the JSON file that remembers earlier checks (None: none)."""
    known = _read_cache(cache)
    lengths: dict[Path, int] = {}
    bad: list[str] = []
    for path in paths:
        stat = path.stat() if path.is_file() else None
        key = str(path.resolve())
        stamp = [stat.st_size, stat.st_mtime_ns] if stat else None
        entry = known.get(key)
        if stamp is None or entry is None or entry["stamp"] != stamp:
            frames, why = probe(path)
            entry = {"stamp": stamp, "frames": frames, "error": why}
            if stamp is not None:
                known[key] = entry
        if entry["error"] is None and entry["frames"] < min_frames:
            entry = {**entry, "error": f"{entry['frames']} frames, fewer than task.n_frames={min_frames}"}
        if entry["error"] is None:
            lengths[path] = entry["frames"]
        else:
            bad.append(f"{path.name} ({entry['error']})")
    _write_cache(cache, known)
    if bad:
        more = f"; and {len(bad) - LISTED} more" if len(bad) > LISTED else ""
        raise DataError(
            f"{len(bad)} unusable clip(s) in {paths[0].parent}: {'; '.join(bad[:LISTED])}{more}; "
            "restore them from the release or remove them from the folder"
        )
    return lengths


def _read_cache(cache: Path | None) -> dict[str, dict]:
    if cache is None or not cache.is_file():
        return {}
    try:
        return json.loads(cache.read_text())
    except (OSError, ValueError):  # an unreadable cache is only a slower start
        return {}


def _write_cache(cache: Path | None, known: dict[str, dict]) -> None:
    if cache is None:
        return
    cache.parent.mkdir(parents=True, exist_ok=True)
    partial = cache.with_suffix(f".{os.getpid()}.partial")  # DDP ranks each write their own
    partial.write_text(json.dumps(known))
    partial.replace(cache)

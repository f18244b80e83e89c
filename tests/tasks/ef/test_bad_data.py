"""Bad values in the THP pickle, EasyTPP JSON and Meta TPP ``.npz`` readers: one DataError line
naming the file, the sequence and the event. Before these checks NaN times ran to NaN metrics,
a fractional mark was truncated to an integer, and a truncated file raised the parser's traceback."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pytest

from recurrent_attention.data import DataError
from recurrent_attention.tasks.ef.data import EFDataModule
from recurrent_attention.tasks.ef.formats import read_easytpp_json, read_meta_tpp_npz, read_thp_pickle
from tests.tasks.ef.test_formats import write_easytpp, write_meta_tpp, write_thp

NAN, INF = float("nan"), float("inf")


def one_line(info: pytest.ExceptionInfo, path: Path, *parts: str) -> None:
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{path}: "), message
    for part in parts:
        assert part in message, message


def edit_thp(folder: Path, edit) -> Path:
    path = folder / "train.pkl"
    data = pickle.loads(path.read_bytes())
    edit(data["train"])
    path.write_bytes(pickle.dumps(data, protocol=2))
    return path


@pytest.mark.parametrize(
    ("edit", "parts"),
    [
        (lambda s: s[1][1].update(time_since_start=NAN), ["sequence 1, event 1, time: nan"]),
        (lambda s: s[0][1].update(time_since_start=INF), ["sequence 0, event 1, time: inf"]),
        (lambda s: s[0][1].update(time_since_start=None), ["sequence 0, event 1, time: nan"]),
        (lambda s: s[0][1].update(time_since_start="0.5s"), ["sequence 0:", "not a number"]),
        (lambda s: s[0][2].update(type_event=1.7), ["sequence 0, event 2: mark 1.7 is not an integer"]),
        (lambda s: s[0][2].pop("type_event"), ["sequence 0:", "'type_event'"]),
        (lambda s: s[0][2].update(time_since_start=-1.0), ["sequence 0:", "non-decreasing"]),
    ],
    ids=["nan", "inf", "none", "text", "fractional-mark", "missing-key", "time-goes-back"],
)
def test_thp_pickle_bad_event(tmp_path: Path, edit, parts: list[str]) -> None:
    write_thp(tmp_path)
    path = edit_thp(tmp_path, edit)
    with pytest.raises(DataError) as info:
        read_thp_pickle(path, "train")
    one_line(info, path, *parts)


@pytest.mark.parametrize(
    ("edit", "parts"),
    [
        (lambda r: r[1]["time_since_start"].__setitem__(1, NAN), ["sequence 1, event 1, time: nan"]),
        (lambda r: r[0]["time_since_start"].__setitem__(2, INF), ["sequence 0, event 2, time: inf"]),
        (lambda r: r[0]["time_since_start"].__setitem__(2, None), ["sequence 0, event 2, time: nan"]),
        (lambda r: r[0]["type_event"].__setitem__(0, None), ["sequence 0, event 0, mark: nan"]),
        (lambda r: r[0].pop("time_since_start"), ["expected a list of sequences"]),
    ],
    ids=["nan", "inf", "null-time", "null-mark", "missing-key"],
)
def test_easytpp_json_bad_event(tmp_path: Path, edit, parts: list[str]) -> None:
    write_easytpp(tmp_path)
    path = tmp_path / "train.json"
    records = json.loads(path.read_text())
    edit(records)
    path.write_text(json.dumps(records))  # NaN and Infinity are written as JSON's own extensions
    with pytest.raises(DataError) as info:
        read_easytpp_json(path)
    one_line(info, path, *parts)


@pytest.mark.parametrize(("value", "shown"), [(NAN, "nan"), (INF, "inf"), (-INF, "-inf")])
def test_meta_tpp_npz_non_finite_time_at_an_event(tmp_path: Path, value: float, shown: str) -> None:
    path = tmp_path / "x.npz"
    write_meta_tpp(path)
    arrays = dict(np.load(path))
    arrays["times"][3, 1] = value
    np.savez(path, **arrays)
    with pytest.raises(DataError) as info:
        read_meta_tpp_npz(path)
    one_line(info, path, f"times[3, 1]: {shown} is not a finite number")


def test_meta_tpp_npz_ignores_padding(tmp_path: Path) -> None:
    """Padded slots (mask 0) are not events: whatever they hold is never read."""
    path = tmp_path / "x.npz"
    write_meta_tpp(path, n_copies=1)
    arrays = dict(np.load(path))
    arrays["times"][1, 3] = NAN  # sequence 1 has two events; slot 3 is padding
    np.savez(path, **arrays)
    assert len(read_meta_tpp_npz(path)[1]) == 2


@pytest.mark.parametrize("fmt", ["thp", "easytpp", "meta_tpp"])
@pytest.mark.parametrize("damage", ["truncated", "empty", "other-format"])
def test_truncated_empty_or_foreign_file_is_one_line_through_the_datamodule(
    tmp_path: Path, fmt: str, damage: str
) -> None:
    if fmt == "meta_tpp":
        path = folder = tmp_path / "wiki.npz"
        write_meta_tpp(path)
    else:
        folder = tmp_path
        (write_thp if fmt == "thp" else write_easytpp)(folder)
        path = folder / ("train.pkl" if fmt == "thp" else "train.json")
    raw = path.read_bytes()
    path.write_bytes(
        {"truncated": raw[: len(raw) // 2], "empty": b"", "other-format": b"date,OT\n1,2\n"}[damage]
    )
    dm = EFDataModule("unused", fmt, n_marks=3, path=str(folder))
    with pytest.raises(DataError) as info:
        dm.setup()
    one_line(info, path, "not a readable")

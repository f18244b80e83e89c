"""A reader for the sktime ``.ts`` format, as the UEA archive distributes it.

A file is ``#`` comment lines, a header of ``@tag value`` lines ending with ``@data``, then one case
per line: the channels separated by ``:``, each a comma-separated series (``?`` marks a missing
value, the only one: a written NaN or inf is an error), and the class label last. Lengths may
differ between cases (``@equalLength false``) but not between the channels of one case. Every
format error names the file and the line.
Time stamps (``@timeStamps true``) and regression targets (``@targetLabel``) are not supported: no
benchmark of Table 4 uses them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from recurrent_attention.data import DataError
from recurrent_attention.data.reading import reading, require_finite

BOOLEAN_TAGS = ("timestamps", "missing", "univariate", "equallength")
INTEGER_TAGS = ("dimensions", "serieslength")


class TSFormatError(DataError):
    """A malformed ``.ts`` file; the message starts with ``path:line:``."""


@dataclass
class TSData:
    """The cases of one ``.ts`` file: ``series[i]`` is ``(length_i, channels)``, NaN where missing."""

    problem_name: str
    class_names: list[str]
    series: list[np.ndarray]
    labels: np.ndarray  # int64 indices into class_names
    header: dict[str, str] = field(default_factory=dict)

    @property
    def n_channels(self) -> int:
        return self.series[0].shape[1]

    @property
    def lengths(self) -> np.ndarray:
        return np.array([len(s) for s in self.series], dtype=np.int64)


def _decode(raw: bytes) -> str:
    """UTF-8, or Latin-1 when a comment carries legacy bytes (the UEA Handwriting files do)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def _boolean(value: str, where: str, tag: str) -> bool:
    if value.lower() not in ("true", "false"):
        raise TSFormatError(f"{where}: @{tag} must be true or false, got {value!r}")
    return value.lower() == "true"


def _integer(value: str, where: str, tag: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = -1
    if number < 1:
        raise TSFormatError(f"{where}: @{tag} must be a positive integer, got {value!r}")
    return number


def _series(text: str, where: str, channel: int) -> np.ndarray:
    """One channel of a case; ``?`` is the only missing value, so a written NaN or inf is an error."""
    values = text.strip().split(",")
    try:
        series = np.array([np.nan if v.strip() == "?" else float(v) for v in values], dtype=np.float64)
    except ValueError:
        bad = next(v for v in values if v.strip() != "?" and not _is_float(v))
        raise TSFormatError(f"{where}: channel {channel + 1} holds {bad!r}, not a number or '?'") from None
    if not np.isfinite(series).all():
        missing = np.array([v.strip() == "?" for v in values])
        require_finite(series, where, lambda i: f"channel {channel + 1}, value {i[0] + 1}", allowed=missing)
    return series


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _label_index(label: str, class_names: list[str], where: str) -> int:
    """Exact match first; ``1`` also matches a declared ``1.0`` (numeric labels are written both ways)."""
    if label in class_names:
        return class_names.index(label)
    if _is_float(label):
        numeric = [i for i, name in enumerate(class_names) if _is_float(name) and float(name) == float(label)]
        if len(numeric) == 1:
            return numeric[0]
    raise TSFormatError(f"{where}: class label {label!r} is not in @classLabel {' '.join(class_names)}")


def parse_ts(text: str, source: str = "<string>") -> TSData:
    """Parse the text of a ``.ts`` file; ``source`` names it in error messages."""
    header: dict[str, str] = {}
    flags: dict[str, bool] = {}
    sizes: dict[str, int] = {}
    class_names: list[str] | None = None
    series: list[np.ndarray] = []
    labels: list[int] = []
    in_data = False
    for number, raw_line in enumerate(text.splitlines(), start=1):
        line = raw_line.strip()
        where = f"{source}:{number}"
        if not line or line.startswith("#"):
            continue
        if not in_data:
            if not line.startswith("@"):
                raise TSFormatError(
                    f"{where}: expected a @tag line or @data before the data, got {line[:40]!r}"
                )
            tag, _, value = line[1:].partition(" ")
            tag, value = tag.lower(), value.strip()
            header[tag] = value
            if tag == "data":
                if class_names is None:
                    raise TSFormatError(f"{where}: @data before @classLabel; a classification file needs one")
                in_data = True
            elif tag in BOOLEAN_TAGS:
                flags[tag] = _boolean(value, where, tag)
                if tag == "timestamps" and flags[tag]:
                    raise TSFormatError(f"{where}: @timeStamps true is not supported")
            elif tag in INTEGER_TAGS:
                sizes[tag] = _integer(value, where, tag)
            elif tag == "classlabel":
                parts = value.split()
                if not parts or not _boolean(parts[0], where, tag):
                    raise TSFormatError(f"{where}: @classLabel must be 'true' followed by the class names")
                class_names = parts[1:]
                if not class_names:
                    raise TSFormatError(f"{where}: @classLabel true lists no class names")
            elif tag == "targetlabel":
                raise TSFormatError(f"{where}: @targetLabel (regression) is not supported")
            elif tag != "problemname":
                raise TSFormatError(f"{where}: unknown header tag @{tag}")
            continue
        assert class_names is not None
        *channels, label = line.split(":")
        expected = sizes.get("dimensions", 1 if flags.get("univariate", False) else None)
        if not channels:
            raise TSFormatError(f"{where}: a case needs at least one channel before the class label")
        if expected is not None and len(channels) != expected:
            raise TSFormatError(f"{where}: {len(channels)} channels, the header declares {expected}")
        columns = [_series(c, where, i) for i, c in enumerate(channels)]
        if len({len(c) for c in columns}) > 1:
            raise TSFormatError(
                f"{where}: channels of one case differ in length ({[len(c) for c in columns]})"
            )
        if flags.get("equallength") and "serieslength" in sizes and len(columns[0]) != sizes["serieslength"]:
            raise TSFormatError(
                f"{where}: length {len(columns[0])}, @seriesLength declares {sizes['serieslength']}"
            )
        if series and len(columns) != series[0].shape[1]:
            raise TSFormatError(f"{where}: {len(columns)} channels, earlier cases have {series[0].shape[1]}")
        series.append(np.stack(columns, axis=1))
        labels.append(_label_index(label.strip(), class_names, where))
    if not in_data:
        raise TSFormatError(f"{source}: no @data line")
    if not series:
        raise TSFormatError(f"{source}: no cases after @data")
    assert class_names is not None
    return TSData(
        header.get("problemname", ""), class_names, series, np.array(labels, dtype=np.int64), header
    )


def read_ts(path: str | Path) -> TSData:
    """Read and parse one ``.ts`` file."""
    with reading(path, "sktime .ts file"):
        raw = Path(path).read_bytes()
    return parse_ts(_decode(raw), str(path))

"""What every reader of a data file shares: the file named in its errors, finite numbers, scaling statistics.

A bad file must stop a run with one :class:`DataError` line naming the file, the place in it and
the problem, before a NaN reaches a loss (a NaN metric) or an ``inf`` a scaler (a silently zeroed
channel). Readers call these helpers instead of repeating the checks.
"""

from __future__ import annotations

import pickle
import zipfile
import zlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from recurrent_attention.data.download import first_line
from recurrent_attention.errors import DataError

Locate = Callable[[tuple[int, ...]], str]

# What a parser raises on a file that is empty, truncated or in another format.
PARSE_ERRORS = (
    EOFError,
    ValueError,
    pickle.UnpicklingError,
    zipfile.BadZipFile,
    zlib.error,
    UnicodeDecodeError,
)


def require_finite(
    values: np.ndarray, file: str | Path, locate: Locate, allowed: np.ndarray | None = None
) -> None:
    """Raise at the first NaN or infinite entry of ``values`` not marked ``allowed``.

    ``locate`` turns the entry's index into the place a user looks for in the file ("line 7,
    column 'OT'"). The scan is one vectorised pass; the index is found only on failure.
    """
    finite = np.isfinite(values)
    if allowed is not None:
        finite |= allowed
    if finite.all():
        return
    index = tuple(int(i) for i in np.argwhere(~finite)[0])
    raise DataError(
        f"{file}: {locate(index)}: {values[index]} is not a finite number "
        "(blank, NaN, inf, or beyond the float64 range); fix or drop that entry"
    )


def require_scalable(mean: np.ndarray, std: np.ndarray, file: str | Path, columns: Sequence[str]) -> None:
    """Refuse standardisation statistics that overflowed float64.

    Values beyond about 1e154 overflow the variance (values near 1e308 the mean) to ``inf``, and
    ``x / inf`` would turn the channel into zeros without a word. Zero standard deviations are not
    handled here: each scaler documents its own rule for constant channels.
    """
    bad = ~(np.isfinite(mean) & np.isfinite(std))
    if bad.any():
        column = int(np.flatnonzero(bad)[0])
        raise DataError(
            f"{file}: {columns[column]}: values too large to standardise (mean {mean[column]:.3g}, "
            f"std {std[column]:.3g} overflow float64); rescale that column"
        )


@contextmanager
def reading(file: str | Path, kind: str) -> Iterator[None]:
    """Turn a parser's own exception (empty, truncated, other format) into one :class:`DataError` line.

    Wrap only the call that parses the file, so that errors of the reader's own logic still
    surface as what they are.
    """
    try:
        yield
    except FileNotFoundError:
        raise DataError(f"{file}: no such file (expected {kind})") from None
    except IsADirectoryError:
        raise DataError(f"{file}: a folder, not a {kind}; give the path of the file itself") from None
    except DataError:
        raise
    except PARSE_ERRORS as err:
        raise DataError(f"{file}: not a readable {kind} ({type(err).__name__}: {first_line(err)})") from None

"""The Hugging Face ``datasets`` route: a dataset split written back as the release's text file.

Hugging Face built ``Salesforce/wikitext`` from the release zips with one row per line of
``wiki.*.tokens``: a line that holds words is kept whole, trailing ``"\\n"`` included, and a blank
line (``" \\n"`` in the release) became the empty string. Writing the rows back with that rule
reproduces the release files byte for byte, so one reader and one set of checksums serve both
routes. ``datasets`` is an optional dependency (``pip install 'recurrent-attention[hf]'``),
imported only when this route runs.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

from tqdm import tqdm

from recurrent_attention.data.sources import HFDataset

BLANK_LINE = " \n"  # how the release writes an empty line
INSTALL_HINT = "pip install 'recurrent-attention[hf]'"
ROWS_PER_READ = 10_000


class HFRouteError(RuntimeError):
    """The ``datasets`` route cannot run here (package missing, Hub unreachable, unexpected rows)."""


def describe(spec: HFDataset) -> str:
    name = f"{spec.path}:{spec.name}" if spec.name else spec.path
    return f"Hugging Face datasets {name}" + (f"@{spec.revision}" if spec.revision else "")


def release_line(row: str, where: str) -> str:
    """The release's line for one dataset row; anything but one newline-terminated line is an error."""
    if row == "":
        return BLANK_LINE
    if not row.endswith("\n") or "\n" in row[:-1]:
        raise HFRouteError(f"{where}: a row is not one line ending in a newline: {row[:60]!r}")
    return row


def write_split(rows: Iterable[str], dest: Path, total: int | None = None) -> int:
    """Write ``rows`` (the ``text`` column of a split) to ``dest`` as release lines; returns the line count.

    The file appears under its name only once complete (temporary name, then rename).
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with tempfile.NamedTemporaryFile(
        "w", encoding="utf-8", newline="", dir=dest.parent, prefix=f".{dest.name}.", delete=False
    ) as tmp:
        try:
            with tqdm(total=total, unit=" lines", unit_scale=True, desc=dest.name) as bar:
                for row in rows:
                    tmp.write(release_line(row, str(dest)))
                    count += 1
                    bar.update()
        except BaseException:
            tmp.close()
            os.unlink(tmp.name)
            raise
    os.replace(tmp.name, dest)
    return count


def dataset_rows(split) -> Iterable[str]:
    """The ``text`` column of a ``datasets.Dataset``, read in batches rather than as one list."""
    for batch in split.iter(batch_size=ROWS_PER_READ):
        yield from batch["text"]


def fetch(spec: HFDataset, targets: Mapping[str, Path], cache_dir: Path) -> None:
    """Load ``spec`` (downloads cached under ``cache_dir``) and write each file key's split to its target."""
    try:
        import datasets
    except ImportError:
        raise HFRouteError(f"the datasets package is not installed ({INSTALL_HINT})") from None
    try:
        loaded = datasets.load_dataset(spec.path, spec.name, revision=spec.revision, cache_dir=str(cache_dir))
    except Exception as err:  # the Hub client raises many types; all mean "this route failed"
        first_line = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise HFRouteError(f"{type(err).__name__}: {first_line}") from None
    for key, dest in targets.items():
        split = spec.splits[key]
        if split not in loaded:
            raise HFRouteError(f"{describe(spec)} has no split {split!r} (it has {sorted(loaded)})")
        write_split(dataset_rows(loaded[split]), dest, total=loaded[split].num_rows)

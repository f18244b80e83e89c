"""What the paper's MIMIC NLL can be: the history-free baseline's Meta TPP NLL on each candidate split.

python scripts/ef_baseline.py                 # the THP pickles (data folder, or RA_DATA_MIRROR)
python scripts/ef_baseline.py --path FOLDER   # train.pkl, dev.pkl, test.pkl of your own

Candidates: the THP release's own train/dev/test files; the three files joined in order and cut
60/20/20 by position, which is what Meta TPP's loader does to one ``.npz`` holding every sequence;
and the release's files with each event's time since the sequence start where Meta TPP's ``times``
array holds the time since the previous event (a conversion that copied the wrong THP field).
For each: the baseline's test NLL (Meta TPP's, divided by all events), its interval part alone, the
same sum divided by the predicted events only, and the factor on every time that would make it 1.21
(times multiplied by c add log c to each interval scored by its density: all but each first and last).
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from recurrent_attention.data import DataError, DataLocation
from recurrent_attention.tasks.ef.baseline import HistoryFreeBaseline, fit_on_dev
from recurrent_attention.tasks.ef.formats import EventSequence, positional_split, read_thp_pickle

SPLITS = ("train", "dev", "test")
PAPER_NLL = 1.21  # Aaren Table 2, MIMIC, Aaren (Transformer 1.22)
HEADER = (
    "| split | sequences | alpha | test NLL (Meta TPP) | interval part | / predicted events | 1.21 if |\n"
    "|---|---|---|---|---|---|---|"
)


def candidate_splits(files: dict[str, list[EventSequence]]) -> dict[str, tuple[list[EventSequence], ...]]:
    """The release's own files, and the files joined in order and cut 60/20/20 by position."""
    joined = files["train"] + files["dev"] + files["test"]
    return {
        "THP release files": tuple(files[split] for split in SPLITS),
        "joined, 60/20/20 by position": tuple(joined[p] for p in positional_split(len(joined), (0.6, 0.2))),
        "release files, time since start as interval": tuple(
            [since_start_as_intervals(s) for s in files[split]] for split in SPLITS
        ),
    }


def since_start_as_intervals(sequence: EventSequence) -> EventSequence:
    """The sequence whose intervals are the original times since its first event."""
    return EventSequence(np.cumsum(sequence.times - sequence.times[0]), sequence.marks)


def row(
    name: str, train: list[EventSequence], dev: list[EventSequence], test: list[EventSequence], n_marks: int
) -> str:
    """A markdown row: the baseline fitted on ``train`` (smoothing chosen on ``dev``), scored on ``test``."""
    model, alpha = fit_on_dev(train, dev, n_marks)
    nll = model.meta_tpp_nll(test)
    interval = HistoryFreeBaseline(model.mu, model.sigma, 0.0 * model.log_transition).meta_tpp_nll(test)
    events = sum(len(s) for s in test)
    predicted = events - len(test)
    scale = math.exp((PAPER_NLL - nll) * events / (events - 2 * len(test)))
    return (
        f"| {name} | {len(train)}/{len(dev)}/{len(test)} | {alpha} | {nll:.3f} | {interval:.3f} "
        f"| {nll * events / predicted:.3f} | times x {scale:.2f} |"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--path", type=Path, help="a folder with train.pkl, dev.pkl, test.pkl (THP format)")
    parser.add_argument("--data-dir", default="data", help="the data folder (default: data)")
    parser.add_argument("--n-marks", type=int, default=75, help="number of mark types (MIMIC-II: 75)")
    args = parser.parse_args(argv)
    location = DataLocation("thp_mimic", args.data_dir, os.environ.get("RA_DATA_MIRROR"), False)
    try:
        paths = {s: args.path / f"{s}.pkl" if args.path else location.registered(s) for s in SPLITS}
        files = {split: read_thp_pickle(path, split)[0] for split, path in paths.items()}
    except DataError as err:
        print(f"error: {err}")
        return 2
    print(HEADER)
    for name, (train, dev, test) in candidate_splits(files).items():
        print(row(name, train, dev, test, args.n_marks))
    return 0

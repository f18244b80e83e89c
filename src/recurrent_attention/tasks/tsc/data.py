"""UEA classification data: missing-value interpolation, normalisation, a validation carve-out, padding.

Two protocols (docs/protocols.md, TSC):

- ``default``: a stratified validation part is held out of TRAIN (``val_fraction``, fixed
  ``split_seed`` so every seed sees the same split); per-channel normalisation statistics come from
  the remaining training part only and are applied to every split. The epoch is selected on that
  validation part, so TEST is touched once.
- ``reference``: Time-Series-Library's behaviour. All of TRAIN is trained on, each split is
  normalised with its own statistics, and ``val_dataloader`` returns TEST, so the epoch (and early
  stopping) is chosen on the test set.

Every case is right-padded with zeros to ``max_len`` (after normalisation, as TSLib) and carries a
padding mask (True at valid steps); causal backbones never see the padding from a valid step.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from recurrent_attention.data import DataError, DataLocation
from recurrent_attention.data.reading import require_scalable
from recurrent_attention.tasks.base import loader_options, make_loader
from recurrent_attention.tasks.tsc.protocol import DEFAULT, TSCProtocol
from recurrent_attention.tasks.tsc.tsformat import TSData, read_ts


def interpolate_missing(case: np.ndarray) -> np.ndarray:
    """Fill NaNs of each channel linearly between valid neighbours, constant beyond the ends (as TSLib).

    A channel with no valid value in this case stays NaN: :class:`Standardizer` leaves it out of its
    statistics and maps it to 0, the channel's mean after normalisation. (TSLib's pandas
    interpolation leaves such a channel NaN too, and its NaNs then reach the model.)
    """
    filled = case.copy()
    steps = np.arange(len(case))
    for c in range(case.shape[1]):
        missing = np.isnan(case[:, c])
        if missing.any() and not missing.all():
            filled[missing, c] = np.interp(steps[missing], steps[~missing], case[~missing, c])
    return filled


@dataclass
class Standardizer:
    """Per-channel z-scoring over every valid time step of the cases it is fitted on.

    Sample std plus machine epsilon, as TSLib's ``Normalizer`` (so constant channels map to 0).
    Values still missing (a channel absent from a whole case) are left out of the statistics and
    become 0, the channel's mean. Statistics that overflow float64 are refused by :meth:`fit` (a
    channel would silently become 0).
    """

    mean: np.ndarray
    std: np.ndarray

    @classmethod
    def fit(cls, cases: list[np.ndarray], file: str | Path) -> Standardizer:
        """Statistics of ``cases``, read from ``file`` (named if they overflow)."""
        steps = np.concatenate(cases, axis=0)
        valid = ~np.isnan(steps)
        count = valid.sum(axis=0)
        with np.errstate(over="ignore", invalid="ignore"):  # overflow is refused just below
            mean = np.where(valid, steps, 0.0).sum(axis=0) / np.maximum(count, 1)
            squares = np.where(valid, steps - mean, 0.0) ** 2
            std = np.where(count > 1, np.sqrt(squares.sum(axis=0) / np.maximum(count - 1, 1)), 0.0)
        require_scalable(mean, std, file, [f"channel {c + 1}" for c in range(steps.shape[1])])
        return cls(mean, std)

    def transform(self, case: np.ndarray) -> np.ndarray:
        return np.nan_to_num((case - self.mean) / (self.std + np.finfo(np.float64).eps), nan=0.0)


def instance_norm(case: np.ndarray) -> np.ndarray:
    """TSLib's EthanolConcentration-only per-case scaling, reproduced exactly.

    It subtracts each channel's mean over time but divides by the std *across channels* at each
    step (population variance + 1e-5), which is what TSLib computes.
    """
    centred = case - case.mean(axis=0, keepdims=True)
    return centred / np.sqrt(centred.var(axis=1, keepdims=True) + 1e-5)


def stratified_split(labels: np.ndarray, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Sorted ``(train, val)`` indices: about ``fraction`` of every class goes to val, at least one stays.

    The count per class is ``floor(fraction * n + 0.5)``, capped at ``n - 1`` so no class leaves training;
    so classes of one case each leave val empty, which the caller refuses naming its file.
    """
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"task.val_fraction={fraction} must lie strictly between 0 and 1")
    rng = np.random.default_rng(seed)
    val: list[int] = []
    for cls in np.unique(labels):
        members = np.flatnonzero(labels == cls)
        rng.shuffle(members)
        val.extend(members[: min(int(np.floor(fraction * len(members) + 0.5)), len(members) - 1)])
    val_idx = np.sort(np.array(val, dtype=np.int64))
    return np.setdiff1d(np.arange(len(labels)), val_idx), val_idx


def pad(cases: list[np.ndarray], max_len: int) -> tuple[np.ndarray, np.ndarray]:
    """``(N, max_len, C)`` values right-padded with zeros and the ``(N, max_len)`` validity mask."""
    values = np.zeros((len(cases), max_len, cases[0].shape[1]), dtype=np.float32)
    mask = np.zeros((len(cases), max_len), dtype=bool)
    for i, case in enumerate(cases):
        values[i, : len(case)] = case
        mask[i, : len(case)] = True
    return values, mask


class ClassificationSet(Dataset):
    """Padded cases with their masks and class indices."""

    def __init__(self, cases: list[np.ndarray], labels: np.ndarray, max_len: int) -> None:
        values, mask = pad(cases, max_len)
        self.x = torch.from_numpy(values)
        self.mask = torch.from_numpy(mask)
        self.y = torch.as_tensor(labels, dtype=torch.long)

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"x": self.x[i], "mask": self.mask[i], "y": self.y[i]}


class TSCDataModule(L.LightningDataModule):
    """TRAIN/TEST ``.ts`` files of a registered UEA source (or explicit paths), split and normalised.

    ``n_channels``, ``n_classes`` and ``max_len`` come from the config because the model is built
    before the data is read; :meth:`setup` checks them against the files.
    """

    def __init__(
        self,
        source: str,
        n_channels: int,
        n_classes: int,
        max_len: int,
        batch_size: int = 16,
        val_fraction: float = 0.2,
        split_seed: int = 0,
        instance_norm: bool = False,
        rules: TSCProtocol = DEFAULT,
        num_workers: int = 0,
        pin_memory: bool = False,
        persistent_workers: bool = False,
        data_dir: str = "data",
        mirror: str | None = None,
        download: bool = True,
        train_path: str | None = None,
        test_path: str | None = None,
    ) -> None:
        super().__init__()
        if (train_path is None) != (test_path is None):
            raise ValueError("give both task.datamodule.train_path and test_path, or neither")
        self.source, self.train_path, self.test_path = source, train_path, test_path
        self.n_channels, self.n_classes, self.max_len = n_channels, n_classes, max_len
        self.batch_size = batch_size
        self.loader_options = loader_options(num_workers, pin_memory, persistent_workers)
        self.val_fraction, self.split_seed = val_fraction, split_seed
        self.instance_norm, self.rules = instance_norm, rules
        self.location = DataLocation(source, data_dir, mirror, download)
        self.datasets: dict[str, ClassificationSet] = {}
        self.class_names: list[str] = []

    def file_paths(self) -> tuple[Path, Path]:
        """Explicit paths win (own data); otherwise the registry resolves and verifies the files."""
        if self.train_path is not None and self.test_path is not None:
            return Path(self.train_path), Path(self.test_path)
        return self.location.registered("train"), self.location.registered("test")

    def prepare_data(self) -> None:
        self.file_paths()

    def _check(self, data: TSData, path: Path) -> None:
        if data.n_channels != self.n_channels:
            raise DataError(f"task.n_channels={self.n_channels} but {path} has {data.n_channels} channels")
        if len(data.class_names) != self.n_classes:
            raise DataError(
                f"task.n_classes={self.n_classes} but {path} declares {len(data.class_names)} classes"
            )
        if data.lengths.max() > self.max_len:
            raise DataError(
                f"task.max_len={self.max_len} but {path} holds a case of length {data.lengths.max()}"
            )

    def _prepare(self, cases: list[np.ndarray], scaler: Standardizer) -> list[np.ndarray]:
        scaled = [scaler.transform(case) for case in cases]
        return [instance_norm(case) for case in scaled] if self.instance_norm else scaled

    def setup(self, stage: str | None = None) -> None:
        if self.datasets:
            return
        train_file, test_file = self.file_paths()
        train, test = read_ts(train_file), read_ts(test_file)
        for data, path in ((train, train_file), (test, test_file)):
            self._check(data, path)
        if test.class_names != train.class_names:
            raise DataError(
                f"{test_file} declares classes {test.class_names}, {train_file} {train.class_names}"
            )
        self.class_names = train.class_names
        train_cases = [interpolate_missing(case) for case in train.series]
        test_cases = [interpolate_missing(case) for case in test.series]
        if self.rules.validation == "test":
            fit_idx, val_idx = np.arange(len(train_cases)), None
        else:
            fit_idx, val_idx = stratified_split(train.labels, self.val_fraction, self.split_seed)
            if not len(val_idx):
                raise DataError(
                    f"{train_file}: its {len(train_cases)} training case(s) leave none for validation at "
                    f"task.val_fraction={self.val_fraction} (each class keeps one case for training); add "
                    "cases, raise task.val_fraction, or train on all of them with task.compat=reference"
                )
        scaler = Standardizer.fit([train_cases[i] for i in fit_idx], train_file)
        test_scaler = Standardizer.fit(test_cases, test_file) if self.rules.test_scaling == "own" else scaler

        def subset(indices: np.ndarray) -> ClassificationSet:
            cases = self._prepare([train_cases[i] for i in indices], scaler)
            return ClassificationSet(cases, train.labels[indices], self.max_len)

        self.datasets["train"] = subset(fit_idx)
        self.datasets["test"] = ClassificationSet(
            self._prepare(test_cases, test_scaler), test.labels, self.max_len
        )
        self.datasets["val"] = self.datasets["test"] if val_idx is None else subset(val_idx)

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        return make_loader(self.datasets[split], self.batch_size, shuffle, **self.loader_options)

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        """The held-out part of TRAIN, or TEST where ``rules.validation=test`` (TSLib's epoch selection)."""
        return self._loader("val", shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", shuffle=False)

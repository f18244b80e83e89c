"""Datamodule: interpolation, stratified carve-out, train-only normalisation, padding, protocols."""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from recurrent_attention.tasks.tsc.data import (
    TSCDataModule,
    instance_norm,
    interpolate_missing,
    pad,
    stratified_split,
)
from recurrent_attention.tasks.tsc.tsformat import read_ts
from tests.helpers.protocols import protocol
from tests.tasks.tsc.conftest import random_problem, ts_text

MIRROR = Path(os.environ.get("RA_DATA_MIRROR") or Path(__file__).resolve().parents[4] / "shared" / "data")


def datamodule(train: Path, test: Path, **kwargs) -> TSCDataModule:
    dm = TSCDataModule(
        "unused",
        n_channels=3,
        n_classes=3,
        max_len=12,
        batch_size=4,
        train_path=str(train),
        test_path=str(test),
        **kwargs,
    )
    dm.setup()
    return dm


def test_interpolate_missing_by_hand() -> None:
    case = np.array(
        [[np.nan, 1.0, np.nan], [2.0, np.nan, np.nan], [np.nan, 5.0, np.nan], [8.0, np.nan, np.nan]]
    )
    expected = np.array([[2.0, 1.0, np.nan], [2.0, 3.0, np.nan], [5.0, 5.0, np.nan], [8.0, 5.0, np.nan]])
    np.testing.assert_array_equal(interpolate_missing(case), expected)


def test_a_channel_missing_from_a_whole_case_becomes_the_channel_mean(tmp_path: Path) -> None:
    """It is left out of the statistics and maps to 0 after z-scoring, not to a raw 0 far from the data."""
    rng = np.random.default_rng(1)
    cases, labels = random_problem(rng, 12, 3, (5, 8), 3)
    cases[4][:, 1] = np.nan
    folder = tmp_path / "UEA" / "Gap"
    folder.mkdir(parents=True)
    for split in ("TRAIN", "TEST"):
        text = ts_text(cases, [f"c{y}" for y in labels], ["c0", "c1", "c2"], "Gap", missing=True)
        (folder / f"Gap_{split}.ts").write_text(text)
    dm = datamodule(folder / "Gap_TRAIN.ts", folder / "Gap_TEST.ts", rules=protocol("tsc", "reference"))
    test = dm.datasets["test"]
    n = len(cases[4])
    assert test.x[4, :n, 1].abs().max() == 0
    others = np.concatenate([c for i, c in enumerate(cases) if i != 4])[:, 1]
    expected = (cases[0][:, 1] - others.mean()) / others.std(ddof=1)
    np.testing.assert_allclose(test.x[0, : len(cases[0]), 1].numpy(), expected, rtol=1e-5, atol=1e-5)


def test_stratified_split_counts() -> None:
    labels = np.array([0] * 10 + [1] * 5 + [2] * 2 + [3] * 1)
    train, val = stratified_split(labels, 0.2, seed=3)
    # floor(0.2 n + 0.5): 10 -> 2, 5 -> 1, 2 -> 0, 1 -> 0
    assert np.bincount(labels[val], minlength=4).tolist() == [2, 1, 0, 0]
    assert sorted([*train, *val]) == list(range(len(labels)))
    again, _ = stratified_split(labels, 0.2, seed=3)
    np.testing.assert_array_equal(train, again)


def test_stratified_split_keeps_one_per_class_in_training() -> None:
    _, val = stratified_split(np.array([0, 0, 1, 1]), 0.9, seed=0)
    assert len(val) == 2


def test_pad_and_mask() -> None:
    values, mask = pad([np.ones((2, 1)), 2 * np.ones((3, 1))], 4)
    assert values[:, :, 0].tolist() == [[1, 1, 0, 0], [2, 2, 2, 0]]
    assert mask.tolist() == [[True, True, False, False], [True, True, True, False]]


def test_instance_norm_matches_tslib_formula() -> None:
    case = np.random.default_rng(0).normal(size=(7, 3))
    tensor = torch.from_numpy(case)
    centred = tensor - tensor.mean(0, keepdim=True)
    expected = centred / torch.sqrt(torch.var(centred, dim=1, keepdim=True, unbiased=False) + 1e-5)
    np.testing.assert_allclose(instance_norm(case), expected.numpy(), rtol=1e-12)


def _raw(path: Path) -> tuple[list[np.ndarray], np.ndarray]:
    data = read_ts(path)
    return data.series, data.labels


def test_default_normalises_with_training_part_only(toy_pair: tuple[Path, Path]) -> None:
    train_path, test_path = toy_pair
    dm = datamodule(train_path, test_path, val_fraction=0.2, split_seed=0)
    cases, labels = _raw(train_path)
    fit_idx, val_idx = stratified_split(labels, 0.2, 0)
    steps = np.concatenate([cases[i] for i in fit_idx])
    mean, std = steps.mean(0), steps.std(0, ddof=1)
    assert len(dm.datasets["train"]) == len(fit_idx) and len(dm.datasets["val"]) == len(val_idx)
    assert np.bincount(dm.datasets["val"].y.numpy()).tolist() == [2, 2, 2]  # 10 per class -> 2
    test_cases, test_labels = _raw(test_path)
    test = dm.datasets["test"]
    for i, case in enumerate(test_cases):
        n = len(case)
        np.testing.assert_allclose(test.x[i, :n].numpy(), (case - mean) / std, rtol=1e-5, atol=1e-5)
        assert test.x[i, n:].abs().sum() == 0 and test.mask[i].sum() == n
    assert test.y.tolist() == test_labels.tolist()
    # the validation cases are scaled with the same (training) statistics
    first_val = cases[val_idx[0]]
    np.testing.assert_allclose(
        dm.datasets["val"].x[0, : len(first_val)].numpy(), (first_val - mean) / std, rtol=1e-5, atol=1e-5
    )
    assert dm.val_dataloader().dataset is not dm.datasets["test"]


def test_reference_uses_each_splits_statistics_and_validates_on_test(toy_pair: tuple[Path, Path]) -> None:
    train_path, test_path = toy_pair
    dm = datamodule(train_path, test_path, rules=protocol("tsc", "reference"))
    assert len(dm.datasets["train"]) == 30
    assert dm.val_dataloader().dataset is dm.datasets["test"]
    test_cases, _ = _raw(test_path)
    steps = np.concatenate(test_cases)
    test = dm.datasets["test"]
    first = test_cases[0]
    expected = (first - steps.mean(0)) / steps.std(0, ddof=1)
    np.testing.assert_allclose(test.x[0, : len(first)].numpy(), expected, rtol=1e-5, atol=1e-5)


def test_config_mismatches_are_clear_errors(toy_pair: tuple[Path, Path]) -> None:
    train_path, test_path = toy_pair
    for kwargs, words in (({"n_channels": 4}, "task.n_channels=4"), ({"max_len": 6}, "task.max_len=6")):
        args = {"n_channels": 3, "n_classes": 3, "max_len": 12, **kwargs}
        dm = TSCDataModule("unused", train_path=str(train_path), test_path=str(test_path), **args)
        with pytest.raises(ValueError, match=re.escape(words)):
            dm.setup()


@pytest.mark.skipif(not (MIRROR / "UEA" / "JapaneseVowels").is_dir(), reason="no UEA mirror")
def test_japanese_vowels_from_the_mirror_matches_its_config() -> None:
    dm = TSCDataModule(
        "JapaneseVowels", n_channels=12, n_classes=9, max_len=29, mirror=str(MIRROR), download=False
    )
    dm.setup()
    sizes = {split: len(ds) for split, ds in dm.datasets.items()}
    assert sizes == {"train": 216, "val": 54, "test": 370}  # 30 per class in TRAIN, 6 of each held out
    assert int(dm.datasets["test"].mask.sum(1).max()) == 29

"""Fixtures for the TSC tests: small ``.ts`` files written in the real UEA format."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest


def ts_text(
    cases: list[np.ndarray],
    labels: list[str],
    class_names: list[str],
    name: str = "Toy",
    missing: bool = False,
) -> str:
    """A ``.ts`` file body: ``cases[i]`` is ``(length, channels)``; NaN is written as ``?``."""
    lengths = {len(c) for c in cases}
    equal = len(lengths) == 1
    header = [
        f"#{name}: generated for the tests",
        f"@problemName {name}",
        "@timeStamps false",
        f"@missing {str(missing).lower()}",
        f"@univariate {str(cases[0].shape[1] == 1).lower()}",
        f"@dimensions {cases[0].shape[1]}",
        f"@equalLength {str(equal).lower()}",
        *([f"@seriesLength {lengths.pop()}"] if equal else []),
        f"@classLabel true {' '.join(class_names)}",
        "@data",
    ]
    rows = [
        ":".join(
            ",".join("?" if np.isnan(v) else repr(float(v)) for v in case[:, c]) for c in range(case.shape[1])
        )
        + f":{label}"
        for case, label in zip(cases, labels, strict=True)
    ]
    return "\n".join(header + rows) + "\n"


def random_problem(
    rng: np.random.Generator, n_cases: int, n_channels: int, lengths: tuple[int, int], n_classes: int
) -> tuple[list[np.ndarray], np.ndarray]:
    """Cases whose class shifts their level, so that a model can learn something; labels cycle."""
    labels = np.arange(n_cases) % n_classes
    cases = [
        rng.normal(size=(int(rng.integers(lengths[0], lengths[1] + 1)), n_channels)) + 2.0 * y + 5.0
        for y in labels
    ]
    return cases, labels


def write_pair(root: Path, name: str, train: tuple, test: tuple, class_names: list[str]) -> tuple[Path, Path]:
    """``<root>/UEA/<name>/<name>_{TRAIN,TEST}.ts`` (the mirror layout); returns both paths."""
    folder = root / "UEA" / name
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for split, (cases, labels) in (("TRAIN", train), ("TEST", test)):
        path = folder / f"{name}_{split}.ts"
        path.write_text(ts_text(cases, [class_names[y] for y in labels], class_names, name))
        paths.append(path)
    return paths[0], paths[1]


def write_toy_pair(folder: Path) -> tuple[Path, Path]:
    """Unequal lengths 5..12, 3 channels, 3 classes; 30 TRAIN and 12 TEST cases."""
    rng = np.random.default_rng(0)
    names = ["a", "b", "c"]
    return write_pair(
        folder, "Toy", random_problem(rng, 30, 3, (5, 12), 3), random_problem(rng, 12, 3, (5, 12), 3), names
    )


@pytest.fixture
def toy_pair(tmp_path: Path) -> tuple[Path, Path]:
    return write_toy_pair(tmp_path)

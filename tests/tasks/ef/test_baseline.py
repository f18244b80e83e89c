"""The history-free baseline against a hand computation with scipy's log-normal, and its command line."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from recurrent_attention.cli.ef_baseline import main, since_start_as_intervals
from recurrent_attention.tasks.ef.baseline import HistoryFreeBaseline, fit_on_dev
from recurrent_attention.tasks.ef.formats import EventSequence, read_thp_pickle
from tests.tasks.ef.test_e2e import write_thp_mirror

TRAIN = [EventSequence([0.0, 1.0, 3.0], [0, 1, 1]), EventSequence([0.0, 2.0], [1, 0])]


def test_fit_is_maximum_likelihood_and_smoothed_transition_counts() -> None:
    model = HistoryFreeBaseline.fit(TRAIN, n_marks=2, alpha=0.5, time_eps=0.0)
    log_tau = np.log([1.0, 2.0, 2.0])  # the predicted intervals: every one after a sequence's first event
    assert model.mu == pytest.approx(log_tau.mean(), rel=1e-12)
    assert model.sigma == pytest.approx(math.sqrt(np.mean((log_tau - log_tau.mean()) ** 2)), rel=1e-12)
    # transitions 0->1, 1->1, 1->0, each count + 0.5
    np.testing.assert_allclose(np.exp(model.log_transition), [[0.25, 0.75], [0.5, 0.5]], rtol=1e-12)


def test_meta_tpp_nll_by_hand() -> None:
    model = HistoryFreeBaseline.fit(TRAIN, n_marks=2, alpha=0.5, time_eps=0.0)
    test = [EventSequence([0.0, 1.0, 4.0], [0, 1, 0]), EventSequence([5.0], [1])]
    interval = stats.lognorm(s=model.sigma, scale=math.exp(model.mu))
    # 1.0 scored by its density, the last interval 3.0 by its survival; marks 0->1 and 1->0;
    # divided by all 4 events (the one-event sequence counts only there).
    expected = -(interval.logpdf(1.0) + interval.logsf(3.0) + math.log(0.75) + math.log(0.5)) / 4
    assert model.meta_tpp_nll(test, time_eps=0.0) == pytest.approx(expected, rel=1e-10)


def test_survival_is_clamped_as_meta_tpp_does() -> None:
    model = HistoryFreeBaseline(0.0, 1.0, np.zeros((1, 1)))
    test = [EventSequence([0.0, 1.0, 1.0 + 1e9], [0, 0, 0])]
    expected = -(stats.lognorm(s=1.0).logpdf(1.0) + math.log(1e-5)) / 3
    assert model.meta_tpp_nll(test, time_eps=0.0) == pytest.approx(expected, rel=1e-10)


def test_smoothing_is_chosen_on_dev() -> None:
    dev = [EventSequence([0.0, 1.0, 2.0], [0, 0, 1])]
    model, alpha = fit_on_dev(TRAIN, dev, n_marks=2, alphas=(10.0, 0.01))
    best = min((10.0, 0.01), key=lambda a: HistoryFreeBaseline.fit(TRAIN, 2, a).meta_tpp_nll(dev))
    assert alpha == best
    np.testing.assert_array_equal(
        model.log_transition, HistoryFreeBaseline.fit(TRAIN, 2, best).log_transition
    )


def test_cli_rows_score_each_candidate_split(tmp_path, capsys) -> None:
    folder = write_thp_mirror(tmp_path / "mirror", n=20, seed=1)
    assert main(["--path", str(folder), "--n-marks", "4"]) == 0
    lines = capsys.readouterr().out.splitlines()
    files = {split: read_thp_pickle(folder / f"{split}.pkl", split)[0] for split in ("train", "dev", "test")}
    joined = files["train"] + files["dev"] + files["test"]
    train, dev, test = joined[:36], joined[36:48], joined[48:]  # 60 sequences, 60/20/20 by position
    model, _ = fit_on_dev(train, dev, 4)
    cells = lines[3].split(" | ")
    assert cells[0] == "| joined, 60/20/20 by position" and cells[1] == "36/12/12"
    assert float(cells[3]) == pytest.approx(model.meta_tpp_nll(test), abs=5e-4)
    events = sum(len(s) for s in test)
    assert float(cells[5]) == pytest.approx(model.meta_tpp_nll(test) * events / (events - 12), abs=5e-4)


def test_cli_missing_file_is_one_line(tmp_path, capsys) -> None:
    assert main(["--path", str(tmp_path)]) == 2
    (line,) = capsys.readouterr().out.splitlines()
    assert "train.pkl" in line


def test_time_since_start_candidate_puts_it_where_the_interval_was() -> None:
    sequence = EventSequence([2.0, 3.0, 7.0], [0, 1, 0])
    np.testing.assert_allclose(since_start_as_intervals(sequence).intervals(), [0.0, 1.0, 5.0])

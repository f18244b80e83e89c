"""The launch rule of a GPU window (device/budget.py), driven by hand-made times."""

from __future__ import annotations

import pytest

from recurrent_attention.device.budget import Budget


def test_no_estimate_launches_to_learn_one() -> None:
    decision = Budget(total_s=480).decide(cost=1.0, elapsed_s=0.0, running=0)
    assert decision.launch and "first wave" in decision.reason


def test_prior_decides_before_any_job_finished() -> None:
    budget = Budget(total_s=480, prior_s_per_cost=100.0, margin_s=20, slack=1.0)
    assert budget.decide(cost=4.0, elapsed_s=0, running=0).launch  # 400 s of 460 s
    refused = budget.decide(cost=4.0, elapsed_s=100, running=0)  # 400 s of 360 s
    assert not refused.launch
    assert refused.reason == "expected 400 s > 360 s left"


def test_slack_stretches_the_estimate() -> None:
    budget = Budget(total_s=480, prior_s_per_cost=100.0, margin_s=20, slack=1.15)
    assert budget.decide(cost=4.0, elapsed_s=0, running=0).launch  # 460 s of 460 s
    assert budget.decide(cost=4.0, elapsed_s=1, running=0).reason == "expected 460 s > 459 s left"


def test_finished_jobs_replace_the_prior_with_total_seconds_over_total_cost() -> None:
    budget = Budget(total_s=480, prior_s_per_cost=1000.0, margin_s=20, slack=1.0)
    budget.record(seconds=60.0, cost=1.0)
    budget.record(seconds=180.0, cost=2.0)  # (60 + 180) / 3 = 80 s per unit of cost
    assert budget.s_per_cost() == pytest.approx(80.0)
    assert budget.decide(cost=2.0, elapsed_s=300, running=1).launch  # 160 s of 160 s
    assert not budget.decide(cost=2.0, elapsed_s=301, running=1).launch  # 160 s of 159 s


def test_nothing_launches_once_the_margin_is_reached() -> None:
    budget = Budget(total_s=100, margin_s=20)
    assert budget.decide(cost=0.001, elapsed_s=79.9, running=0).launch
    stopped = budget.decide(cost=0.001, elapsed_s=80.0, running=0)
    assert not stopped.launch and stopped.reason.startswith("no time left")

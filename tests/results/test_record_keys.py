"""Override normalisation: one key per config however its overrides were typed."""

from __future__ import annotations

from recurrent_attention.results.record_keys import config_key, normalise_overrides


def test_spellings_of_one_value_normalise_alike() -> None:
    assert normalise_overrides(["task.lr=0.5", "b=1.0", "c='x y'"]) == normalise_overrides(
        ["+c=x y", "b=1", "++task.lr=5e-1"]
    )
    assert normalise_overrides(["task.lr=0.5"]) != normalise_overrides(["task.lr=0.05"])


def test_identity_and_display_overrides_are_left_out() -> None:
    typed = ["model=aaren", "seed=3", "task.compat=default", "trainer.enable_progress_bar=false", "x=[1,2]"]
    assert normalise_overrides(typed) == {"x": [1, 2]}
    assert normalise_overrides(["~model.dropout"]) == {"~model.dropout": None}


def test_legacy_key_ignores_seed_and_order_but_not_compat() -> None:
    base = {"task": "tsf/etth1", "model": "aaren", "preset": "cpu", "compat": "default", "setting": {"h": 96}}
    one = {**base, "seed": 1, "overrides": ["seed=1", "model=aaren", "task.d=2"]}
    two = {**base, "seed": 2, "overrides": ["task.d=2", "seed=2"]}
    assert config_key(one) == config_key(two)
    assert config_key(one) != config_key({**one, "compat": "reference"})
    assert config_key({**one, "config_id": "abc"}) == "abc"

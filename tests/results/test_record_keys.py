"""Override normalisation: one key per config however its overrides were typed or resolved."""

from __future__ import annotations

from pathlib import Path

import yaml

from recurrent_attention.results.record_keys import SETTING_SOURCES, config_key, describe, normalise_overrides

CONF = Path(__file__).resolve().parents[2] / "conf"


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


def test_setting_sources_are_the_keys_conf_reads_each_setting_from() -> None:
    """Every ``setting:`` field in conf/ is ``${<key>}``; SETTING_SOURCES must name that key."""
    found = {}
    for path in sorted(CONF.rglob("*.yaml")):
        setting = (yaml.safe_load(path.read_text()) or {}).get("task", {}).get("setting") or {}
        found.update({name: value for name, value in setting.items()})
    assert {name: f"${{{key}}}" for name, key in SETTING_SOURCES.items()} == found


def test_a_typed_value_the_setting_records_describes_the_config_as_left_alone() -> None:
    base = {"task": "tsf/etth1", "model": "aaren", "preset": "cpu", "compat": "default", "seed": 1}
    untyped = {**base, "setting": {"horizon": 96}, "overrides": ["seed=1"]}
    typed = {**untyped, "overrides": ["seed=1", "task.pred_len=96"]}
    assert describe(typed) == describe(untyped) and config_key(typed) == config_key(untyped)
    # a key no setting holds is still a difference
    assert describe({**untyped, "overrides": ["task.lr=0.5"]}) != describe(untyped)

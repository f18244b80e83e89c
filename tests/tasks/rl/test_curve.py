"""D4RL's medium rule on hand-made learning curves: the first evaluation reaching a third of the last."""

from __future__ import annotations

import pandas as pd
import pytest

from recurrent_attention.tasks.rl.curve import COLUMNS, pick_medium, read_curve, write_curve


def curve(returns: list[float], every: int = 10_000) -> pd.DataFrame:
    rows = [
        {c: 0.0 for c in COLUMNS} | {"step": every * (i + 1), "return_mean": r} for i, r in enumerate(returns)
    ]
    return pd.DataFrame(rows, columns=COLUMNS)


def test_first_crossing_of_a_third_of_the_final_return() -> None:
    # final 3000 -> target 1000: 1100 at 40k is the first at or above it; 990 at 30k is below; the dip
    # to 1000 at 70k is closer to the target but comes after the early stop D4RL made
    returns = [20, 300, 990, 1100, 2400, 2900, 1000, 3000]
    assert pick_medium(curve(returns)) == 40_000
    assert pick_medium(curve(returns), fraction=0.5) == 50_000
    # exactly at the target counts as reaching it
    assert pick_medium(curve([20, 1000, 3000])) == 20_000


def test_no_medium_when_only_the_final_policy_qualifies_or_no_expert() -> None:
    with pytest.raises(ValueError, match="only the final evaluation"):
        pick_medium(curve([10, 20, 3000]))
    with pytest.raises(ValueError, match="no expert"):
        pick_medium(curve([10, 20, -5]))


def test_curve_round_trip_and_plot(tmp_path) -> None:
    written = curve([5, 1, 3])
    write_curve(written, tmp_path / "curve.csv")
    assert (tmp_path / "curve.png").stat().st_size > 0
    pd.testing.assert_frame_equal(read_curve(tmp_path / "curve.csv"), written, check_dtype=False)
    (tmp_path / "bad.csv").write_text("step,reward\n1,2\n")
    with pytest.raises(ValueError, match=r"bad.csv: not a learning curve \(missing columns return_mean"):
        read_curve(tmp_path / "bad.csv")

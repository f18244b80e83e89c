"""A behaviour policy's learning curve (return vs environment steps) and D4RL's choice of "medium" on it.

Fu et al. (2020) stopped SAC early, "at about 1/3 of the expert's performance", to make the medium
policy. Here that rule reads the curve of periodic deterministic evaluations: the expert is the last
evaluation (the final policy), and medium is the FIRST evaluation whose mean return reaches
``fraction`` of the expert's, since an early stop is a first crossing, not the closest point (a later
dip to a third of the expert would put expert-level data into medium-replay).
Raw returns are compared, not D4RL scores (the two differ by the random policy's ~-20 on Hopper).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from recurrent_attention.runs.atomic import atomic_write_text

COLUMNS = ("step", "return_mean", "return_std", "return_min", "return_max", "length_mean", "score", "wall_s")


def read_curve(path: str | Path) -> pd.DataFrame:
    """The curve CSV, rows in step order; a file without the columns stops with one line naming it."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: no learning curve (train the behaviour policy first)")
    curve = pd.read_csv(path)
    missing = [c for c in COLUMNS if c not in curve.columns]
    if missing:
        raise ValueError(f"{path}: not a learning curve (missing columns {', '.join(missing)})")
    return curve.sort_values("step", ignore_index=True)


def write_curve(curve: pd.DataFrame, path: str | Path) -> None:
    """The CSV (written whole or not at all: a resumed run reads it back) and, beside it, a PNG of
    mean return (min to max shaded) against environment steps."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    atomic_write_text(path, curve.to_csv(index=False, columns=list(COLUMNS)))
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(curve["step"], curve["return_mean"], marker=".")
    ax.fill_between(curve["step"], curve["return_min"], curve["return_max"], alpha=0.2)
    ax.set_xlabel("environment steps")
    ax.set_ylabel("return (deterministic evaluation)")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path.with_suffix(".png"), dpi=120)
    plt.close(fig)


def pick_medium(curve: pd.DataFrame, fraction: float = 1 / 3) -> int:
    """The step of the first evaluation reaching ``fraction`` of the final evaluation's mean return."""
    if curve.empty:
        raise ValueError("the learning curve has no evaluations")
    expert = float(curve["return_mean"].iloc[-1])
    if expert <= 0:
        raise ValueError(f"the final policy returns {expert:.1f}: no expert to take a fraction of")
    reached = curve.index[curve["return_mean"] >= fraction * expert]
    first = int(reached[0])
    if first == len(curve) - 1:
        raise ValueError(
            f"only the final evaluation reaches {fraction:.3g} x {expert:.1f}: "
            "no earlier policy to call medium (evaluate more often)"
        )
    return int(curve["step"].iloc[first])

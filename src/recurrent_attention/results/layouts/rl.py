"""Aaren Table 1: D4RL-normalised score per environment and dataset, Transformer vs Aaren.

Runs on the 12 registered D4RL files are set beside the paper's scores. The paper ran
min-decision-transformer, which plays window-mode episodes every 100 updates and prints the best
score seen: where the runs' protocol evaluated periodically (``periodic_eval``:
``compat=reference``, ``experiment=aaren/rl``) the paper's column stands beside that
best-of-evaluations score (``score_best_periodic``); otherwise beside the last checkpoint's
``score_window``. Runs on any other data (a self-collected task, or ``task.datamodule.path=`` on a
D4RL task) go to a separate table that says so and has no paper column: its numbers are not
comparable with D4RL's. Runs on the datasets D4RL's recipe made here (``make rl-data-sac``; tasks
``<env>_<kind>_sac``) get one table per preset and protocol with every dataset's rows, the
normalised score of each rollout mode, the mean return of the data the run learnt from (raw and
normalised, from its summary), and D4RL's published numbers in the notes only, labelled as coming
from different data.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pandas as pd

from recurrent_attention.results.grouping import own_data
from recurrent_attention.results.layouts import AAREN_MODELS, aaren_paper, family_runs, protocol_tables
from recurrent_attention.results.tables import (
    Table,
    compare,
    format_pm,
    load_reference,
    override_notes,
    provenance,
)

PAPER_ENVS = {"halfcheetah": "HalfCheetah", "hopper": "Hopper", "walker2d": "Walker", "ant": "Ant"}
PAPER_DATASETS = {"medium": "Medium", "medium_replay": "Med-Replay", "medium_expert": "Med-Expert"}
MODES = ("window", "stream", "staggered")
METRICS = [f"{kind}_{mode}" for kind in ("score", "return", "length") for mode in MODES]
# where the evaluation time goes: model milliseconds per batched step, environment steps per second
SPEED_METRICS = [f"{kind}_{mode}" for kind in ("ms_per_step", "env_steps_per_s") for mode in MODES]
# min-DT's best-of-periodic-evaluations score, which a protocol with periodic_eval records
BEST_OF = "score_best_periodic"
# the datasets D4RL's recipe made here (conf/task/rl/<env>_<kind>_sac.yaml, `make rl-data-sac`)
RECIPE_SUFFIX = "_sac"
# The Decision Transformer paper's D4RL scores (Chen et al. 2021, Table 2; mean ± std over 3 seeds),
# beside the recipe table for orientation only: they were trained on D4RL's files, not on ours.
DT_PAPER = {
    ("HalfCheetah", "Medium"): (42.6, 0.1),
    ("HalfCheetah", "Med-Replay"): (36.6, 0.8),
    ("HalfCheetah", "Med-Expert"): (86.8, 1.3),
    ("Hopper", "Medium"): (67.6, 1.0),
    ("Hopper", "Med-Replay"): (82.7, 7.0),
    ("Hopper", "Med-Expert"): (107.6, 1.8),
    ("Walker", "Medium"): (74.0, 1.4),
    ("Walker", "Med-Replay"): (66.6, 3.0),
    ("Walker", "Med-Expert"): (108.1, 0.2),
}
# summary fields -> the recipe table's data columns (the offline episodes' mean return, raw and normalised)
DATA_COLUMNS = {"data_mean_return": "data mean return", "data_mean_score": "data mean score"}
MODE_NOTE = (
    "window: the last K=20 steps re-run at every step (the Decision Transformer's evaluation); "
    "stream: the backbone state carried from the episode's first step (Aaren: constant memory; "
    "Transformer: a KV cache over the whole episode); staggered: two states restarted every K steps, "
    "K/2 apart, the older one acting (a context of K/2+1 to K steps, as in training; constant memory)."
)
BEST_OF_NOTE = (
    "score_best_periodic: the best window-mode score of the evaluations during training, as "
    "min-decision-transformer prints it (what the papers report); the score_<mode> columns are the "
    "last checkpoint's."
)
PAPER_NOTES = {
    "reference": (
        "paper column beside score_best_periodic: the best window-mode score of the evaluations "
        "every 100 updates, as min-decision-transformer prints it (what the paper reports); "
        "score_window is the last checkpoint's."
    ),
    "default": "paper column beside score_window: the last checkpoint's (the paper reported a best-of).",
}


def paper_key(dataset: str) -> tuple[str, str] | None:
    """``hopper_medium_replay`` -> ``("Hopper", "Med-Replay")``; None for data the paper did not use."""
    env, _, kind = dataset.partition("_")
    if env in PAPER_ENVS and kind in PAPER_DATASETS:
        return PAPER_ENVS[env], PAPER_DATASETS[kind]
    return None


def recipe_key(task: str) -> tuple[str, str] | None:
    """``rl/hopper_medium_replay_sac`` -> ``("Hopper", "Med-Replay")``: a task on data D4RL's recipe made
    here. Runs on own files record the file's name as their dataset, so the task names the recipe."""
    name = task.removeprefix("rl/")
    return paper_key(name.removesuffix(RECIPE_SUFFIX)) if name.endswith(RECIPE_SUFFIX) else None


def on_d4rl(row: pd.Series) -> bool:
    """A registered D4RL dataset read from the registry, not an own file under its name.

    The run records ``own_data`` (and its setting ``data_path``: null for the registry's file).
    """
    own = pd.notna(row.get("setting.data_path")) or own_data(row)
    return paper_key(row["dataset"]) is not None and not own


def _with_data_returns(frame: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    if "data_mean_return" not in runs:
        return frame
    means = runs.groupby("dataset")["data_mean_return"].mean()
    return frame.assign(**{"data mean return": frame["dataset"].map(means).round(1)})


def _drop_empty_paper_columns(frame: pd.DataFrame) -> pd.DataFrame:
    empty = [c for c in frame if c.endswith("(paper)") and (frame[c] == "").all()]
    return frame.drop(columns=empty)


def _paper(reference: pd.DataFrame, row: dict, metric: str, compared: str) -> tuple[float, float] | None:
    """The paper's score beside our ``compared`` metric (D4RL data only)."""
    key = paper_key(row["dataset"])
    if metric != compared or key is None:
        return None
    return aaren_paper(reference, row, key[1], env=key[0])


def _evaluated_periodically(part: pd.DataFrame) -> bool:
    """Whether the runs' protocol also played the policy during training (``periodic_eval``), read
    from what they recorded: their best score among those evaluations."""
    column = f"metric.{BEST_OF}"
    return column in part and bool(part[column].notna().any())


def _d4rl_contents(
    part: pd.DataFrame, preset: str, compat: str, reference: pd.DataFrame | None
) -> tuple[pd.DataFrame, list[str]]:
    periodic = _evaluated_periodically(part)
    compared = BEST_OF if periodic else "score_window"
    metrics = [BEST_OF, *METRICS] if periodic else METRICS
    lookup = partial(_paper, reference, compared=compared)
    frame, run_notes = compare(part, ["dataset"], metrics, reference, lookup, digits=1)
    notes = [
        "D4RL-normalised score (0 = random, 100 = D4RL expert) and raw return over 10 episodes "
        "in the real gymnasium MuJoCo environment; mean ± sample std over seeds.",
        MODE_NOTE,
        "paper: Aaren Table 1 (min-decision-transformer, embedding 512, 4 heads, 4 blocks, 5 seeds).",
        PAPER_NOTES.get(compat, PAPER_NOTES["default"]),
        *run_notes,
        *provenance(part),
        f"command: python train.py experiment=aaren/rl preset={preset} task.compat={compat}",
    ]
    return _drop_empty_paper_columns(frame), notes


def _no_paper(row: dict, metric: str) -> None:
    """Self-collected data has no paper number (``compare`` is given no reference to look in)."""


def different_data_notes(tasks: list[str], reference: pd.DataFrame | None) -> list[str]:
    """Per recipe task: D4RL's published Decision Transformer and Aaren-paper scores, which come
    from D4RL's files and so orient the reader without being a target for these rows."""
    notes = []
    for task in tasks:
        env, kind = recipe_key(task)
        words = []
        if (env, kind) in DT_PAPER:
            words.append(
                f"Decision Transformer (Chen et al. 2021, Table 2) {format_pm(*DT_PAPER[env, kind], 1)}"
            )
        for model, name in AAREN_MODELS.items():
            paper = aaren_paper(reference, {"model": model}, kind, env=env) if reference is not None else None
            if paper is not None:
                words.append(f"Aaren paper Table 1 {name} {format_pm(*paper, 2)}")
        if words:
            notes.append(
                f"{task}, DIFFERENT DATA (D4RL's {env} {kind} v2 file, not this one): {'; '.join(words)}."
            )
    return notes


def diagnosis_notes(tasks: list[str]) -> list[str]:
    """Where a gap between the backbones has been looked into, the table says so beside the rows."""
    if not any(recipe_key(task) == ("Hopper", "Med-Replay") for task in tasks):
        return []
    return [
        "rl/hopper_medium_replay_sac, Aaren below the Transformer: not an offline-fit gap. Trained on the "
        "same batches, both predict held-out actions equally well; Aaren's actions follow the return "
        "asked for less, and its policy falls at once, as the file's random warm-up episodes do, in more "
        'evaluations (scripts/rl_diagnose.py; results/rl_diagnose/diagnose.md; docs/rl.md, "Why Aaren '
        'trails on medium-replay").'
    ]


def _recipe_command(tasks: list[str], preset: str, compat: str) -> str:
    """``make rl-sac`` for its own budget; other presets are swept by hand (the experiment's sizes
    would override them)."""
    if (preset, compat) == ("cpu", "reference"):
        return "make rl-sac (experiment=aaren/rl_hopper_sac: its cpu budget, docs/rl.md)"
    return (
        f"python train.py -m task={','.join(tasks)} model=transformer,aaren seed=1,2,3 "
        f"preset={preset} task.compat={compat}"
    )


def _recipe_tables(runs: pd.DataFrame, reference_dir: Path | None) -> list[Table]:
    """One table per preset and protocol over every recipe dataset (``rl_sac_<preset>_<compat>``)."""
    reference = load_reference("aaren_rl.csv", reference_dir)
    tables = []
    for (preset, compat), part in runs.groupby(["preset", "compat"], dropna=False):
        tasks = sorted(part["task"].unique())
        scores = [f"score_{mode}" for mode in MODES]
        periodic = _evaluated_periodically(part)
        metrics = [BEST_OF, *scores] if periodic else scores
        frame, run_notes = compare(
            part, ["task", "dataset"], metrics, None, _no_paper, digits=1, means=list(DATA_COLUMNS)
        )
        frame = _drop_empty_paper_columns(frame).rename(columns=DATA_COLUMNS)
        notes = [
            "Data made here with D4RL's recipe (`make rl-data-sac`: SAC's medium policy, its replay buffer "
            "up to it, medium + expert), NOT D4RL's files. D4RL-normalised score (0 = random, 100 = D4RL "
            "expert) over the evaluation episodes in the real gymnasium MuJoCo environment; mean ± sample "
            "std over seeds.",
            MODE_NOTE,
            "data mean return / data mean score: the mean return of the offline episodes the run learnt "
            "from (raw; D4RL-normalised), as its summary recorded at train time; a return-conditioned "
            "policy should beat it on medium_replay and approach the expert part on medium_expert.",
            *([BEST_OF_NOTE] if periodic else []),
            *different_data_notes(tasks, reference),
            *diagnosis_notes(tasks),
            *run_notes,
            *override_notes(part, "task"),
            *provenance(part),
            f"command: make rl-data-sac, then {_recipe_command(tasks, preset, compat)}",
        ]
        title = (
            f"Decision Transformer on D4RL's recipe made here ({preset} preset, {compat} protocol; not D4RL)"
        )
        tables.append(Table(f"rl_sac_{preset}_{compat}", title, frame, notes, part))
    return tables


def build(runs: pd.DataFrame, reference_dir: Path | None = None) -> list[Table]:
    runs = family_runs(runs, "rl")
    if runs.empty:
        return []
    d4rl = runs.apply(on_d4rl, axis=1).astype(bool)
    recipe = runs["task"].map(lambda task: recipe_key(str(task)) is not None).astype(bool)
    tables = protocol_tables(
        runs[d4rl], "rl", "Decision Transformer on D4RL", "aaren_rl.csv", reference_dir, _d4rl_contents
    )
    tables += _recipe_tables(runs[recipe], reference_dir) if recipe.any() else []
    for (dataset, preset), part in runs[~d4rl & ~recipe].groupby(["dataset", "preset"], dropna=False):
        metrics = [*METRICS, *SPEED_METRICS]
        frame, run_notes = compare(part, ["dataset"], metrics, None, _no_paper, digits=1)
        frame = _drop_empty_paper_columns(frame)
        notes = [
            "SELF-COLLECTED data, not D4RL: no paper numbers apply. Raw return and D4RL-normalised "
            "score over 10 episodes in the real environment; mean ± sample std over seeds.",
            "data mean return: the mean return of the offline episodes the policy learnt from; "
            "a return-conditioned policy should beat it.",
            MODE_NOTE,
            "ms_per_step: model time of one step of all 10 episodes at once; env_steps_per_s: "
            "environment time only (one synchronous vector env).",
            *run_notes,
            *provenance(part),
            f"command: make rl-data && python train.py experiment=aaren/rl_selfcollected (preset={preset})",
        ]
        title = f"Decision Transformer on self-collected {dataset} data ({preset} preset; not D4RL)"
        tables.append(Table(f"rl_{dataset}_{preset}", title, _with_data_returns(frame, part), notes, part))
    return tables

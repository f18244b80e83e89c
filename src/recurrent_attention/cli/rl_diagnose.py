"""``scripts/rl_diagnose.py``: train Decision Transformers with several backbones on the same batches
and held-out episodes (:mod:`recurrent_attention.tasks.rl.diagnose`), then tabulate and plot them.

  python scripts/rl_diagnose.py run --out outputs/rl_diagnose --models aaren transformer --seeds 1 2 3
  python scripts/rl_diagnose.py run --out outputs/rl_diagnose --models aaren --lr 1e-4 --seeds 1 2 3
  python scripts/rl_diagnose.py report --runs outputs/rl_diagnose --out results/rl_diagnose

``run`` composes ``train.py``'s config from ``--overrides`` (default: the CPU-budget table's
``experiment=aaren/rl_hopper_sac task=rl/hopper_medium_replay_sac``) plus each model, learning rate
and seed, and writes ``<out>/<model>-lr<lr>-seed<seed>.json`` (and ``.pt``: the trained model's
state dict); a run whose JSON exists is skipped, so a killed sweep resumes at the run it was in.
``report`` writes ``diagnose.md`` and ``curves.png``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from recurrent_attention.runs.atomic import atomic_write_text

# A window evaluation scoring below this fell at once (Hopper pays ~1 per step alive: ~20 steps).
FALL_SCORE = 2.0
DEFAULT_OVERRIDES = ("experiment=aaren/rl_hopper_sac", "task=rl/hopper_medium_replay_sac")


def _run(args: argparse.Namespace) -> int:
    import torch
    from hydra import compose, initialize_config_dir

    from recurrent_attention.config import CONFIG_DIR, register_resolvers
    from recurrent_attention.tasks import register_families
    from recurrent_attention.tasks.rl.diagnose import DiagnosticRun, diagnose

    torch.set_num_threads(args.threads)
    register_resolvers()
    register_families()
    args.out.mkdir(parents=True, exist_ok=True)
    for model in args.models:
        for lr in args.lr:
            for seed in args.seeds:
                run = DiagnosticRun(model, lr, seed)
                path = args.out / f"{run.name}.json"
                if path.exists():
                    print(f"{path}: done, skipped")
                    continue
                overrides = [*args.overrides, f"model={model}", f"task.lr={lr}", f"seed={seed}", "~logger"]
                with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
                    cfg = compose("train", overrides=overrides)
                weights = args.out / f"{run.name}.pt"
                record = diagnose(cfg, run, args.held_out_every, args.every, args.targets, weights)
                record["overrides"] = overrides
                atomic_write_text(path, json.dumps(record, indent=1))
                print(f"{path}: written ({record['wall_s']:.0f} s)")
    return 0


def _smoothed(values: Sequence[float], width: int) -> np.ndarray:
    """Running mean over ``width`` updates (the first ``width - 1`` points over what there is)."""
    values = np.asarray(values, dtype=float)
    sums = np.cumsum(values)
    counts = np.minimum(np.arange(1, len(values) + 1), width)
    sums[width:] = sums[width:] - sums[:-width]
    return sums / counts


def periodic_summary(periodic: list[dict]) -> str:
    """The window scores during training: best (at its update), last, and how many evaluations fell
    at once (score < 2: the policy's episodes end within a few dozen steps)."""
    if not periodic:
        return ""
    best = max(periodic, key=lambda p: p["score"])
    falls = sum(p["score"] < FALL_SCORE for p in periodic)
    last = periodic[-1]["score"]
    return f"best {best['score']:.1f} @ {best['step']}, last {last:.1f}, {falls}/{len(periodic)} fell"


def _run_order(record: dict) -> tuple[str, float, int]:
    """Rows and lines by model, then learning rate (largest first), then seed."""
    return record["model"], -record["lr"], record["seed"]


def report_rows(records: list[dict]) -> list[str]:
    """One markdown row per run: final and best action errors, loss, periodic and target scores."""
    rows = []
    for r in sorted(records, key=_run_order):
        last = r["action_error"][-1]
        best = min(r["action_error"], key=lambda p: p["held_out_mse"])
        periodic = periodic_summary(r["periodic"])
        targets = " / ".join(f"{t['score']:.1f} ({t['mean_length']:.0f})" for t in r["at_targets"])
        rows.append(
            f"| {r['model']} | {r['lr']:g} | {r['seed']} | {np.mean(r['losses'][-100:]):.4f} "
            f"| {last['train_mse']:.4f} | {last['held_out_mse']:.4f} "
            f"| {best['held_out_mse']:.4f} @ {best['step']} "
            f"| {periodic} | {targets} | {r['wall_s']:.0f} |"
        )
    return rows


def _mean_std(values: Sequence[float], digits: int) -> str:
    """``mean ± sample std`` (the mean alone for one value)."""
    values = np.asarray(values, dtype=float)
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{values.mean():.{digits}f} ± {values.std(ddof=1):.{digits}f}"


def _sensitivities(runs: list[dict]) -> list[float]:
    """Each run's last held-out return sensitivity (runs recorded before it was measured have none)."""
    return [
        r["action_error"][-1]["return_sensitivity"]
        for r in runs
        if "return_sensitivity" in r["action_error"][-1]
    ]


def summary_rows(records: list[dict]) -> list[str]:
    """One markdown row per model and learning rate over its seeds: the offline fit (final training
    loss and held-out action error) beside the closed-loop score, taken over every window evaluation
    of the second half of training (not only the last checkpoint's, one draw of a noisy quantity)."""
    rows = []
    groups: dict[tuple[str, float], list[dict]] = {}
    for r in sorted(records, key=_run_order):
        groups.setdefault((r["model"], r["lr"]), []).append(r)
    for (model, lr), runs in groups.items():
        late = [p["score"] for r in runs for p in r["periodic"] if p["step"] > r["updates"] / 2]
        falls = sum(score < FALL_SCORE for score in late)
        sensitivity = _sensitivities(runs)
        rows.append(
            f"| {model} | {lr:g} | {','.join(str(r['seed']) for r in runs)} "
            f"| {_mean_std([np.mean(r['losses'][-100:]) for r in runs], 4)} "
            f"| {_mean_std([r['action_error'][-1]['held_out_mse'] for r in runs], 4)} "
            f"| {_mean_std(late, 1) if late else ''} ({len(late)}) | {falls}/{len(late)} "
            f"| {_mean_std([r['periodic'][-1]['score'] for r in runs if r['periodic']], 1)} "
            f"| {_mean_std(sensitivity, 4) if sensitivity else 'n/a'} |"
        )
    return rows


def _report(args: argparse.Namespace) -> int:
    records = [json.loads(p.read_text()) for p in sorted(args.runs.glob("*.json"))]
    if not records:
        raise SystemExit(f"error: {args.runs}: no diagnostic run JSON files (run `rl_diagnose.py run` first)")
    args.out.mkdir(parents=True, exist_ok=True)
    first = records[0]
    targets = " / ".join(f"{t['target_return']:g}" for t in first["at_targets"])
    commits = sorted({str(r["git_commit"]) for r in records})
    lines = [
        f"# Decision Transformer diagnostics on {Path(first['data']['path']).name}",
        "",
        "| model | lr | seeds | train loss (last 100) | held-out action MSE | window score, 2nd-half "
        "evaluations (n) | of those fell | window score, last checkpoint | return sensitivity |",
        "|---|---|---|---|---|---|---|---|---|",
        *summary_rows(records),
        "",
        "Per run:",
        "",
        "| model | lr | seed | train loss (last 100) | train MSE | held-out MSE | best held-out MSE @ update "
        f"| window scores during training | window score (mean length) at targets {targets} | wall s |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *report_rows(records),
        "",
        "- Same batches for every model and learning rate at one seed; "
        f"{first['held_out_episodes']} episodes (every {first['held_out_every']}th) held out, "
        f"never trained on; {first['updates']} updates.",
        "- return sensitivity: the mean squared change of the held-out predicted actions when every "
        "return-to-go is raised by 1000 (eval mode; read against the action MSE).",
        "- MSE: actions in [-1, 1], eval mode, every K-step window of the held-out episodes / of as many "
        "training episodes; periodic: min-DT's window evaluations during training (D4RL-normalised).",
        f"- device: {first['device']}; commit(s): {', '.join(commits)}",
        f"- command: python scripts/rl_diagnose.py run ... {' '.join(first['overrides'][:-4])}; "
        f"python scripts/rl_diagnose.py report --runs {args.runs} --out {args.out}",
    ]
    atomic_write_text(args.out / "diagnose.md", "\n".join(lines) + "\n")
    _plot(records, args.out / "curves.png")
    print(f"{args.out}/diagnose.md, {args.out}/curves.png")
    return 0


def _plot(records: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(20, 4.2))
    colours: dict[tuple[str, float], str] = {}
    for r in sorted(records, key=_run_order):
        key = (r["model"], r["lr"])
        colour = colours.setdefault(key, f"C{len(colours)}")
        label = f"{r['model']} lr {r['lr']:g}" if r["seed"] == min(x["seed"] for x in records) else None
        style = ["-", "--", ":", "-."][(r["seed"] - 1) % 4]
        axes[0].plot(_smoothed(r["losses"], 50), colour, ls=style, lw=1, label=label)
        steps = [p["step"] for p in r["action_error"]]
        axes[1].plot(steps, [p["held_out_mse"] for p in r["action_error"]], colour, ls=style, lw=1)
        periodic_steps = [p["step"] for p in r["periodic"]]
        axes[2].plot(periodic_steps, [p["score"] for p in r["periodic"]], colour, ls=style, lw=1)
        if all("return_sensitivity" in p for p in r["action_error"]):
            sensitivity = [p["return_sensitivity"] for p in r["action_error"]]
            axes[3].plot(steps, sensitivity, colour, ls=style, lw=1)
    titles = (
        "training loss (running mean of 50)",
        "held-out action MSE",
        "window score during training",
        "held-out return sensitivity",
    )
    for ax, title in zip(axes, titles, strict=True):
        ax.set_title(title)
        ax.set_xlabel("update")
    axes[0].legend(fontsize=8)
    fig.suptitle("line style = seed (1 solid, 2 dashed, 3 dotted)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = top.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="train the diagnostic runs (one JSON each; existing ones skipped)")
    run.add_argument("--out", type=Path, required=True, help="folder of the runs' JSON files")
    run.add_argument("--models", nargs="+", default=["aaren", "transformer"], help="conf/model names")
    run.add_argument("--lr", type=float, nargs="+", default=[3e-4], help="learning rates (3e-4: the table's)")
    run.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    run.add_argument("--every", type=int, default=100, help="updates between action-error measurements")
    run.add_argument("--held-out-every", type=int, default=10, help="hold out every n-th episode (10)")
    run.add_argument(
        "--targets",
        type=float,
        nargs="*",
        default=[1800.0],
        help="target returns played at the end (window mode)",
    )
    run.add_argument("--threads", type=int, default=1, help="torch threads")
    run.add_argument(
        "--overrides",
        nargs="*",
        default=list(DEFAULT_OVERRIDES),
        help="train.py overrides (the run's config)",
    )
    run.set_defaults(handler=_run)
    report = commands.add_parser("report", help="diagnose.md and curves.png from the runs' JSON files")
    report.add_argument("--runs", type=Path, required=True)
    report.add_argument("--out", type=Path, required=True)
    report.set_defaults(handler=_report)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return args.handler(args)

"""D4RL's locomotion recipe made here: train a SAC behaviour policy, then write its medium,
medium-replay and medium-expert files in the D4RL schema, and print what a file holds.

python scripts/d4rl_recipe.py train --env hopper --seed 0 --out data/rl/behaviour/hopper_sac_seed0
python scripts/d4rl_recipe.py datasets --run data/rl/behaviour/hopper_sac_seed0 --out data/rl
python scripts/d4rl_recipe.py stats data/rl/hopper_medium-sac.hdf5 data/rl/hopper_medium_replay-sac.hdf5

`train` resumes from the folder's last checkpoint when it is run again (kill it at any time);
`datasets` needs the finished run; `stats` prints one markdown row per file (docs/rl.md's table).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import fields
from fractions import Fraction

from recurrent_attention.data import DataError
from recurrent_attention.tasks.rl.behaviour import BEHAVIOUR_ENVS, BehaviourSettings


def _train(args: argparse.Namespace) -> None:
    import torch

    from recurrent_attention.tasks.rl.behaviour import train_behaviour

    torch.set_num_threads(args.threads)
    names = {f.name for f in fields(BehaviourSettings)}
    settings = BehaviourSettings(**{k: v for k, v in vars(args).items() if k in names and v is not None})
    model = train_behaviour(settings, args.out)
    print(f"{args.out}: {model.num_timesteps} steps trained; curve in {args.out}/curve.csv, curve.png")


def _datasets(args: argparse.Namespace) -> None:
    from recurrent_attention.tasks.rl.dataset_stats import HEADER, dataset_stats, markdown_row
    from recurrent_attention.tasks.rl.recipe import build_datasets

    files = build_datasets(args.run, args.out, args.steps, float(Fraction(args.fraction)), args.deterministic)
    print(HEADER)
    for path in files.values():
        print(markdown_row(dataset_stats(path)))


def _replay(args: argparse.Namespace) -> None:
    from recurrent_attention.tasks.rl.dataset_stats import HEADER, dataset_stats, markdown_row
    from recurrent_attention.tasks.rl.recipe import build_medium_replay

    path = build_medium_replay(args.run, args.out, args.steps)
    print(HEADER)
    print(markdown_row(dataset_stats(path)))


def _stats(args: argparse.Namespace) -> None:
    from recurrent_attention.tasks.rl.dataset_stats import HEADER, dataset_stats, markdown_row

    print(HEADER)
    for path in args.files:
        print(markdown_row(dataset_stats(path)))


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = top.add_subparsers(dest="command", required=True)
    defaults = BehaviourSettings()

    train = commands.add_parser("train", help="train (or resume) a SAC behaviour policy")
    train.add_argument("--out", required=True, help="the run folder (checkpoints, policies, curve.csv/png)")
    train.add_argument(
        "--env", choices=BEHAVIOUR_ENVS, default=defaults.env, help="gymnasium env as tasks/rl/env.py"
    )
    train.add_argument("--seed", type=int, default=defaults.seed, help="SAC and training reset seeds (0)")
    for name, help_text in [
        ("total_steps", "environment steps to train"),
        ("eval_every", "steps between deterministic evaluations (each saves a policy snapshot)"),
        ("eval_episodes", "episodes per evaluation"),
        ("checkpoint_every", "steps between checkpoints (model + replay buffer; at the next episode end)"),
        ("learning_starts", "uniformly random steps before SAC's first update"),
        ("batch_size", "SAC minibatch"),
    ]:
        default = getattr(defaults, name)
        train.add_argument(
            f"--{name.replace('_', '-')}", type=int, default=default, help=f"{help_text} ({default})"
        )
    train.add_argument(
        "--hidden",
        type=int,
        nargs="+",
        default=list(defaults.hidden),
        help="hidden layer sizes (256 256, as D4RL)",
    )
    train.add_argument("--threads", type=int, default=1, help="torch threads (1: one core per run)")
    train.set_defaults(handler=_train)

    datasets = commands.add_parser(
        "datasets", help="medium, medium-replay and medium-expert from a finished run"
    )
    datasets.add_argument("--run", required=True, help="the run folder `train` wrote")
    datasets.add_argument(
        "--out", required=True, help="folder for <env>_{medium,medium_replay,medium_expert}-sac.hdf5"
    )
    datasets.add_argument(
        "--steps", type=int, default=200_000, help="transitions per policy (D4RL: 1M; 200000)"
    )
    datasets.add_argument(
        "--fraction", default="1/3", help="medium = first evaluation reaching this x expert (1/3)"
    )
    datasets.add_argument("--deterministic", action="store_true", help="mean actions (D4RL sampled them)")
    datasets.set_defaults(handler=_datasets)

    replay = commands.add_parser(
        "replay",
        help="medium-replay alone from a run trained to the medium step (e.g. train --total-steps 120000)",
    )
    replay.add_argument("--run", required=True, help="the run folder `train` wrote")
    replay.add_argument("--out", required=True, help="folder for <env>_medium_replay-sac.hdf5")
    replay.add_argument(
        "--steps",
        type=int,
        default=None,
        help="transitions of the buffer (default: every step the run trained)",
    )
    replay.set_defaults(handler=_replay)

    stats = commands.add_parser(
        "stats", help="one markdown row per D4RL-schema file: size, episodes, returns, sha256"
    )
    stats.add_argument("files", nargs="+")
    stats.set_defaults(handler=_stats)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command == "train":
        args.hidden = tuple(args.hidden)
    try:
        args.handler(args)
    except (ValueError, DataError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0

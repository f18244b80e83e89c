"""RL's protocol: how training draws trajectories and whether the policy is also scored on the way
(conf/task/rl/protocol/)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from recurrent_attention.tasks.protocol import TaskProtocol


@dataclass(frozen=True)
class RLProtocol(TaskProtocol):
    """``trajectory_sampling``: ``length`` draws a trajectory in proportion to its length (the official
    Decision Transformer), ``uniform`` each alike (min-decision-transformer, which the paper ran).
    ``periodic_eval``: also play the window mode every ``task.periodic_eval_every`` updates and after
    the last (min-DT's evaluation; its best score is ``score_best_periodic``)."""

    family = "rl"
    choices: ClassVar[dict[str, tuple[str, ...]]] = {"trajectory_sampling": ("length", "uniform")}
    trajectory_sampling: str
    periodic_eval: bool


# conf/task/rl/protocol/default.yaml, for a task built without a config (a test holds them equal)
DEFAULT = RLProtocol(trajectory_sampling="length", periodic_eval=False)

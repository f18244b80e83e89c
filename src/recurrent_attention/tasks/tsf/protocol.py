"""TSF's protocol: the one rule in which TSLib's two eras differ (conf/task/tsf/protocol/)."""

from __future__ import annotations

from dataclasses import dataclass

from recurrent_attention.tasks.protocol import TaskProtocol


@dataclass(frozen=True)
class TSFProtocol(TaskProtocol):
    """``drop_last_test_batch``: TSLib's test loader dropped its last incomplete batch until July
    2024 (the paper's numbers, ``reference``); ``default`` evaluates every test window."""

    family = "tsf"
    drop_last_test_batch: bool


# conf/task/tsf/protocol/default.yaml, for a task built without a config (a test holds them equal)
DEFAULT = TSFProtocol(drop_last_test_batch=False)

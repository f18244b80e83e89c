"""LM's protocol: what the task itself does differently for the CRT paper's models
(conf/task/lm/protocol/)."""

from __future__ import annotations

from dataclasses import dataclass

from recurrent_attention.tasks.protocol import TaskProtocol


@dataclass(frozen=True)
class LMProtocol(TaskProtocol):
    """``txl_init``: re-initialise the whole language model by Transformer-XL's rules
    (:func:`~recurrent_attention.tasks.lm.txl_init.transformer_xl_init`), as the paper's code does."""

    family = "lm"
    txl_init: bool


# conf/task/lm/protocol/default.yaml, for a task built without a config (a test holds them equal)
DEFAULT = LMProtocol(txl_init=False)

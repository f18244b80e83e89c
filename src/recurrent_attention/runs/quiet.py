"""Libraries' messages that do not concern a user of ``train.py``, silenced by their exact text.

Each is matched by the start of its own message, so any other warning of the same library still
shows. Why each one is noise here:

- Lightning's ``srun`` hint: printed on any machine that has SLURM installed, for every local run;
  a cluster run goes through ``hydra/launcher=submitit_slurm`` (docs/design.md), never ``srun python``.
- Lightning's LitLogger tip: an advertisement on every run.
- Lightning's own use of torch's deprecated ``LeafSpec``: nothing a user can change.
- "resuming from a checkpoint that ended before the epoch ended ... can cause unreliable results":
  ``runs.resume`` makes such a resume exact (it skips the batches done and restores the random
  state), and ``train.py`` says so in its "resuming from" line.
- Lightning's "Received SIGTERM" on Ctrl-C: ``runs.interrupt`` turns Ctrl-C into SIGTERM, and
  ``train.py`` prints what happened ("interrupted: checkpoint saved to ...").
"""

from __future__ import annotations

import logging
import warnings

NOISE_WARNINGS = (
    "The `srun` command is available on your system but is not used",
    r"`isinstance\(treespec, LeafSpec\)` is deprecated",
    "You're resuming from a checkpoint that ended before the epoch ended",
)
NOISE_LOGS = {
    "lightning.pytorch.utilities.rank_zero": "💡 Tip: For seamless cloud logging",
    "lightning.fabric.utilities.rank_zero": "💡 Tip: For seamless cloud logging",
    "lightning.pytorch.trainer.connectors.signal_connector": "Received SIGTERM",
}


class _DropStartingWith(logging.Filter):
    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().removeprefix("[rank: 0] ").startswith(self.prefix)


def silence_library_noise() -> None:
    """Install the filters (idempotent: a filter already on a logger is not added again)."""
    for pattern in NOISE_WARNINGS:
        warnings.filterwarnings("ignore", message=pattern)
    for name, prefix in NOISE_LOGS.items():
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropStartingWith) and f.prefix == prefix for f in logger.filters):
            logger.addFilter(_DropStartingWith(prefix))

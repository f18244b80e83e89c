"""How far a job stopped at a window's end got, read from the CSV log Lightning writes."""

from __future__ import annotations

from pathlib import Path

from lightning.pytorch.loggers import CSVLogger

from recurrent_attention.device.runner import epochs_logged


def _log(folder: Path, version: int, epochs: range, steps_per_epoch: int = 3) -> None:
    """Rows as a Trainer logs them: a training loss every step, the validation NLL at each epoch's
    end, both with the ``epoch`` the logger connector adds."""
    logger = CSVLogger(save_dir=str(folder), name="logs", version=version)
    for epoch in epochs:
        for step in range(epoch * steps_per_epoch, (epoch + 1) * steps_per_epoch):
            logger.log_metrics({"train/loss": 1.0 / (step + 1), "epoch": epoch}, step=step)
        logger.log_metrics({"val/nll": 2.0 - epoch / 10, "epoch": epoch}, step=step)
    logger.save()


def test_a_run_that_logged_five_epochs_reached_five(tmp_path: Path) -> None:
    _log(tmp_path / "job-000", 0, range(5))
    assert epochs_logged(tmp_path / "job-000") == 5


def test_a_resumed_run_counts_its_latest_log(tmp_path: Path) -> None:
    _log(tmp_path / "job-000", 0, range(3))
    _log(tmp_path / "job-000", 1, range(3, 7))  # the resumed segment writes version_1
    assert epochs_logged(tmp_path / "job-000") == 7


def test_a_job_killed_before_its_first_flush_reached_nothing_known(tmp_path: Path) -> None:
    assert epochs_logged(tmp_path / "never-made") is None
    (tmp_path / "job-001" / "logs" / "version_0").mkdir(parents=True)
    (tmp_path / "job-001" / "logs" / "version_0" / "metrics.csv").write_text("epoch,step,train/loss\n")
    assert epochs_logged(tmp_path / "job-001") is None

"""Hydra entry point: build datamodule, backbone and task module from the config; fit; test; summarise.

A run's folder is ``<paths.output_dir>/<task>/<model>/<preset>/seed<N>-<run_id>``, where
``run_id`` hashes the resolved config (``runs.identity``), so the same config always finds its
folder: running it again resumes from ``checkpoints/last.ckpt`` to the metrics of an unbroken run
(``runs.resume``), and a finished run (one with a ``summary.json``) is skipped unless
``force=true``, which moves the old run's files aside and starts clean. One process writes a
folder at a time (``runs.lock``). A failing run writes ``failed.json``; in a sweep the other jobs
go on and the sweep exits non-zero listing the failures (``runs.sweep``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import traceback
from pathlib import Path
from typing import Any

import hydra
import lightning as L
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.errors import InstantiationException
from hydra.types import RunMode
from hydra.utils import instantiate
from lightning.pytorch.utilities import rank_zero_only
from lightning.pytorch.utilities.exceptions import SIGTERMException
from omegaconf import DictConfig, OmegaConf

from recurrent_attention.config import CONFIG_DIR, backbone_config, register_resolvers
from recurrent_attention.config_checks import (
    check_added_keys,
    check_config,
    check_group_choices,
    check_override_syntax,
    check_removed_keys,
)
from recurrent_attention.data.fingerprint import (
    data_identity,
    own_data_name,
    own_data_paths,
    require_own_data,
)
from recurrent_attention.errors import CheckpointError, ConfigError, DataError, DataMissingError
from recurrent_attention.ops import native
from recurrent_attention.results.collect import non_finite_metrics
from recurrent_attention.results.summary import (
    STEPS_KEY,
    device_description,
    git_commit,
    package_version,
    write_summary,
)
from recurrent_attention.runs.atomic import AtomicCheckpointIO, DiskFullError, atomic_write_text, disk_full
from recurrent_attention.runs.folder import remove_refused_folder, set_aside_previous_run, usable_checkpoint
from recurrent_attention.runs.identity import run_ids
from recurrent_attention.runs.interrupt import interrupts_as_sigterm, requeue_if_warned, warned_by_slurm
from recurrent_attention.runs.lock import RunFolderBusyError, RunLock
from recurrent_attention.runs.quiet import silence_library_noise
from recurrent_attention.runs.record import FAILED_NAME, SUMMARY_NAME, require_same_run, write_run_record
from recurrent_attention.runs.resume import LastCheckpoint, ReproducibleEpochs, last_checkpoint_path
from recurrent_attention.runs.sweep import note_failed_job
from recurrent_attention.runs.trained import require_optimiser_steps
from recurrent_attention.runs.wall_clock import WallClock
from recurrent_attention.tasks import register_families
from recurrent_attention.tasks.base import LOADER_KEYS

register_resolvers()
register_families()  # the families' config rules and resolvers, before Hydra resolves a run's folder

log = logging.getLogger(__name__)
MATMUL_PRECISIONS = ("highest", "high", "medium")

EXIT_RUN_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_FOLDER_BUSY = 3
EXIT_INTERRUPTED = 143  # 128 + SIGTERM, as a shell reports a process stopped by it


class NonFiniteMetricError(ValueError):
    """A test metric is NaN or infinite: the run failed, it has no number for a table."""


def training_callbacks(cfg: DictConfig, run_dir: Path) -> list[L.Callback]:
    """Best and last checkpoints, exact-resume reseeding, early stopping, then `callbacks` of the config.

    The best checkpoint follows ``task.checkpoint`` (metric, mode) where the task has one, else
    ``task.monitor``; early stopping always follows ``task.monitor`` (Meta TPP stops on the
    validation NLL but tests the checkpoint of the best validation RMSE).
    """
    from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint

    monitor = cfg.task.monitor
    best = cfg.task.get("checkpoint") or monitor
    last = LastCheckpoint(run_dir)
    callbacks: list[L.Callback] = [
        # always best.ckpt: a run restarted from scratch (a dead attempt's best.ckpt there) overwrites
        # it rather than writing best-v1.ckpt beside it
        ModelCheckpoint(
            dirpath=last.path.parent,
            monitor=best.metric,
            mode=best.mode,
            save_top_k=1,
            filename="best",
            enable_version_counter=False,
        ),
        last,
        ReproducibleEpochs(cfg.seed, last.path),
    ]
    if monitor.get("patience") is not None:
        callbacks.append(EarlyStopping(monitor=monitor.metric, mode=monitor.mode, patience=monitor.patience))
    callbacks.extend(instantiate(cb) for cb in cfg.get("callbacks", {}).values())
    return callbacks


def identity_record(cfg: DictConfig) -> dict[str, Any]:
    """The fields that name a run in ``summary.json`` and ``failed.json`` (tables group by them)."""
    choices = HydraConfig.get().runtime.choices
    own = own_data_paths(cfg)
    return {
        "task": choices.get("task"),
        "family": cfg.task.family,
        # own data is its own dataset, named by its file: tables never set it beside a paper's number
        "dataset": own_data_name(own) if own else cfg.task.dataset,
        "own_data": bool(own),
        "task_dataset": cfg.task.dataset,
        "setting": OmegaConf.to_container(cfg.task.get("setting", {}), resolve=True),
        "model": cfg.model.name,
        "seed": cfg.seed,
        "preset": choices.get("preset"),
        "compat": cfg.task.get("compat", "default"),
        **run_ids(cfg, OmegaConf.to_container(choices)),
        "git_commit": git_commit(Path(__file__).parent),
        "package_version": package_version(),
    }


def finite_metrics(tested: list[dict[str, float]], run_dir: Path) -> dict[str, float]:
    metrics = {k.removeprefix("test/"): float(v) for k, v in (tested[0] if tested else {}).items()}
    bad = non_finite_metrics(metrics)
    if bad:
        raise NonFiniteMetricError(
            f"test metric(s) {', '.join(bad)} in {run_dir}: the run diverged; lower task.lr or check the data"
        )
    return metrics


def build(node: DictConfig, **kwargs: Any) -> Any:
    """``instantiate``, with a bad-input error raised by the constructor passed on as itself (one
    line, exit 2) rather than inside Hydra's InstantiationException."""
    try:
        return instantiate(node, **kwargs)
    except InstantiationException as err:
        if isinstance(err.__cause__, ConfigError | DataError):
            raise err.__cause__ from None
        raise


def build_backbone(model: DictConfig) -> Any:
    """:func:`build` for the ``model`` node (``config.backbone_config``: the class ``model._target_``
    from every key but the run's): each backbone checks its own options in its constructor
    (``config_checks`` knows only the options every model shares), so a ``ValueError`` raised there
    is a bad model option, whose message names the key; it stops the run in that one line."""
    try:
        return build(backbone_config(model))
    except InstantiationException as err:
        if isinstance(err.__cause__, ValueError):
            raise ConfigError(str(err.__cause__).splitlines()[0]) from None
        raise


def compile_backbone(backbone: Any, cfg: DictConfig) -> None:
    """``model.compile=true``: the backbone's forward through ``torch.compile`` with the backend
    ``model.compile_backend`` (inductor: C++ kernels on a CPU, which need a compiler, Triton ones on
    a GPU), for training, validation and test alike. The backbone is compiled in place
    (``nn.Module.compile``), so its parameter names, checkpoints and every loader of a finished run
    are an eager run's. The heads and the loss stay eager: the backbone is where the time goes,
    and each backbone's training forward and backward compile as one graph
    (tests/models/test_compile.py)."""
    if cfg.model.get("compile", False):
        backbone.compile(backend=cfg.model.get("compile_backend", "inductor"))


def is_compiled(backbone: Any) -> bool:
    """Whether the backbone runs through ``torch.compile`` (``nn.Module.compile`` sets this)."""
    return getattr(backbone, "_compiled_call_impl", None) is not None


def tested_checkpoint(cfg: DictConfig, trainer: L.Trainer) -> str | None:
    """The checkpoint the test reads: the best by ``task.checkpoint`` (else ``task.monitor``) unless
    ``task.test_checkpoint=last`` (PI-ViT tests its last epoch's weights)."""
    if cfg.task.get("test_checkpoint", "best") == "last":
        (last,) = (c for c in trainer.checkpoint_callbacks if isinstance(c, LastCheckpoint))
        return str(last.path)
    callback = trainer.checkpoint_callback
    return (callback.best_model_path or None) if callback else None


def loader_settings(cfg: DictConfig) -> dict[str, Any]:
    """The run's ``loader`` node (``conf/trainer/gpu.yaml``: workers, pinned memory) as keyword
    arguments of the task's datamodule; none under ``trainer=cpu`` (the datamodules' 0 / False).
    A setting the task's datamodule config names itself stays the task's (video's
    ``task.num_workers``, whose random views are drawn in the workers)."""
    settings = OmegaConf.to_container(cfg.get("loader") or OmegaConf.create(), resolve=True)
    unknown = sorted(set(settings) - set(LOADER_KEYS))
    if unknown:
        raise ConfigError(f"loader.{unknown[0]} is not a loader setting: use {', '.join(LOADER_KEYS)}")
    return {key: value for key, value in settings.items() if key not in cfg.task.datamodule}


def set_matmul_precision(cfg: DictConfig) -> None:
    """``float32_matmul_precision`` (``trainer=gpu``: ``high``, TF32) for torch; absent, torch's own."""
    precision = cfg.get("float32_matmul_precision")
    if precision is None:
        return
    if precision not in MATMUL_PRECISIONS:
        raise ConfigError(
            f"float32_matmul_precision={precision}: choose one of {', '.join(MATMUL_PRECISIONS)}"
        )
    torch.set_float32_matmul_precision(precision)


def run(cfg: DictConfig, run_dir: Path, identity: dict[str, Any]) -> dict[str, Any]:
    """Train and test one configuration in ``run_dir``; returns the summary record."""
    clock = WallClock()
    L.seed_everything(cfg.seed, workers=True)
    set_matmul_precision(cfg)
    datamodule = build(cfg.task.datamodule, **loader_settings(cfg))
    backbone = build_backbone(cfg.model)
    compile_backbone(backbone, cfg)
    module = build(cfg.task.module, backbone=backbone)
    logger = instantiate(cfg.logger, save_dir=str(run_dir)) if cfg.get("logger") else False
    callbacks = [clock, *training_callbacks(cfg, run_dir)]
    trainer: L.Trainer = instantiate(
        cfg.trainer,
        callbacks=callbacks,
        logger=logger,
        default_root_dir=str(run_dir),
        plugins=[AtomicCheckpointIO()],  # a full disk leaves the last good checkpoints, never half of one
    )
    compiled = "yes" if is_compiled(backbone) else "no"
    log.info(
        f"device {trainer.strategy.root_device} ({device_description()}), precision {trainer.precision}, "
        f"float32 matmul {torch.get_float32_matmul_precision()}, backbone compiled: {compiled}"
    )
    last = usable_checkpoint(last_checkpoint_path(run_dir))
    if last:
        print(
            f"resuming from {last} (exact: the batches done are skipped, the random state restored)",
            file=sys.stderr,
        )
    # Ctrl-C, SLURM's warning to a submitit job: a checkpoint at the end of the batch, an exact resume
    with interrupts_as_sigterm():
        trainer.fit(module, datamodule=datamodule, ckpt_path=str(last) if last else None)
        require_optimiser_steps(cfg, trainer)  # an untrained model is never tested as a result
        best = trainer.checkpoint_callback.best_model_path if trainer.checkpoint_callback else ""
        checkpoint = tested_checkpoint(cfg, trainer)
        tested = trainer.test(module, datamodule=datamodule, ckpt_path=checkpoint, verbose=True)
    segment_s = clock.segment_s()
    record = {
        **identity,
        "metrics": finite_metrics(tested, run_dir),
        "params": sum(p.numel() for p in module.parameters()),
        "backbone_params": sum(p.numel() for p in backbone.parameters()),
        "epochs": trainer.current_epoch,
        STEPS_KEY: trainer.global_step,
        "resumed": last is not None,
        "best_checkpoint": best,
        "data": data_identity(cfg, with_paths=True),
        "tested_checkpoint": checkpoint or "",
        # the whole run's seconds, earlier segments included, and those of this process alone
        "wall_time_s": clock.earlier_s + segment_s,
        "wall_time_segment_s": segment_s,
        "device": device_description(),
        "compiled": is_compiled(backbone),  # model.compile: whether the backbone ran compiled
        "native_kernels": native.in_use(),  # Aaren's C++ CPU kernels (ops/native.py) or its PyTorch forms
        "overrides": list(HydraConfig.get().overrides.task),
        "world_size": trainer.world_size,
        # what a family reports beyond scalar metrics (RL: every episode's return and length)
        **(module.summary_extras() if hasattr(module, "summary_extras") else {}),
    }
    if trainer.is_global_zero:
        write_summary(run_dir, record)
        (run_dir / FAILED_NAME).unlink(missing_ok=True)
    return record


def run_in_folder(cfg: DictConfig, run_dir: Path, identity: dict[str, Any]) -> dict[str, Any]:
    """Skip a finished run (its folder untouched), or start clean on ``force``; then record the
    command in the folder and run. The caller holds the lock."""
    if cfg.force:
        aside = set_aside_previous_run(run_dir, hydra_log=f"{HydraConfig.get().job.name}.log")
        if aside:
            print(f"force=true: the previous run's files are now in {aside}", file=sys.stderr)
    elif (run_dir / SUMMARY_NAME).is_file():
        print(f"already finished: {run_dir / SUMMARY_NAME} (pass force=true to run again)", file=sys.stderr)
        return json.loads((run_dir / SUMMARY_NAME).read_text())
    write_run_record(run_dir, cfg, HydraConfig.get(), identity)
    return run(cfg, run_dir, identity)


def main() -> None:
    """The command (``train.py``, ``ra-train``): a misspelt config-group choice is one line, exit 2,
    before Hydra composes anything; then the Hydra app."""
    try:
        check_override_syntax(sys.argv[1:])  # a path with a space or a non-ASCII letter: how to quote it
        check_group_choices(sys.argv[1:])
        check_removed_keys(sys.argv[1:])
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
    silence_library_noise()  # Lightning's hints and tips that do not concern this command
    app()


@hydra.main(config_path=str(CONFIG_DIR), config_name="train", version_base="1.3")
def app(cfg: DictConfig) -> dict[str, Any] | None:
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    multirun = HydraConfig.get().mode == RunMode.MULTIRUN
    try:
        check_added_keys(cfg, HydraConfig.get().overrides.task)  # +task.lrr=0.1: a typo, not a new key
        check_config(cfg)  # before the identity below, which resolves the whole config
        require_own_data(cfg)  # a mistyped path is a bad command: no run, so no failed.json
    except (ConfigError, DataError) as err:
        output_dir = OmegaConf.select(
            cfg, "paths.output_dir", default=None, throw_on_resolution_failure=False
        )
        remove_refused_folder(run_dir, Path(output_dir or run_dir))
        return _stop(err, run_dir, multirun, EXIT_BAD_INPUT)
    identity = identity_record(cfg)
    if rank_zero_only.rank != 0:  # a DDP worker process: rank 0 owns the folder
        return run(cfg, run_dir, identity)
    try:
        if not cfg.force:  # force=true sets a finished or interrupted run aside, whichever it is
            require_same_run(run_dir, identity["run_id"])
    except ConfigError as err:
        return _stop(err, run_dir, multirun, EXIT_BAD_INPUT)
    try:
        with RunLock(run_dir):
            record = run_in_folder(cfg, run_dir, identity)
        print(f"run folder: {run_dir}", file=sys.stderr)  # where summary.json and the checkpoints are
        return record
    except RunFolderBusyError as err:
        return _stop(err, run_dir, multirun, EXIT_FOLDER_BUSY)
    except (SIGTERMException, KeyboardInterrupt):
        then = (
            "SLURM runs the job again, which resumes"
            if warned_by_slurm()
            else "run the same command to resume"
        )
        print(f"interrupted: checkpoint saved to {last_checkpoint_path(run_dir)}; {then}", file=sys.stderr)
        requeue_if_warned()  # a submitit_slurm job warned of its end: requeued, it exits here
        sys.exit(EXIT_INTERRUPTED)
    except (CheckpointError, ConfigError, DataError, NonFiniteMetricError) as err:
        _record_failure(run_dir, identity, err)
        code = EXIT_RUN_FAILED if isinstance(err, NonFiniteMetricError) else EXIT_BAD_INPUT
        return _stop(err, run_dir, multirun, code)
    except Exception as err:
        if disk_full(err):
            with contextlib.suppress(OSError):  # failed.json too, where a byte still fits
                _record_failure(run_dir, identity, err)
            return _stop(
                DiskFullError(run_dir, last_checkpoint_path(run_dir)), run_dir, multirun, EXIT_RUN_FAILED
            )
        _record_failure(run_dir, identity, err)
        if not multirun:
            raise
        return _stop(err, run_dir, multirun, EXIT_RUN_FAILED)


def _stop(err: BaseException, run_dir: Path, multirun: bool, code: int) -> None:
    """One line; a single run exits with ``code``, a sweep notes the job and goes on."""
    print(f"error: {err}", file=sys.stderr)
    if not multirun:
        sys.exit(code)
    note_failed_job(run_dir, err)


def _raised_at(err: BaseException) -> str:
    """Where an error without a message (a bare ``assert`` in a library) was raised, for failed.json."""
    frames = traceback.extract_tb(err.__traceback__)
    return f"raised at {frames[-1].filename}:{frames[-1].lineno}" if frames else "no message"


def _record_failure(run_dir: Path, identity: dict[str, Any], err: BaseException) -> None:
    """``failed.json`` beside the run: what failed (error, traceback) and which run it was."""
    record = {
        **identity,
        "device": device_description(),  # a GPU failure goes to its GPU table (results/hardware.py)
        "error": f"{type(err).__name__}: {str(err) or _raised_at(err)}",
        "traceback": traceback.format_exc(),
        # data not found: no seed of that data's row failed (results.collect does not count it)
        "data_read": not isinstance(err, DataMissingError),
    }
    atomic_write_text(run_dir / FAILED_NAME, json.dumps(record, indent=2, default=str) + "\n")


if __name__ == "__main__":
    main()

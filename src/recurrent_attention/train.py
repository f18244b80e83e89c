"""Hydra entry point: build datamodule, backbone and task module from the config; fit; test; summarise.

Run folders are deterministic (task / model / preset / seed / other overrides), so running the
same command again resumes from ``checkpoints/last.ckpt``, and a finished run (one with a
``summary.json``) is skipped unless ``force=true``. In a multirun sweep a failing job writes
``failed.json`` with its traceback and the sweep goes on.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import hydra
import lightning as L
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from recurrent_attention.config import CONFIG_DIR, register_resolvers
from recurrent_attention.data import DataError
from recurrent_attention.results.summary import (
    SUMMARY_NAME,
    atomic_write_text,
    device_description,
    git_commit,
    write_summary,
)

register_resolvers()


def _callbacks(cfg: DictConfig, run_dir: Path) -> list[L.Callback]:
    from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint

    monitor = cfg.task.monitor
    callbacks: list[L.Callback] = [
        ModelCheckpoint(
            dirpath=run_dir / "checkpoints",
            monitor=monitor.metric,
            mode=monitor.mode,
            save_last=True,
            save_top_k=1,
            filename="best",
        )
    ]
    if monitor.get("patience") is not None:
        callbacks.append(EarlyStopping(monitor=monitor.metric, mode=monitor.mode, patience=monitor.patience))
    callbacks.extend(instantiate(cb) for cb in cfg.get("callbacks", {}).values())
    return callbacks


def run(cfg: DictConfig, run_dir: Path) -> dict[str, Any]:
    """Train and test one configuration in ``run_dir``; returns the summary record."""
    started = time.time()
    L.seed_everything(cfg.seed, workers=True)
    datamodule = instantiate(cfg.task.datamodule)
    backbone = instantiate(cfg.model.backbone)
    module = instantiate(cfg.task.module, backbone=backbone)
    logger = instantiate(cfg.logger, save_dir=str(run_dir)) if cfg.get("logger") else False
    trainer: L.Trainer = instantiate(
        cfg.trainer, callbacks=_callbacks(cfg, run_dir), logger=logger, default_root_dir=str(run_dir)
    )
    last = run_dir / "checkpoints" / "last.ckpt"
    resumed = last.is_file()
    if resumed:
        print(f"resuming from {last}", file=sys.stderr)
    trainer.fit(module, datamodule=datamodule, ckpt_path=str(last) if resumed else None)
    best = trainer.checkpoint_callback.best_model_path if trainer.checkpoint_callback else ""
    tested = trainer.test(module, datamodule=datamodule, ckpt_path=best or None, verbose=True)
    choices = HydraConfig.get().runtime.choices
    record = {
        "task": choices.get("task"),
        "family": cfg.task.family,
        "dataset": cfg.task.dataset,
        "setting": OmegaConf.to_container(cfg.task.get("setting", {}), resolve=True),
        "model": cfg.model.name,
        "seed": cfg.seed,
        "preset": choices.get("preset"),
        "compat": cfg.task.get("compat", "default"),
        "metrics": {k.removeprefix("test/"): float(v) for k, v in (tested[0] if tested else {}).items()},
        "params": sum(p.numel() for p in module.parameters()),
        "backbone_params": sum(p.numel() for p in backbone.parameters()),
        "epochs": trainer.current_epoch,
        "resumed": resumed,
        "best_checkpoint": best,
        "wall_time_s": time.time() - started,
        "device": device_description(),
        "git_commit": git_commit(Path(__file__).parent),
        "overrides": list(HydraConfig.get().overrides.task),
        # what a family reports beyond scalar metrics (RL: every episode's return and length)
        **(module.summary_extras() if hasattr(module, "summary_extras") else {}),
    }
    write_summary(run_dir, record)
    return record


@hydra.main(config_path=str(CONFIG_DIR), config_name="train", version_base="1.3")
def main(cfg: DictConfig) -> dict[str, Any] | None:
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    if (run_dir / SUMMARY_NAME).is_file() and not cfg.force:
        print(f"already finished: {run_dir / SUMMARY_NAME} (pass force=true to run again)", file=sys.stderr)
        return json.loads((run_dir / SUMMARY_NAME).read_text())
    try:
        return run(cfg, run_dir)
    except DataError as err:
        if HydraConfig.get().mode == RunMode.MULTIRUN:
            _record_failure(run_dir, err)
            return None
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    except Exception as err:
        if HydraConfig.get().mode != RunMode.MULTIRUN:
            raise
        _record_failure(run_dir, err)
        return None


def _record_failure(run_dir: Path, err: BaseException) -> None:
    """Keep the sweep going: note the failure beside the run, with its traceback."""
    print(f"job failed ({type(err).__name__}: {err}); details in {run_dir / 'failed.json'}", file=sys.stderr)
    record = {"error": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc()}
    atomic_write_text(run_dir / "failed.json", json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()

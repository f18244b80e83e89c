"""The GPU queue: its chunks, and what is done read back from run records in results/runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from recurrent_attention.device.chunks import (
    HORIZONS,
    QUEUE,
    TSF_SIZE,
    VERIFY_REPORT,
    chunk_named,
    job_key,
    next_chunk,
    pending_jobs,
)
from tests.conftest import ROOT

H100 = "NVIDIA H100 80GB HBM3 x1"


def write_record(repo: Path, name: str, overrides: list[str], device: str) -> None:
    folder = repo / "results" / "runs" / name
    folder.mkdir(parents=True)
    (folder / "summary.json").write_text(json.dumps({"overrides": overrides, "device": device}))


def test_queue_order_and_sizes() -> None:
    names = ["verify", "ef_wiki", "tsf", "ptb", "ptb16", "rl_medium", "rl_medium_replay", "rl_medium_expert"]
    assert [c.name for c in QUEUE] == names
    tsf = chunk_named("tsf")
    assert len(tsf.jobs) == 4 * len(HORIZONS) * 2 * 3  # datasets x horizons x models x seeds
    assert len({job.key for job in tsf.jobs}) == len(tsf.jobs)
    assert all({"preset=paper", "trainer=gpu"} <= set(job.overrides) for c in QUEUE for job in c.jobs)
    wiki = chunk_named("ef_wiki").jobs
    assert len({job.key for job in wiki}) == len(wiki) == 2 * 2 * 5  # protocols x models x seeds
    # seed by seed, so that a window cut short leaves whole seeds
    assert [j.overrides[-2] for j in wiki[:4]] == ["seed=1"] * 4
    ettm1 = next(j for j in tsf.jobs if "task=tsf/ettm1" in j.overrides and "task.pred_len=96" in j.overrides)
    assert ettm1.cost == pytest.approx(4.0)  # four times ETTh1's windows, same horizon


def test_the_tsf_chunk_runs_the_experiments_grid_on_its_datasets() -> None:
    experiment = ROOT / "conf" / "experiment" / "aaren" / "tsf.yaml"
    params = yaml.safe_load(experiment.read_text())["hydra"]["sweeper"]["params"]
    grid = {key: str(values).split(",") for key, values in params.items()}
    assert {f"tsf/{dataset}" for dataset in TSF_SIZE} <= set(grid["task"])
    cells = {
        frozenset((f"task=tsf/{dataset}", f"task.pred_len={horizon}", f"model={model}"))
        for dataset in TSF_SIZE
        for horizon in grid["task.pred_len"]
        for model in grid["model"]
    }
    jobs = chunk_named("tsf").jobs
    grid_keys = ("task=", "task.pred_len=", "model=")
    assert {frozenset(o for o in job.overrides if o.startswith(grid_keys)) for job in jobs} == cells
    assert {o for job in jobs for o in job.overrides if o.startswith("seed=")} <= {
        f"seed={s}" for s in grid["seed"]
    }


def test_job_key_ignores_where_files_go_and_order() -> None:
    a = ["model=aaren", "seed=1", "paths.output_dir=/tmp/x", "trainer.enable_progress_bar=false"]
    b = ["seed=1", "+model=aaren", "paths.data_dir=/y"]
    assert job_key(a) == job_key(b) == "model=aaren seed=1"
    assert job_key(["seed=2", "model=aaren"]) != job_key(a)


def test_done_is_read_from_gpu_records_only(tmp_path: Path) -> None:
    first = chunk_named("tsf").jobs[0]
    as_run = [*first.overrides, "paths.output_dir=/tmp/ra-device/runs", "trainer.enable_progress_bar=false"]
    write_record(tmp_path, "a", as_run, "CPU AMD EPYC, 2 cores, torch threads 1")
    assert first in pending_jobs(chunk_named("tsf"), tmp_path)  # a CPU run of the same overrides
    write_record(tmp_path, "b", as_run, H100)
    pending = pending_jobs(chunk_named("tsf"), tmp_path)
    assert first not in pending and len(pending) == len(chunk_named("tsf").jobs) - 1


def test_next_chunk_moves_on_when_a_chunk_is_done(tmp_path: Path) -> None:
    assert next_chunk(tmp_path).name == "verify"
    (tmp_path / VERIFY_REPORT).parent.mkdir(parents=True)
    (tmp_path / VERIFY_REPORT).write_text("{}")
    assert next_chunk(tmp_path).name == "ef_wiki"
    for index, job in enumerate(chunk_named("ef_wiki").jobs):
        write_record(tmp_path, f"ef{index}", list(job.overrides), H100)
    assert next_chunk(tmp_path).name == "tsf"
    for index, job in enumerate(chunk_named("tsf").jobs):
        write_record(tmp_path, f"tsf{index}", list(job.overrides), H100)
    assert next_chunk(tmp_path).name == "ptb"


def test_unknown_chunk_names_the_choices() -> None:
    with pytest.raises(ValueError, match="verify, ef_wiki, tsf, ptb, ptb16, rl_medium, "):
        chunk_named("ptb3")


@pytest.fixture(scope="module")
def compose_job():
    from hydra import compose, initialize_config_dir

    from recurrent_attention.config import CONFIG_DIR, register_resolvers

    register_resolvers()
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        yield lambda job: compose("train", overrides=list(job.overrides))


@pytest.mark.parametrize("chunk", [c.name for c in QUEUE])
def test_every_job_composes_at_the_papers_size_on_the_gpu(compose_job, chunk: str) -> None:
    """A job that does not compose, that train.py refuses or that runs at CPU sizes would waste a window."""
    from omegaconf import OmegaConf

    from recurrent_attention.config_checks import check_added_keys

    for job in chunk_named(chunk).jobs:
        cfg = compose_job(job)
        check_added_keys(cfg, job.overrides)
        # EF's tiny model trains in fp32, like Meta TPP; every other job in bf16 mixed precision
        precision = "32-true" if cfg.task.family == "ef" else "bf16-mixed"
        assert cfg.trainer.precision == precision and cfg.trainer.accelerator == "gpu"
        assert cfg.trainer.get("limit_train_batches") in (None, 1.0)
        if cfg.task.family == "ef":  # Meta TPP's whole schedule at the paper's size, Wiki's marks
            assert (cfg.model.d_model, cfg.task.max_epochs, cfg.task.monitor.patience) == (64, 6000, 500)
            assert cfg.task.n_marks == 8226 and cfg.task.max_length == 250
        if cfg.task.family == "lm":
            assert cfg.model.d_model == 410 and cfg.task.max_epochs == 40
            setting = OmegaConf.to_container(cfg.task.setting, resolve=True)
            if "model=paper/transformer" in job.overrides:  # the paper's baseline: relative positions
                assert cfg.model._target_.endswith("TransformerXL")
            if "model.memory_token=false" in job.overrides:  # a Table 8 row names its switches
                assert setting["memory_token"] is False and "recurrent_positions" in setting

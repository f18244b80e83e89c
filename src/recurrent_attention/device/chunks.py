"""The GPU queue: what each window runs, in order, each chunk sized to one device command.

A chunk is a list of training jobs (``train.py`` overrides with a relative cost) and, for
``verify``, checks run before them (tests, benchmarks). What a chunk needs beyond the GPU
machine's own Python travels in the kit: the registry sources it reads, local files (the
recipe-made Hopper files) and the distributions that machine lacks.

What is done is read from ``results/runs``: a job is done once a finished run recorded on a GPU
has the job's overrides (less those that only say where files go), so each window takes up the
queue where the last one stopped. ``verify`` is done once its report is committed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf

from recurrent_attention.config import CONFIG_DIR
from recurrent_attention.results.hardware import is_gpu
from recurrent_attention.runs.identity import IGNORED_KEYS

# Every GPU job trains at the paper's settings in bf16 mixed precision on the one GPU.
GPU_JOB = ("preset=paper", "trainer=gpu")
# Distributions the GPU machine's Python lacks that every chunk needs (train.py composes with Hydra).
BASE_REQUIREMENTS = ("hydra-core", "omegaconf", "antlr4-python3-runtime")
# The Decision Transformer's environments (gymnasium's MuJoCo Hopper) and what they pull in beyond it;
# mujoco-studio (12 MB: the Filament renderer and the studio app, which mujoco names) is left out:
# nothing here renders, and Hopper steps without it.
RL_REQUIREMENTS = ("gymnasium", "farama-notifications", "mujoco", "mujoco-core", "glfw", "pyopengl")
VERIFY_REPORT = Path("results/device/verify/report.json")


@dataclass(frozen=True)
class Job:
    """One ``train.py`` run; ``cost`` is its expected time relative to a paper-size ETTh1@96 run."""

    overrides: tuple[str, ...]
    cost: float = 1.0

    @property
    def key(self) -> str:
        return job_key(self.overrides)


@dataclass(frozen=True)
class Step:
    """A check run beside the jobs: ``argv`` on the GPU, ``smoke_argv`` in the runner's CPU smoke form.

    ``{python}`` becomes the interpreter and ``{out}`` the step's own output folder, where a check
    writes its results as they come (a test's line as it ends, a benchmark's part as it is measured),
    so that one stopped at ``timeout_s`` keeps what it finished.
    """

    name: str
    argv: tuple[str, ...]
    smoke_argv: tuple[str, ...]
    timeout_s: float


@dataclass(frozen=True)
class Chunk:
    name: str
    description: str
    jobs: tuple[Job, ...] = ()
    steps: tuple[Step, ...] = ()
    sources: tuple[str, ...] = ()  # registry sources whose files travel (data/manifests/*.yaml)
    local_files: tuple[str, ...] = ()  # files under data/ that no registry holds; they travel gzipped
    requirements: tuple[str, ...] = BASE_REQUIREMENTS
    parallel: int = 6  # jobs at a time on the one GPU (80 GB, 16 CPU cores beside it)


def job_key(overrides: Iterable[str]) -> str:
    """The overrides that name a job's result, sorted: where files go and how a run is watched
    (``runs.identity.IGNORED_KEYS``) do not count, nor a ``+``/``++`` prefix."""
    kept = []
    for text in overrides:
        key = text.lstrip("+").split("=", 1)[0]
        if not any(key == k or key.startswith((f"{k}.", f"{k}/")) for k in IGNORED_KEYS):
            kept.append(text.lstrip("+"))
    return " ".join(sorted(kept))


def _job(*overrides: str, cost: float = 1.0) -> Job:
    return Job((*GPU_JOB, *overrides), cost)


def sweep_grid(experiment: str) -> dict[str, tuple[str, ...]]:
    """The values each key of an experiment's sweep takes (``hydra.sweeper.params`` of
    ``conf/experiment/<experiment>.yaml``), so that a chunk runs the experiment's own grid."""
    params = OmegaConf.load(CONFIG_DIR / "experiment" / f"{experiment}.yaml").hydra.sweeper.params
    return {str(key): tuple(str(value).split(",")) for key, value in params.items()}


# Aaren Table 5's grid is the experiment's (conf/experiment/aaren/tsf.yaml): its horizons and models,
# on the datasets below (a subset of its eight, which tests hold).
TSF_GRID = sweep_grid("aaren/tsf")
HORIZONS = tuple(int(horizon) for horizon in TSF_GRID["task.pred_len"])
TSF_MODELS = TSF_GRID["model"]
# Training windows per epoch relative to ETTh1 (TSLib's splits: 12/4/4 months hourly, the same in
# 15-minute steps for ETTm1, 70/10/20% of Exchange's 7588 days); the horizon lengthens the decoder.
TSF_SIZE = {"etth1": 1.0, "etth2": 1.0, "ettm1": 4.0, "exchange": 0.6}
TSF_SOURCES = {"etth1": "ETTh1", "etth2": "ETTh2", "ettm1": "ETTm1", "exchange": "exchange_rate"}


def tsf_job(dataset: str, horizon: int, model: str, seed: int) -> Job:
    cost = TSF_SIZE[dataset] * (96 + 48 + horizon) / (96 + 48 + 96)
    return _job(
        f"model={model}", f"task=tsf/{dataset}", f"task.pred_len={horizon}", f"seed={seed}", cost=cost
    )


def tsf_jobs(seeds: Iterable[int] = (1, 2, 3)) -> tuple[Job, ...]:
    """Aaren Table 5: both models at every horizon, seed by seed, so each cell fills up evenly."""
    return tuple(
        tsf_job(dataset, horizon, model, seed)
        for seed in seeds
        for dataset in TSF_SIZE
        for horizon in HORIZONS
        for model in TSF_MODELS
    )


# Aaren Table 2's Wikipedia row: Meta TPP's Wiki (task ef/wiki_ifltpp, 8226 marks), both protocols.
# Patience 500 on a best epoch near 40 makes ~545 epochs, about 4 h a run on the 2-core CPU: longer
# than a session there, and the CPU machine is not kept between sessions. The model is tiny (d_model
# 64), so bf16 would buy nothing and round the log-normal mixture's parameters and the mark logits
# that the NLL is read from: these jobs train in fp32, like Meta TPP.
EF_GPU_SETS = ("wiki_ifltpp",)
# A Wiki run is ~545 epochs of 38 training steps (batch 16) and 13 validation batches: ~20,700 steps
# of ~800 small ops each, where a paper-size ETTh1@96 run is ~1,200 steps of 350-480 (counted on the
# CPU with the GPU's code paths; docs/device.md). Launch-bound, that is about 30 ETTh1 runs in ops,
# about 10 in wall time with start-up. The cost stays low on purpose: an estimate over the window
# would skip every job and teach nothing, while a first wave launched brings back either results
# or, killed, the epochs each job reached (runner.json).
EF_COST = 3.0


def ef_jobs(seeds: Iterable[int] = (1, 2, 3, 4, 5)) -> tuple[Job, ...]:
    """Seed by seed, so that a window cut short leaves whole seeds of every row."""
    return tuple(
        _job(
            f"model={model}",
            f"task=ef/{dataset}",
            f"task.compat={compat}",
            f"seed={seed}",
            "trainer.precision=32-true",
            cost=EF_COST,
        )
        for seed in seeds
        for dataset in EF_GPU_SETS
        for compat in ("reference", "default")
        for model in ("transformer", "aaren")
    )


# CRT Tables 2-3: the three LM backbones and CRT with the paper's GRU, at three segment lengths;
# Table 8's four rows switch CRT's memory token and recurrent positions at segment length 70.
# The paper's models (``model=paper/*``) under its protocol (``task.compat=reference``; docs/lm.md).
# A segment of 17 tokens has four times the steps per epoch of one of 70.
LM_MODELS = ("transformer", "transformer_xl", "crt", "crt_gru")
SEGMENTS = {70: 1.0, 35: 2.0, 17: 4.0}
LM_COST = 3.0  # a 3-layer PTB epoch-run against an ETTh1@96 run, until a ptb window measures it


def ptb_jobs(n_layers: int, seeds: Iterable[int] = (1,)) -> tuple[Job, ...]:
    depth = n_layers / 3
    jobs = [
        _job(
            f"model=paper/{model}",
            "task=lm/ptb",
            f"model.n_layers={n_layers}",
            f"task.seg_len={seg}",
            "task.compat=reference",
            f"seed={seed}",
            cost=LM_COST * depth * size,
        )
        for seed in seeds
        for seg, size in SEGMENTS.items()
        for model in LM_MODELS
    ]
    return tuple(jobs)


def ablation_jobs(seeds: Iterable[int] = (1,)) -> tuple[Job, ...]:
    """CRT Table 8 at the paper's size: one run of ``experiment=crt/ptb_ablation_paper`` per row (the
    experiment records the switches in ``setting``; ``hydra.mode=RUN`` runs the one job named)."""
    rows = [(m, r) for m in ("true", "false") for r in ("true", "false")]
    return tuple(
        _job(
            "experiment=crt/ptb_ablation_paper",
            "hydra.mode=RUN",
            "model=paper/crt",
            "model.n_layers=3",
            "task.seg_len=70",
            f"model.memory_token={memory}",
            f"model.recurrent_positions={positions}",
            f"seed={seed}",
            cost=LM_COST,
        )
        for seed in seeds
        for memory, positions in rows
    )


# The Decision Transformer at the Aaren paper's sizes (rl/_base: 4 layers, d_model 512, 20 x 1000
# updates) on the three recipe-made Hopper files (make rl-data-sac), rollouts on the CPU cores. One
# chunk per file: a file of 200k transitions is ~20 MB and compresses little, so one kit carries one.
RL_DATASETS = ("medium", "medium_replay", "medium_expert")


def rl_file(dataset: str) -> str:
    return f"rl/hopper_{dataset}-sac.hdf5"


def rl_jobs(dataset: str, seeds: Iterable[int] = (1, 2, 3)) -> tuple[Job, ...]:
    return tuple(
        _job(
            f"model={model}",
            f"task=rl/hopper_{dataset}_sac",
            "task.compat=reference",
            f"seed={seed}",
            cost=4.0,
        )
        for seed in seeds
        for model in ("transformer", "aaren")
    )


# Each test's outcome is written as it ends (tests/helpers/result_log.py), junit.xml when all have.
PYTEST = (
    "{python}",
    "-m",
    "pytest",
    "-q",
    "-p",
    "no:cacheprovider",
    "-p",
    "tests.helpers.result_log",
    "--result-log={out}/results.jsonl",
    "--junitxml={out}/junit.xml",
)
# The GPU tests in two checks that run at once: inductor's compiles take minutes of CPU, and a
# timeout in them must not cost the others. Their smoke forms (on the CPU) are the quick ones.
VERIFY_STEPS = (
    Step(
        "bench-gpu",
        ("{python}", "scripts/bench_gpu.py", "--out", "{out}"),
        ("{python}", "scripts/bench_gpu.py", "--out", "{out}", "--smoke"),
        timeout_s=240,
    ),
    Step(
        "tests-gpu",
        (*PYTEST, "-m", "gpu", "tests/gpu", "-k", "not compiled"),
        (*PYTEST, "-m", "gpu", "tests/gpu", "-k", "step_equals_forward"),
        timeout_s=300,
    ),
    Step(
        "tests-gpu-compile",
        (*PYTEST, "-m", "gpu", "tests/gpu", "-k", "compiled"),
        (*PYTEST, "-m", "gpu", "tests/gpu", "-k", "compiled and transformer_xl"),
        timeout_s=420,
    ),
    Step(
        "tests-cpu",
        (
            *PYTEST,
            "-m",
            "not slow and not gpu",
            "-n",
            "8",
            "tests/models",
            "tests/ops",
            "tests/runs",
            "tests/results",
        ),
        (*PYTEST, "-m", "not slow and not gpu", "tests/runs/test_lock.py"),
        timeout_s=240,
    ),
)

QUEUE: tuple[Chunk, ...] = (
    Chunk(
        "verify",
        "CPU and CUDA tests on the GPU machine, GPU benchmarks, a timed paper-size ETTh1@96 run per model",
        jobs=(tsf_job("etth1", 96, "transformer", 1), tsf_job("etth1", 96, "aaren", 1)),
        steps=VERIFY_STEPS,
        sources=("ETTh1", "JapaneseVowels", "thp_mimic", "ptb"),  # the GPU smoke runs and training bench
        requirements=BASE_REQUIREMENTS + RL_REQUIREMENTS,  # the RL smoke run's MuJoCo Hopper
        parallel=2,
    ),
    Chunk(
        "ef_wiki",
        "Aaren Table 2's Wikipedia row, Meta TPP's schedule in fp32: 2 protocols x 2 models x seeds 1-5",
        jobs=ef_jobs(),
        sources=("ifltpp_wiki",),
        parallel=8,
    ),
    Chunk(
        "tsf",
        "Aaren Table 5, TSLib's protocol: ETTh1, ETTh2, ETTm1, Exchange x 4 horizons x 2 models x 3 seeds",
        jobs=tsf_jobs(),
        sources=tuple(TSF_SOURCES.values()),
    ),
    Chunk(
        "ptb",
        "CRT Table 2 (3 layers, segments 70/35/17, four backbones) and Table 8's four rows on PTB",
        jobs=ptb_jobs(3) + ablation_jobs(),
        sources=("ptb",),
    ),
    Chunk(
        "ptb16",
        "CRT Table 3 (16 layers) with the GRU and NCGRU rows of Tables 9-12",
        jobs=ptb_jobs(16),
        sources=("ptb",),
        parallel=4,
    ),
    *(
        Chunk(
            f"rl_{dataset}",
            f"The Decision Transformer at the Aaren paper's sizes on the recipe's Hopper {dataset} file",
            jobs=rl_jobs(dataset),
            local_files=(rl_file(dataset),),
            requirements=BASE_REQUIREMENTS + RL_REQUIREMENTS,
            parallel=6,
        )
        for dataset in RL_DATASETS
    ),
)


def chunk_named(name: str) -> Chunk:
    for chunk in QUEUE:
        if chunk.name == name:
            return chunk
    raise ValueError(f"unknown chunk {name!r}: choose one of {', '.join(c.name for c in QUEUE)}")


def gpu_done_keys(runs_dir: str | Path) -> set[str]:
    """Job keys of the finished runs under ``runs_dir`` that were recorded on a GPU."""
    done = set()
    for path in Path(runs_dir).rglob("summary.json"):
        record = json.loads(path.read_text())
        if is_gpu(record.get("device")):
            done.add(job_key(record.get("overrides") or ()))
    return done


def pending_jobs(chunk: Chunk, repo: str | Path) -> tuple[Job, ...]:
    done = gpu_done_keys(Path(repo) / "results" / "runs")
    return tuple(job for job in chunk.jobs if job.key not in done)


def is_done(chunk: Chunk, repo: str | Path) -> bool:
    if chunk.steps:
        return (Path(repo) / VERIFY_REPORT).is_file()
    return not pending_jobs(chunk, repo)


def next_chunk(repo: str | Path) -> Chunk | None:
    """The first chunk of the queue with anything left to do; None once the queue is done."""
    return next((chunk for chunk in QUEUE if not is_done(chunk, repo)), None)

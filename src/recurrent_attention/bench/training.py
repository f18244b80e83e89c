"""Training steps per second of each backbone on a task family's CPU preset (or other ``train.py``
overrides, e.g. the paper's sizes), with its real data.

The configuration is composed as ``train.py`` composes it (``task=<family>/<dataset> model=<m>
preset=cpu``), and the real datamodule and task modules are built. One optimiser step is the
module's ``training_step`` on a real batch, ``backward``, gradient clipping where the task sets it,
and the optimiser's step (what Lightning's loop runs, without its bookkeeping). The backbones
(:data:`MODELS`: the Transformer, Aaren and causal linear attention, Aaren's closest relative) take
turns on the same batches (alternating the order), so a machine shared with other work slows all
alike; the rate is one over the median step time.

One more model takes its turn beside them: Aaren with its token mixing removed (each token's output is
its own values; the projections, feed-forward blocks, head and optimiser are untouched). No attention
mechanism can make a step cheaper than that, so its rate over the Transformer's is the ceiling of
Aaren's speedup in a family: where the ceiling is under the target, the target is out of reach of any
attention, and the benchmark says so rather than just "missed".

With ``compile_backend``, each model takes a second turn with its backbone through ``torch.compile``
(``model.compile=true``'s form, compiled in place; the first, untimed steps compile it), under the
name ``<model>+compiled``, so a compiled / eager ratio compares two rates of one run
(:func:`compile_speedups`).
"""

from __future__ import annotations

import time
import types
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass

import lightning as L
import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from lightning.fabric.utilities.apply_func import move_data_to_device
from omegaconf import DictConfig
from torch import Tensor, nn

from recurrent_attention.bench.timing import sync
from recurrent_attention.config import CONFIG_DIR, backbone_config, register_resolvers
from recurrent_attention.models.aaren import AarenAttention
from recurrent_attention.ops import ScanState
from recurrent_attention.tasks import register_families

# One dataset per family whose files ship in the shared mirror (a small one where there is a choice);
# for rl, the self-collected Hopper data `make rl-data` writes (`make bench` runs it when the file is
# missing). Video is left out: its models are TimeSformer and CR-ViT, not these backbones.
FAMILY_TASKS = {
    "tsf": "tsf/etth1",
    "tsc": "tsc/handwriting",
    "ef": "ef/mimic",
    "lm": "lm/ptb",
    "rl": "rl/hopper_selfcollected",
}
# The pair the issue-12/27 targets compare (and that bench/gpu.py and scripts/bench_rl_update.py time).
AAREN_PAIR = ("transformer", "aaren")
# `make bench`'s backbones: the pair and causal linear attention, whose ratio to the Transformer is
# reported beside Aaren's (no target).
MODELS = (*AAREN_PAIR, "linear_attention")
# Aaren without token mixing: the bound on what any attention could gain (module docstring).
NO_MIXING = "aaren_no_mixing"
# Issue 27: Aaren's training steps/s at least this many times the Transformer's, in every family.
TARGET_SPEEDUP = 1.1
# A model's name with this suffix: its backbone through torch.compile (model.compile=true).
COMPILED = "+compiled"


@dataclass
class TrainingTiming:
    family: str
    task: str
    model: str
    steps_per_s: float | None  # None: skipped (see note)
    shape: str = ""
    note: str = ""


def _config(task: str, model: str, overrides: Sequence[str] = ("preset=cpu",)) -> DictConfig:
    register_resolvers()
    register_families()
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        return compose("train", overrides=[f"task={task}", f"model={model}", *overrides, "~logger"])


def _unmixed_forward(
    self: AarenAttention, x: Tensor, state: ScanState | None = None
) -> tuple[Tensor, ScanState | None]:
    """:meth:`AarenAttention.forward` with the prefix attention taken out: every token's output is
    its own values (the values-and-scores projection still runs, as any attention needs it)."""
    _, values = self._scores_and_values(x, *self.value_score_projection())
    return self.proj.merge_heads(values), state


def remove_token_mixing(module: nn.Module) -> nn.Module:
    """``module`` with every :class:`AarenAttention` in it mixing no tokens (for :data:`NO_MIXING`)."""
    for layer in module.modules():
        if isinstance(layer, AarenAttention):
            layer.forward = types.MethodType(_unmixed_forward, layer)
    return module


class _Trainee:
    """One model's task module and optimiser, stepped on a batch at a time."""

    def __init__(
        self, cfg: DictConfig, mixing: bool = True, device: str = "cpu", compile_backend: str | None = None
    ) -> None:
        """``compile_backend``: the backbone through ``torch.compile`` with it (None: eager); the
        same seed, so the compiled trainee starts from the eager one's weights."""
        L.seed_everything(0, verbose=False)
        self.device = torch.device(device)
        module = instantiate(cfg.task.module, backbone=instantiate(backbone_config(cfg.model)))
        self.module = module.to(self.device).train()
        if not mixing:
            remove_token_mixing(self.module)
        if compile_backend is not None:
            self.module.backbone.compile(backend=compile_backend)  # in place, as train.py compiles it
        # The optimiser configure_optimizers would build; its scheduler (one small call per step,
        # the same for both models) is left out, as some need a Trainer for their length.
        self.optimizer = self.module.optimizer_factory(self.module.parameters())
        self.clip = cfg.task.gradient_clip_val

    def step_seconds(
        self, batch: object, index: int, clock: Callable[[], float] = time.perf_counter
    ) -> float:
        """One optimiser step; on a GPU in bf16 autocast as ``trainer=gpu`` trains, timed to its end."""
        cuda = self.device.type == "cuda"
        start = clock()
        self.optimizer.zero_grad()
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=cuda):
            loss = self.module.training_step(batch, index)
        (loss["loss"] if isinstance(loss, dict) else loss).backward()
        if self.clip is not None:
            torch.nn.utils.clip_grad_norm_(self.module.parameters(), self.clip)
        self.optimizer.step()
        sync(self.device)
        return clock() - start


def _batches(datamodule: L.LightningDataModule) -> Iterator[object]:
    """Training batches, epoch after epoch (a small training set has fewer batches than steps)."""
    while True:
        yield from datamodule.train_dataloader()


def family_timings(
    family: str,
    task: str,
    steps: int,
    min_seconds: float = 0.0,
    overrides: Sequence[str] = ("preset=cpu",),
    warmup: int = 2,
    clock: Callable[[], float] = time.perf_counter,
    ceiling: bool = False,
    device: str = "cpu",
    models: Sequence[str] = MODELS,
    compile_backend: str | None = None,
) -> list[TrainingTiming]:
    """Each of ``models`` (and, with ``ceiling``, :data:`NO_MIXING`) on shared batches of ``task`` (after
    ``warmup`` untimed ones): at least ``steps`` each, and more until the timed steps add up to
    ``min_seconds`` (a fast family's median then rests on hundreds of steps, not on a fraction of a
    second of a shared machine). ``overrides`` are
    ``train.py``'s (the cpu preset by default; e.g. ``preset=paper`` to time the papers' sizes).
    ``clock`` measures a step: wall time by default; ``time.thread_time`` counts only this thread's
    CPU time, which on a machine other jobs share is closer to what the step costs alone.
    ``device="cuda"`` times the GPU's steps (bench/gpu.py), batches moved there first.
    ``compile_backend`` (e.g. ``"inductor"``): each model also as ``<model>`` + :data:`COMPILED`, its
    backbone compiled with that backend (``warmup`` must cover the compilation: at least 1)."""
    configs = {model: _config(task, model, overrides) for model in models}
    first = configs[models[0]]  # the task's data and sizes, the same for every model
    datamodule = instantiate(first.task.datamodule)
    datamodule.setup("fit")
    trainees = {model: _Trainee(cfg, device=device) for model, cfg in configs.items()}
    if ceiling:
        unmixed = configs.get("aaren") or _config(task, "aaren", overrides)
        trainees[NO_MIXING] = _Trainee(unmixed, mixing=False, device=device)
    if compile_backend is not None:
        for model in models:
            trainees[model + COMPILED] = _Trainee(
                configs[model], device=device, compile_backend=compile_backend
            )
    seconds: dict[str, list[float]] = {model: [] for model in trainees}
    timed = 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # self.log outside a Trainer warns; nothing is logged here
        for index, batch in enumerate(_batches(datamodule)):
            if index >= steps + warmup and timed >= min_seconds:
                break
            batch = move_data_to_device(batch, torch.device(device))
            order = list(trainees) if index % 2 else list(trainees)[::-1]
            for model in order:
                elapsed = trainees[model].step_seconds(batch, index, clock)
                if index >= warmup:
                    seconds[model].append(elapsed)
                    timed += elapsed
    m = first.model
    shape = (
        f"batch {first.task.batch_size}, d_model {m.d_model}, {m.n_heads} heads, "
        f"{m.n_layers} layers, {len(seconds[models[0]])} steps"
    )
    return [
        TrainingTiming(family, task, model, 1.0 / sorted(t)[len(t) // 2], shape)
        for model, t in seconds.items()
    ]


def training_timings(
    steps: int,
    progress=None,
    min_seconds: float = 0.0,
    families: list[str] | None = None,
    compile_backend: str | None = None,
) -> list[TrainingTiming]:
    """Every family of ``families`` (default: all of :data:`FAMILY_TASKS`), with its ceiling
    (:data:`NO_MIXING`) and, with ``compile_backend``, each model compiled; one whose data is
    missing is reported as skipped."""
    from recurrent_attention.data import DataError

    results = []
    for family, task in FAMILY_TASKS.items():
        if families is not None and family not in families:
            continue
        if progress:
            progress(f"train {task}")
        try:
            results += family_timings(
                family, task, steps, min_seconds, ceiling=True, compile_backend=compile_backend
            )
        except DataError as err:
            compiled = [model + COMPILED for model in MODELS] if compile_backend is not None else []
            results += [
                TrainingTiming(family, task, model, None, note=f"skipped: {err}")
                for model in (*MODELS, NO_MIXING, *compiled)
            ]
    return results


def as_rows(timings: list[TrainingTiming]) -> list[dict]:
    return [asdict(t) for t in timings]


def aaren_speedups(rows: list[dict], model: str = "aaren") -> dict[str, float | None]:
    """``model``'s training steps/s over the Transformer's, per family (None where either was skipped
    or not timed): for Aaren, the figure the issue-12 target and the plot both read; for
    :data:`NO_MIXING`, the ceiling of that figure; for ``linear_attention``, its own beside Aaren's."""
    rates = {(r["family"], r["model"]): r["steps_per_s"] for r in rows}
    speedups = {}
    for family in sorted({f for f, _ in rates}):
        rate, transformer = rates.get((family, model)), rates[(family, "transformer")]
        speedups[family] = None if rate is None or transformer is None else rate / transformer
    return speedups


def compile_speedups(rows: list[dict]) -> dict[str, dict[str, float | None]]:
    """``{family: {model: compiled steps/s over eager steps/s}}`` for every model timed both ways in
    one run (None where either was skipped)."""
    rates = {(r["family"], r["model"]): r["steps_per_s"] for r in rows}
    speedups: dict[str, dict[str, float | None]] = {}
    for family, name in rates:
        if not name.endswith(COMPILED):
            continue
        model = name.removesuffix(COMPILED)
        compiled, eager = rates[(family, name)], rates.get((family, model))
        speedups.setdefault(family, {})[model] = (
            None if compiled is None or eager is None else compiled / eager
        )
    return speedups

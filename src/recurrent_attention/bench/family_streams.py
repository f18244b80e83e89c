"""Each task family's per-token streaming cost, through the path the family deploys with.

Where a family streams, it steps a trained model one unit at a time, and each goes through the
deployed step (:mod:`~recurrent_attention.deploy`), tested equal to the model's own step:

- ``backbone``: one token through :func:`~recurrent_attention.deploy.fast_stepper` (the bare step);
- ``rl``: one environment step of the Decision Transformer's stream mode
  (:class:`~recurrent_attention.tasks.rl.rollout.StreamPolicy`: the last action, the return-to-go and
  the state, 3 tokens, then the action read out);
- ``ef``: one event of :class:`~recurrent_attention.tasks.ef.stream.EventStream` (1 token, then the
  next event's distribution);
- ``video``: one frame of the causal TimeSformer's :meth:`~recurrent_attention.tasks.video.encoders.
  TimeSformer.step` (every patch location a row of the time mixer's deployed step,
  :class:`~recurrent_attention.deploy.LeanMixerStepper`; the softmax time mixer of the
  Transformer-style TimeSformer sees every frame, so it has no per-frame step).

Every model is the stream size of ``make bench`` (d_model 128, 4 heads, 2 layers, batch 1) with the
family's head around it. A stream starts empty and runs ``units`` units, ``rounds`` times; its cost
is the mean over the units of each unit's fastest time (a KV cache grows over the stream: the mean
is what the stream costs), and per token that over the unit's tokens.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch
from torch import nn

from recurrent_attention.deploy import fast_stepper
from recurrent_attention.models.aaren import Aaren
from recurrent_attention.models.linear_attention import LinearTransformer
from recurrent_attention.models.transformer import Transformer
from recurrent_attention.tasks.ef.head import EventModel
from recurrent_attention.tasks.ef.stream import EventStream
from recurrent_attention.tasks.rl.head import DecisionTransformer
from recurrent_attention.tasks.rl.rollout import StreamPolicy
from recurrent_attention.tasks.video.encoders import TimeSformer

BACKBONES: dict[str, type[nn.Module]] = {
    "transformer": Transformer,
    "aaren": Aaren,
    "linear_attention": LinearTransformer,
}
VIDEO_MIXERS = {"aaren": "aaren", "linear_attention": "linear"}
"""The backbones' time mixers in video (the Transformer's, softmax, has no per-frame step)."""
STATE_DIM, ACT_DIM, N_MARKS = 11, 3, 5  # Hopper's state and action; a few event marks
IMG_SIZE, PATCH_SIZE = 64, 16  # 16 patch locations a frame


@dataclass
class FamilyStreamTiming:
    family: str
    model: str
    unit: str  # what one call streams
    tokens_per_unit: int
    us_per_unit: float | None  # None: the model has no stream in this family (see note)
    note: str = ""

    @property
    def us_per_token(self) -> float | None:
        return None if self.us_per_unit is None else self.us_per_unit / self.tokens_per_unit


Unit = Callable[[int], None]
"""Streams unit number ``i`` (the stream keeps its own state)."""


def _backbone_stream(backbone: nn.Module) -> Unit:
    stepper, state = fast_stepper(backbone), [backbone.init_state(1)]
    tokens = torch.randn(64, 1, backbone.d_model, generator=torch.Generator().manual_seed(0))

    def unit(i: int) -> None:
        _, state[0] = stepper.step(tokens[i % len(tokens)], state[0])

    return unit


def _rl_stream(backbone: nn.Module) -> Unit:
    model = DecisionTransformer(backbone, STATE_DIM, ACT_DIM).eval()
    policy = StreamPolicy(model)
    gen = torch.Generator().manual_seed(0)
    returns, states = torch.rand(64, 1, generator=gen) * 3000, torch.randn(64, 1, STATE_DIM, generator=gen)

    def unit(i: int) -> None:
        policy.observe(policy.act(returns[i % 64], states[i % 64], min(i, model.max_timestep - 1)))

    return unit


def _ef_stream(backbone: nn.Module) -> Unit:
    stream = EventStream(EventModel(backbone, N_MARKS))
    gaps = torch.rand(64, generator=torch.Generator().manual_seed(0)).tolist()
    clock = [0.0]

    def unit(i: int) -> None:
        clock[0] += gaps[i % 64]
        stream.observe(clock[0], i % N_MARKS)

    return unit


def _video_stream(mixer: str, d_model: int, heads: int, layers: int) -> Unit:
    model = TimeSformer(
        img_size=IMG_SIZE, patch_size=PATCH_SIZE, n_frames=8, d_model=d_model, n_layers=layers,
        n_heads=heads, d_ff=4 * d_model, drop_path=0.0, time_mixer=mixer,
    ).eval()  # fmt: skip
    frames = torch.randn(8, 1, 3, IMG_SIZE, IMG_SIZE, generator=torch.Generator().manual_seed(0))
    state = [model.init_state(1, frames)]

    def unit(i: int) -> None:
        _, state[0] = model.step(frames[i % len(frames)], state[0])

    return unit


@torch.no_grad()
def _mean_seconds(make: Callable[[], Unit], units: int, rounds: int) -> float:
    """Seconds per unit of a stream ``units`` long from empty (after 2 untimed units that load what a
    process loads once): ``rounds`` new streams, each unit's fastest of them, the mean over the units.
    The fastest per unit is the one least disturbed by other work on a shared machine; the mean over
    the units keeps what grows along the stream (a KV cache)."""
    fastest = [float("inf")] * units
    for _ in range(rounds):
        unit = make()
        unit(0), unit(1)
        for i in range(units):
            start = time.perf_counter()
            unit(i + 2)
            fastest[i] = min(fastest[i], time.perf_counter() - start)
    return sum(fastest) / units


def family_stream_timings(
    d_model: int = 128,
    heads: int = 4,
    layers: int = 2,
    units: int = 256,
    rounds: int = 3,
    progress: Callable[[str], None] | None = None,
) -> list[FamilyStreamTiming]:
    """µs per unit (and per token) of each family's stream for each backbone, batch 1."""
    arguments = {"d_model": d_model, "n_heads": heads, "n_layers": layers, "d_ff": 4 * d_model}
    arguments["dropout"] = 0.0
    tokens_per_frame = (IMG_SIZE // PATCH_SIZE) ** 2 + 1
    families = {
        "backbone": ("token", 1, _backbone_stream),
        "rl": ("environment step", 3, _rl_stream),
        "ef": ("event", 1, _ef_stream),
    }
    rows = []
    for family, (unit, tokens, stream_of) in families.items():
        for name, cls in BACKBONES.items():
            if progress:
                progress(f"{family} stream {name}")

            def make(cls: type[nn.Module] = cls, stream_of: Callable = stream_of) -> Unit:
                torch.manual_seed(0)
                return stream_of(cls(**arguments).eval())

            seconds = _mean_seconds(make, units, rounds)
            rows.append(FamilyStreamTiming(family, name, unit, tokens, seconds * 1e6))
    for name in BACKBONES:
        mixer = VIDEO_MIXERS.get(name)
        if mixer is None:
            note = "no per-frame step: the softmax time mixer sees every frame"
            rows.append(FamilyStreamTiming("video", name, "frame", tokens_per_frame, None, note))
            continue
        if progress:
            progress(f"video stream {name}")

        def make_video(mixer: str = mixer) -> Unit:
            torch.manual_seed(0)
            return _video_stream(mixer, d_model, heads, layers)

        seconds = _mean_seconds(make_video, max(units // 8, 8), rounds)
        rows.append(FamilyStreamTiming("video", name, "frame", tokens_per_frame, seconds * 1e6))
    return rows


def as_rows(timings: list[FamilyStreamTiming]) -> list[dict]:
    return [{**asdict(t), "us_per_token": t.us_per_token} for t in timings]

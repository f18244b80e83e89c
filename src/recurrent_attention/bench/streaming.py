"""Token-by-token inference: state size and cumulative time against N for each backbone (Aaren §4.5).

Both backbones run ``step`` from an empty state over the same random tokens, without gradients;
at checkpoints (powers of two) we record the bytes held in the state and the elapsed time.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import torch

from recurrent_attention.models.base import Backbone


@dataclass
class StreamPoint:
    model: str
    n: int
    state_bytes: int
    cumulative_s: float


def state_bytes(state: object) -> int:
    """Bytes of every tensor reachable in a (nested) state."""
    if isinstance(state, torch.Tensor):
        return state.numel() * state.element_size()
    if isinstance(state, (list, tuple)):
        return sum(state_bytes(s) for s in state)
    if isinstance(state, dict):
        return sum(state_bytes(s) for s in state.values())
    return 0


@torch.no_grad()
def stream(model: Backbone, name: str, n_tokens: int, batch: int = 1, progress=None) -> list[StreamPoint]:
    model.eval()
    device = next(model.parameters()).device
    tokens = torch.randn(n_tokens, batch, model.d_model, device=device)
    state = model.init_state(batch, device=device)
    checkpoints = {2**k for k in range(7, n_tokens.bit_length())} | {n_tokens}
    points = []
    start = time.perf_counter()
    for t in range(n_tokens):
        _, state = model.step(tokens[t], state)
        if t + 1 in checkpoints:
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            points.append(StreamPoint(name, t + 1, state_bytes(state), time.perf_counter() - start))
            if progress:
                progress(f"{name} N={t + 1}")
    return points


def as_rows(points: list[StreamPoint]) -> list[dict]:
    return [asdict(p) for p in points]

"""LightningModule for language modelling: segments in order, the backbone state carried across them.

Each batch is a window of consecutive segments of ``B`` parallel streams. The module feeds the
segments one after another, passing the backbone state along (``carry_state``; the plain
Transformer baseline has ``carry_state=false`` and sees every segment on its own), sums the
token NLLs of the window into one loss, and detaches the state at the end of the window: that is
where back-propagation through time is truncated (``task.bptt_segments`` segments per window).
Validation and test use one segment per item and report perplexity = exp(mean token NLL).
The protocol's ``txl_init`` (``reference``: :class:`~.protocol.LMProtocol`) re-initialises the
whole language model by Transformer-XL's rules (:mod:`~recurrent_attention.tasks.lm.txl_init`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from recurrent_attention.models.base import Backbone, State
from recurrent_attention.tasks.base import ExactEvaluationModule, OptimizerFactory, SchedulerFactory
from recurrent_attention.tasks.lm.head import LanguageModel
from recurrent_attention.tasks.lm.metrics import NLLTotals
from recurrent_attention.tasks.lm.protocol import DEFAULT, LMProtocol
from recurrent_attention.tasks.lm.txl_init import transformer_xl_init


def detach_state(state: State) -> State:
    """The same nested structure (tuples, named tuples, lists, dicts) with every tensor detached."""
    if isinstance(state, Tensor):
        return state.detach()
    if isinstance(state, tuple) and hasattr(state, "_fields"):
        return type(state)(*(detach_state(s) for s in state))
    if isinstance(state, (list, tuple)):
        return type(state)(detach_state(s) for s in state)
    if isinstance(state, dict):
        return {k: detach_state(v) for k, v in state.items()}
    return state


def cosine_with_warmup(
    optimizer: torch.optim.Optimizer, total_steps: int, warmup_steps: int = 0, min_ratio: float = 0.0
) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up, then cosine decay to ``min_ratio`` x lr at ``total_steps`` (TXL's schedule)."""

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
        return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


class LanguageModelModule(ExactEvaluationModule):
    def __init__(
        self,
        backbone: Backbone,
        optimizer: OptimizerFactory,
        vocab_size: int,
        seg_len: int,
        carry_state: bool,
        absolute_positions: bool = True,
        cutoffs: Sequence[int] = (),
        dropout: float = 0.1,
        scheduler: SchedulerFactory | None = None,
        rules: LMProtocol = DEFAULT,
    ) -> None:
        super().__init__(backbone, optimizer, scheduler, scheduler_interval="step")
        self.model = LanguageModel(backbone, vocab_size, cutoffs, dropout, absolute_positions)
        if rules.txl_init:
            transformer_xl_init(self.model)
        self.seg_len, self.carry_state = seg_len, carry_state
        self.states: dict[str, State | None] = {}
        self.totals = NLLTotals()

    def build_scheduler(self, optimizer: torch.optim.Optimizer) -> Any:
        """Cosine schedules need the run's total number of optimiser steps."""
        total = self.trainer.estimated_stepping_batches
        return self.scheduler_factory(optimizer, total_steps=int(total) if math.isfinite(total) else 10**9)

    def window_nll(self, batch: dict[str, Tensor], stage: str) -> Tensor:
        """Per-token NLL ``(B, window)`` of one window, its segments run in order with the state carried."""
        state = self.states.get(stage) if self.carry_state else None
        nlls = []
        for x, y in zip(batch["x"].split(self.seg_len, 1), batch["y"].split(self.seg_len, 1), strict=True):
            nll, state = self.model(x, y, state if self.carry_state else None)
            nlls.append(nll)
        self.states[stage] = detach_state(state) if self.carry_state else None
        return torch.cat(nlls, dim=1)

    def on_train_epoch_start(self) -> None:
        self.states["train"] = None

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        loss = self.window_nll(batch, "train").mean()
        self.log("train/loss", loss, prog_bar=True)
        return loss

    def new_totals(self) -> NLLTotals:
        return NLLTotals()

    def start_split(self, stage: str) -> None:
        """Evaluation streams start from an empty state, like the training epoch."""
        self.states[stage] = None
        super().start_split(stage)

    def accumulate(self, batch: dict[str, Tensor], stage: str) -> None:
        self.totals.update(self.window_nll(batch, stage))

    def in_progress_bar(self, stage: str, name: str) -> bool:
        return name == "ppl"

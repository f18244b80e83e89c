"""LightningModule for video classification: a linear head on the video encoder's features.

The backbone (``model``: :class:`~.encoders.TimeSformer` or :class:`~.encoders.CRViT`, a
:class:`~.encoders.VideoEncoder`, not a sequence ``Backbone``) returns features per iteration; the
head is applied to each. Training loss: cross-entropy on the last iteration
(``iteration_loss=last``) or the mean over iterations (``mean``). Predictions come from the last
iteration. Test clips carry several temporal views, combined by ``view_ensemble``
(``max``, as PI-ViT; or ``mean``) over per-view scores: softmax probabilities by default; under
``rules.view_scores=logits`` (the ``reference`` protocol) the raw logits, max-combined into a
zero-initialised buffer as PI-ViT's ``TestMeter`` does (so a class whose every view scores below
zero scores zero; the argmax can differ from the softmax one). Logged: ``mca``, ``acc`` (top-1)
and ``loss`` (cross-entropy of the combined scores: renormalised probabilities, or the combined
logits' softmax), all per split.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from recurrent_attention.tasks.base import ExactEvaluationModule, OptimizerFactory, SchedulerFactory
from recurrent_attention.tasks.video.encoders import VideoEncoder
from recurrent_attention.tasks.video.metrics import VideoTotals
from recurrent_attention.tasks.video.protocol import DEFAULT, VideoProtocol

ITERATION_LOSSES = ("last", "mean")
VIEW_ENSEMBLES = ("max", "mean")


class VideoClassificationModule(ExactEvaluationModule):
    def __init__(
        self,
        backbone: VideoEncoder,
        optimizer: OptimizerFactory,
        n_classes: int,
        head_dropout: float = 0.0,
        iteration_loss: str = "mean",
        view_ensemble: str = "max",
        scheduler: SchedulerFactory | None = None,
        rules: VideoProtocol = DEFAULT,
    ) -> None:
        if not isinstance(backbone, VideoEncoder):
            raise ValueError("task=video/* needs a video model: model=timesformer or model=cr_vit")
        super().__init__(backbone, optimizer, scheduler, scheduler_interval="epoch")
        if iteration_loss not in ITERATION_LOSSES:
            raise ValueError(f"task.iteration_loss={iteration_loss!r}: choose one of {ITERATION_LOSSES}")
        if view_ensemble not in VIEW_ENSEMBLES:
            raise ValueError(f"task.view_ensemble={view_ensemble!r}: choose one of {VIEW_ENSEMBLES}")
        self.n_classes, self.iteration_loss, self.view_ensemble = n_classes, iteration_loss, view_ensemble
        self.on_logits = rules.view_scores == "logits"
        self.head_dropout = nn.Dropout(head_dropout)
        self.head = nn.Linear(backbone.feature_dim, n_classes)
        nn.init.trunc_normal_(self.head.weight, std=0.02)
        nn.init.zeros_(self.head.bias)
        self.totals = VideoTotals(n_classes)

    def forward(self, video: Tensor) -> list[Tensor]:
        """``video (B, 3, T, H, W)`` -> logits per iteration ``[(B, K)]``."""
        return [self.head(self.head_dropout(features)) for features in self.backbone(video)]

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        logits = self(batch["video"])
        losses = [F.cross_entropy(each, batch["y"]) for each in logits]
        loss = losses[-1] if self.iteration_loss == "last" else torch.stack(losses).mean()
        self.log("train/loss", loss, prog_bar=True, batch_size=len(batch["y"]))
        return loss

    def log_probabilities(self, video: Tensor) -> Tensor:
        """Log class scores ``(B, K)``; a ``(B, V, 3, T, H, W)`` batch has its views combined."""
        if video.dim() == 5:
            return self(video)[-1].log_softmax(-1)
        B, V = video.shape[:2]
        logits = self(video.flatten(0, 1))[-1].unflatten(0, (B, V))
        if self.on_logits:  # PI-ViT: into a zero-initialised buffer, on raw logits
            combined = logits.amax(dim=1).clamp_min(0) if self.view_ensemble == "max" else logits.mean(dim=1)
            return combined.log_softmax(-1)
        per_view = logits.softmax(-1)
        combined = per_view.amax(dim=1) if self.view_ensemble == "max" else per_view.mean(dim=1)
        return (combined / combined.sum(-1, keepdim=True)).clamp_min(1e-12).log()

    def new_totals(self) -> VideoTotals:
        return VideoTotals(self.n_classes)

    def accumulate(self, batch: dict[str, Tensor], stage: str) -> None:
        scores = self.log_probabilities(batch["video"]).double()
        loss = F.nll_loss(scores, batch["y"], reduction="sum")
        self.totals.update(scores.argmax(-1), batch["y"], float(loss))

"""LightningModule for event forecasting: NLL training with Meta TPP's L2 term, exact split metrics.

The training objective has Meta TPP's form: the batch's summed negative log-likelihood (ours, or
under the protocol's ``nll=meta_tpp`` Meta TPP's, whose last interval is scored by its survival) plus
``weight_decay / 2 * ||theta||^2`` over every parameter, which gives exactly the gradient of
``torch.optim.Adam(weight_decay=...)`` (coupled L2, not AdamW's decoupled decay) while keeping the
term visible in the loss. Validation logs ``val/nll`` (the early-stopping metric; the checkpoint's
follows ``rules.checkpoint_metric``: the ``reference`` protocol keeps the best ``val/rmse``, as Meta
TPP does),
``val/nll_meta_tpp``, ``val/rmse`` and ``val/acc``; the test epoch logs the same under ``test/``.
Each batch is scored in pieces of similar length (:mod:`.batching`): the same sums, less padding.
"""

from __future__ import annotations

from torch import Tensor

from recurrent_attention.models.base import Backbone
from recurrent_attention.tasks.base import ExactEvaluationModule, OptimizerFactory, SchedulerFactory
from recurrent_attention.tasks.ef.batching import split_by_length
from recurrent_attention.tasks.ef.head import EventModel
from recurrent_attention.tasks.ef.likelihood import EventScores, score_batch
from recurrent_attention.tasks.ef.metrics import EventTotals
from recurrent_attention.tasks.ef.protocol import DEFAULT, EFProtocol


class EventModule(ExactEvaluationModule):
    def __init__(
        self,
        backbone: Backbone,
        optimizer: OptimizerFactory,
        n_marks: int,
        n_components: int = 8,
        weight_decay: float = 1e-4,
        time_eps: float = 1e-12,
        rules: EFProtocol = DEFAULT,
        scheduler: SchedulerFactory | None = None,
    ) -> None:
        super().__init__(backbone, optimizer, scheduler, scheduler_interval="epoch")
        self.model = EventModel(backbone, n_marks, n_components, rules.time_every_layer)
        self.weight_decay, self.time_eps, self.rules = weight_decay, time_eps, rules
        self.totals = EventTotals()

    def score(self, batch: dict[str, Tensor]) -> EventScores:
        return score_batch(self.model, batch, self.time_eps)

    def l2_penalty(self) -> Tensor:
        return 0.5 * self.weight_decay * sum(p.square().sum() for p in self.parameters())

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        nll = sum(self.score(piece).protocol_nll_sum(self.rules.nll) for piece in split_by_length(batch))
        lengths = batch["lengths"]
        count = lengths.sum() if self.rules.nll == "meta_tpp" else (lengths - 1).sum().clamp_min(1)
        self.log("train/nll", nll / count, prog_bar=True, batch_size=len(lengths))
        return nll + self.l2_penalty() if self.weight_decay else nll

    def new_totals(self) -> EventTotals:
        return EventTotals()

    def accumulate(self, batch: dict[str, Tensor], stage: str) -> None:
        for piece in split_by_length(batch):
            self.totals.update(self.score(piece), piece)

    def computed_totals(self, stage: str) -> dict[str, float]:
        return self.totals.compute(nll=self.rules.nll, rmse=self.rules.rmse)

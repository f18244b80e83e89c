"""The language model around a backbone: word embedding in, tied (adaptive) softmax out.

Transformer-XL's conventions: embeddings scaled by sqrt(d_model), dropout on the embedded input
and on the backbone output, output weights tied to the embedding. Embeddings start as N(0, 1/d) so
the scaled inputs have unit variance, the scale of the sinusoidal encodings the Transformer adds
(with TXL's N(0, 0.02²) a small model's tokens start buried under its positions).
With ``cutoffs`` the softmax is adaptive (Grave et al. 2017; TXL uses 20000, 40000, 200000 on
WikiText-103): a head over the frequent words plus one logit per tail cluster, then a softmax
within the cluster; the clusters reuse the tied embedding rows (div_val 1, so no projections are
needed). Without cutoffs it is the ordinary full softmax. Backbones that have no notion of order
(the plain Transformer) get sinusoidal absolute positions, counted from the start of each segment.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from recurrent_attention.models.base import Backbone, State
from recurrent_attention.tasks.positions import sinusoidal_positions


class AdaptiveSoftmax(nn.Module):
    """Negative log-likelihood of targets under a tied (adaptive) softmax over ``weight``'s rows."""

    def __init__(self, weight: nn.Parameter, cutoffs: Sequence[int] = ()) -> None:
        super().__init__()
        vocab_size, d_model = weight.shape
        self.weight = weight
        self.cutoffs = [*cutoffs, vocab_size]
        if sorted(set(self.cutoffs)) != self.cutoffs or self.cutoffs[0] <= 0:
            raise ValueError(
                f"cutoffs {list(cutoffs)} must increase strictly and stay below vocab {vocab_size}"
            )
        self.bias = nn.Parameter(torch.zeros(vocab_size))
        n_clusters = len(self.cutoffs) - 1
        self.cluster_weight = nn.Parameter(torch.zeros(n_clusters, d_model))
        self.cluster_bias = nn.Parameter(torch.zeros(n_clusters))

    def head_log_probs(self, hidden: Tensor) -> Tensor:
        """``(M, shortlist + n_clusters)``: log-probabilities of head words and of each tail cluster."""
        shortlist = self.cutoffs[0]
        weight = torch.cat([self.weight[:shortlist], self.cluster_weight])
        bias = torch.cat([self.bias[:shortlist], self.cluster_bias])
        return F.log_softmax(F.linear(hidden, weight, bias), dim=-1)

    def forward(self, hidden: Tensor, target: Tensor) -> Tensor:
        """``hidden (..., d)``, ``target (...)`` -> NLL in nats ``(...)``."""
        shape = target.shape
        hidden, target = hidden.reshape(-1, hidden.shape[-1]), target.reshape(-1)
        head = self.head_log_probs(hidden)
        shortlist = self.cutoffs[0]
        in_head = target < shortlist
        nll = -head.gather(1, target.clamp(max=shortlist - 1).unsqueeze(1)).squeeze(1)
        nll = torch.where(in_head, nll, torch.zeros_like(nll))
        for cluster, (low, high) in enumerate(zip(self.cutoffs[:-1], self.cutoffs[1:], strict=True)):
            rows = ((target >= low) & (target < high)).nonzero().squeeze(1)
            if rows.numel() == 0:
                continue
            tail = F.log_softmax(F.linear(hidden[rows], self.weight[low:high], self.bias[low:high]), dim=-1)
            word = tail.gather(1, (target[rows] - low).unsqueeze(1)).squeeze(1)
            nll = nll.index_add(0, rows, -(head[rows, shortlist + cluster] + word))
        return nll.view(shape)


class LanguageModel(nn.Module):
    """Embedding -> backbone -> softmax NLL; the backbone state is passed through untouched."""

    def __init__(
        self,
        backbone: Backbone,
        vocab_size: int,
        cutoffs: Sequence[int] = (),
        dropout: float = 0.1,
        absolute_positions: bool = True,
        max_positions: int = 4096,
    ) -> None:
        super().__init__()
        d_model = backbone.d_model
        self.backbone = backbone
        self.embedding = nn.Embedding(vocab_size, d_model)
        nn.init.normal_(self.embedding.weight, std=d_model**-0.5)
        self.scale = d_model**0.5
        self.dropout = nn.Dropout(dropout)
        self.softmax = AdaptiveSoftmax(self.embedding.weight, cutoffs)
        self.absolute_positions = absolute_positions
        if absolute_positions:
            self.register_buffer("positions", sinusoidal_positions(max_positions, d_model), persistent=False)

    def forward(self, tokens: Tensor, targets: Tensor, state: State | None = None) -> tuple[Tensor, State]:
        """``tokens, targets (B, n)`` -> per-token NLL ``(B, n)`` and the backbone state after the segment."""
        x = self.embedding(tokens) * self.scale
        if self.absolute_positions:
            x = x + self.positions[: tokens.shape[1]]
        hidden, state = self.backbone(self.dropout(x), state)
        return self.softmax(self.dropout(hidden), targets), state

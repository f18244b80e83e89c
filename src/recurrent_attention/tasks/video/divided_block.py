"""TimeSformer's divided space-time block and the layers it is made of (DropPath, ViT attention, MLP,
patch embedding), as the official code has them (facebookresearch/TimeSformer ``timesformer/models/vit.py``):

- Tokens are a class token plus ``H·W`` patches in each of ``T`` frames; patches get a spatial
  position embedding (shared by the frames) and a per-frame time embedding.
- Each block mixes time first: every patch location attends over its own ``T`` frames (the class
  token takes no part), the output goes through ``temporal_fc`` (zero-initialised, so a block starts
  as the image model it was initialised from) and is added back. Then space: every frame attends
  over its patches plus a copy of the class token; the class token's ``T`` outputs are averaged.
  Then the MLP. Pre-norm throughout.

Module and parameter names follow the official ones (``blocks.0.temporal_attn.qkv`` ...) so that
:mod:`~recurrent_attention.tasks.video.weights` maps checkpoints key for key.

The time mixer (``time_mixer``) is where recurrence can live (docs/design.md): ``softmax`` is the
official bidirectional attention over the frames; the others (:data:`CAUSAL_MIXERS`: ``aaren``, the
project's :class:`~recurrent_attention.models.aaren.AarenAttention`, and ``linear``, causal
:class:`~recurrent_attention.models.linear_attention.LinearAttention`) are token mixers of the
sequence backbones, causal over the frames (:class:`CausalTimeAttention`, which also steps one frame
at a time). Any mixer with the ``LayerStack`` mixer interface fits there: ``forward(x, state) ->
(out, state)``, ``step``, ``init_state(batch, device, dtype)`` and a ``proj``
(:class:`~recurrent_attention.models.blocks.HeadProjections`) whose fused ``qkv`` and ``out_proj``
take the pretrained time attention's weights. The encoders built from these blocks are in
:mod:`~recurrent_attention.tasks.video.encoders`.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from recurrent_attention.deploy import LeanMixerStepper
from recurrent_attention.deploy.mixers import has_lean_mixer
from recurrent_attention.models.aaren import AarenAttention
from recurrent_attention.models.base import State
from recurrent_attention.models.linear_attention import LinearAttention

# The causal time mixers by name: each a constructor ``(dim, n_heads)`` of a LayerStack token mixer.
# Aaren's scan path: a clip's few frames are one short sequence per patch location.
CAUSAL_MIXERS: dict[str, Callable[[int, int], nn.Module]] = {
    "aaren": partial(AarenAttention, path="scan"),
    "linear": LinearAttention,
}
TIME_MIXERS = ("softmax", *CAUSAL_MIXERS)


class DropPath(nn.Module):
    """Stochastic depth: drop a residual branch per row of its input with probability ``p`` (training only).

    As the official ``drop_path``, one draw per leading index of the tensor it is applied to: the
    time branch ``(B·S, T, D)`` per sample and patch location, the space branch ``(B·T, 1+S, D)``
    per sample and frame; the MLP branch of the official block acts on the joined class and patch
    tokens, so its caller draws one ``mask`` per sample and passes it for both.
    """

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = p

    def draw(self, rows: int, like: Tensor) -> Tensor | None:
        """``(rows,)`` keep mask scaled by ``1 / (1 - p)``; None when nothing is dropped."""
        if not self.training or self.p == 0.0:
            return None
        keep = torch.rand(rows, device=like.device) >= self.p
        return keep.to(like.dtype) / (1.0 - self.p)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        mask = self.draw(x.shape[0], x) if mask is None else mask
        return x if mask is None else x * mask.view((-1,) + (1,) * (x.dim() - 1))


class Attention(nn.Module):
    """Softmax attention with a fused ``qkv`` projection, as in ViT; keys may include extra tokens.

    ``x (N, L, D)`` are the queries; ``context (N, M, D)`` (optional) are extra keys/values that
    every query sees besides ``x`` (CR-ViT's memory).
    """

    def __init__(self, dim: int, n_heads: int, qkv_bias: bool = True, attn_dropout: float = 0.0) -> None:
        super().__init__()
        if dim % n_heads:
            raise ValueError(f"model.d_model={dim} must be divisible by model.n_heads={n_heads}")
        self.n_heads, self.attn_dropout = n_heads, attn_dropout
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: Tensor, context: Tensor | None = None) -> Tensor:
        n, length, dim = x.shape
        tokens = x if context is None else torch.cat([context, x], dim=1)
        q, k, v = (
            self.qkv(tokens).unflatten(-1, (3, self.n_heads, dim // self.n_heads)).permute(2, 0, 3, 1, 4)
        )
        q = q[:, :, -length:]
        dropout = self.attn_dropout if self.training else 0.0
        out = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout)
        return self.proj(out.transpose(1, 2).reshape(n, length, dim))


class CausalTimeAttention(nn.Module):
    """A causal token mixer ``attn`` over the frames; extra context tokens go first, so every frame
    sees them."""

    def __init__(self, attn: nn.Module) -> None:
        super().__init__()
        self.attn = attn
        # The per-frame step in eval is the deployed one (weights laid out once), as for every
        # stream; a mixer with no lean step steps itself.
        self.stepper = LeanMixerStepper(attn) if has_lean_mixer(attn) else attn

    def forward(self, x: Tensor, context: Tensor | None = None) -> Tensor:
        tokens = x if context is None else torch.cat([context, x], dim=1)
        out, _ = self.attn(tokens)
        return out[:, -x.shape[1] :]

    def init_state(self, rows: int, like: Tensor) -> State:
        return self.attn.init_state(rows, like.device, like.dtype)

    def step(self, x_t: Tensor, state: State) -> tuple[Tensor, State]:
        """One frame ``(N, D)`` for each of ``N`` patch locations; equals :meth:`forward`'s row.
        In eval without gradients, the mixer's deployed step (:class:`LeanMixerStepper`), tested equal."""
        return self.stepper.step(x_t, state)


class Mlp(nn.Sequential):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim)


class DividedBlock(nn.Module):
    """One divided space-time block on ``cls (B, D)`` and ``patches (B, S, T, D)`` (S = H·W)."""

    def __init__(
        self,
        dim: int,
        n_heads: int,
        mlp_hidden: int,
        drop_path: float,
        attn_dropout: float = 0.0,
        qkv_bias: bool = True,
        eps: float = 1e-6,
        time_mixer: str = "softmax",
    ) -> None:
        super().__init__()
        if time_mixer not in TIME_MIXERS:
            raise ValueError(f"model.time_mixer={time_mixer!r}: choose one of {TIME_MIXERS}")
        self.temporal_norm1 = nn.LayerNorm(dim, eps=eps)
        self.temporal_attn: nn.Module = (
            Attention(dim, n_heads, qkv_bias, attn_dropout)
            if time_mixer == "softmax"
            else CausalTimeAttention(CAUSAL_MIXERS[time_mixer](dim, n_heads))
        )
        self.temporal_fc = nn.Linear(dim, dim)
        self.norm1 = nn.LayerNorm(dim, eps=eps)
        self.attn = Attention(dim, n_heads, qkv_bias, attn_dropout)
        self.norm2 = nn.LayerNorm(dim, eps=eps)
        self.mlp = Mlp(dim, mlp_hidden)
        self.drop_path = DropPath(drop_path)

    def forward(self, cls: Tensor, patches: Tensor, memory: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """``cls (B, D)`` shared by the frames, or ``(B, T, D)`` one per frame (the causal mode);
        ``memory (B, D)``: one extra key/value for every patch location's time attention."""
        B, S, T, D = patches.shape
        per_location = patches.reshape(B * S, T, D)
        context = None
        if memory is not None:
            context = self.temporal_norm1(memory).repeat_interleave(S, dim=0).unsqueeze(1)
        mixed = self.temporal_attn(self.temporal_norm1(per_location), context)
        patches = patches + self.temporal_fc(self.drop_path(mixed)).reshape(B, S, T, D)
        return self.space_and_mlp(cls, patches)

    def step(self, cls: Tensor, patches: Tensor, state: State) -> tuple[Tensor, Tensor, State]:
        """One frame (inference): ``cls (B, 1, D)``, ``patches (B, S, 1, D)``, the time mixer's state."""
        B, S, _, D = patches.shape
        mixed, state = self.temporal_attn.step(self.temporal_norm1(patches.reshape(B * S, D)), state)
        patches = patches + self.temporal_fc(mixed).reshape(B, S, 1, D)
        cls, patches = self.space_and_mlp(cls, patches)
        return cls, patches, state

    def space_and_mlp(self, cls: Tensor, patches: Tensor) -> tuple[Tensor, Tensor]:
        """Space attention per frame with the class token, then the MLP on every token."""
        B, S, T, D = patches.shape
        per_frame = patches.transpose(1, 2).reshape(B * T, S, D)
        per_frame_cls = cls.reshape(B * T, 1, D) if cls.dim() == 3 else cls.repeat_interleave(T, 0)[:, None]
        spatial = self.drop_path(self.attn(self.norm1(torch.cat([per_frame_cls, per_frame], dim=1))))
        cls_outputs = spatial[:, 0].reshape(B, T, D)
        cls = cls + (cls_outputs if cls.dim() == 3 else cls_outputs.mean(dim=1))
        patches = patches + spatial[:, 1:].reshape(B, T, S, D).transpose(1, 2)

        mask = self.drop_path.draw(B, patches)  # one per sample, class token and patches alike
        cls = cls + self.drop_path(self.mlp(self.norm2(cls)), mask)
        patches = patches + self.drop_path(self.mlp(self.norm2(patches)), mask)
        return cls, patches


class PatchEmbed(nn.Module):
    def __init__(self, patch_size: int, dim: int, in_channels: int = 3) -> None:
        super().__init__()
        self.proj = nn.Conv2d(in_channels, dim, kernel_size=patch_size, stride=patch_size)

    def forward(self, video: Tensor) -> Tensor:
        """``video (B, C, T, H, W)`` -> patches ``(B, S, T, D)``, S in row-major (h, w) order."""
        B, C, T, H, W = video.shape
        x = self.proj(video.transpose(1, 2).reshape(B * T, C, H, W))  # (B·T, D, h, w)
        return x.flatten(2).reshape(B, T, x.shape[1], -1).permute(0, 3, 1, 2)

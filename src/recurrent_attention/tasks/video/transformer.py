"""TimeSformer's divided space-time transformer, and CR-ViT: the same network run twice with a memory.

Facts from the official code (facebookresearch/TimeSformer ``timesformer/models/vit.py``), kept here:

- Tokens are a class token plus ``H·W`` patches in each of ``T`` frames; patches get a spatial
  position embedding (shared by the frames) and a per-frame time embedding.
- Each block mixes time first: every patch location attends over its own ``T`` frames (the class
  token takes no part), the output goes through ``temporal_fc`` (zero-initialised, so a block starts
  as the image model it was initialised from) and is added back. Then space: every frame attends
  over its patches plus a copy of the class token; the class token's ``T`` outputs are averaged.
  Then the MLP. Pre-norm throughout; the features are the final LayerNorm of the class token.

Module and parameter names follow the official ones (``blocks.0.temporal_attn.qkv`` ...) so that
:mod:`~recurrent_attention.tasks.video.weights` maps checkpoints key for key.

The time mixer (``time_mixer``) is where recurrence can live (DESIGN.md): ``softmax`` is the
official bidirectional attention over the frames; ``aaren`` is the project's Aaren attention
(:class:`~recurrent_attention.models.aaren.AarenAttention`), causal over the frames. Causal mixing
alone does not make the network causal: the official class token is averaged over all frames in
every block and re-enters each frame's space attention. So with ``aaren`` every frame keeps its
own class token (same parameters: learned token plus its position), which meets only its own
frame's patches; the per-frame class features (after the final LayerNorm) are averaged over the
frames seen so far only at the output. Frames past ``n_frames`` reuse the last time embedding
(resizing it would move earlier frames). Every output at frame ``t`` then depends on frames up to
``t`` only, and :meth:`TimeSformer.step` runs the network one frame at a time with a state of
constant size (Aaren's ``(m, u, w)`` per block, patch location and head, plus the running sum of
the class features), equal to the parallel pass.

CR-ViT (CRT paper section 5.3) runs the network ``iterations`` times per video. Iteration 1 sees a
zero memory; the memory of the next iteration is the last hidden state of an RNN (GRU or NCGRU)
over this iteration's outputs without the class token. The memory is one vector per video, added
to every time attention (from block ``memory_from_block`` on) as one more key/value that every
patch location sees, ahead of the frames. The next iteration's class token starts as the learned
class token plus the previous output class token. Features per iteration are ``[prev cls, cls]``
(``[cls, cls]`` in iteration 1).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from recurrent_attention.models.aaren import AarenAttention
from recurrent_attention.models.ncgru import make_rnn
from recurrent_attention.ops import ScanState
from recurrent_attention.tasks.video.weights import load_pretrained

TIME_MIXERS = ("softmax", "aaren")
FRAME_SPLITS = ("split", "repeat")
MEMORY_INPUTS = ("frames", "patches")


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
    """Aaren over the frames (causal); extra context tokens go first, so every frame sees them."""

    def __init__(self, dim: int, n_heads: int) -> None:
        super().__init__()
        self.attn = AarenAttention(dim, n_heads, path="scan")

    def forward(self, x: Tensor, context: Tensor | None = None) -> Tensor:
        tokens = x if context is None else torch.cat([context, x], dim=1)
        out, _ = self.attn(tokens)
        return out[:, -x.shape[1] :]

    def init_state(self, rows: int, like: Tensor) -> ScanState:
        return self.attn.init_state(rows, like.device, like.dtype)

    def step(self, x_t: Tensor, state: ScanState) -> tuple[Tensor, ScanState]:
        """One frame ``(N, D)`` for each of ``N`` patch locations; equals :meth:`forward`'s row."""
        return self.attn.step(x_t, state)


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
            else CausalTimeAttention(dim, n_heads)
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

    def step(self, cls: Tensor, patches: Tensor, state: ScanState) -> tuple[Tensor, Tensor, ScanState]:
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


class FrameState(NamedTuple):
    """What :meth:`TimeSformer.step` carries between frames; its size does not grow with them."""

    frames: int  # frames seen
    blocks: list[ScanState]  # each block's time-mixer state, per patch location and head
    feature_sum: Tensor  # (B, d_model): the class features summed over the frames seen


class TimeSformer(nn.Module):
    """Video -> class-token features ``(B, feature_dim)``; ``forward`` returns one entry per iteration.

    ``n_frames`` is the clip length the time embedding is sized for; ``img_size`` the crop the
    spatial position embedding is sized for (ViT-B/16 at 224: 196 patches). ``pretrained``: a
    TimeSformer ``.pyth`` or timm ViT checkpoint (:mod:`~recurrent_attention.tasks.video.weights`).
    """

    iterations = 1

    def __init__(
        self,
        img_size: int = 224,
        patch_size: int = 16,
        n_frames: int = 8,
        d_model: int = 768,
        n_layers: int = 12,
        n_heads: int = 12,
        d_ff: int = 3072,
        drop_path: float = 0.1,
        dropout: float = 0.0,
        attn_dropout: float = 0.0,
        qkv_bias: bool = True,
        ln_eps: float = 1e-6,
        time_mixer: str = "softmax",
        pretrained: str | None = None,
    ) -> None:
        super().__init__()
        if img_size % patch_size:
            raise ValueError(f"the crop ({img_size}) must be a multiple of model.patch_size={patch_size}")
        self.d_model, self.n_frames, self.causal = d_model, n_frames, time_mixer == "aaren"
        self.grid = img_size // patch_size
        self.patch_embed = PatchEmbed(patch_size, d_model)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, d_model))
        self.pos_embed = nn.Parameter(torch.zeros(1, self.grid**2 + 1, d_model))
        self.time_embed = nn.Parameter(torch.zeros(1, n_frames, d_model))
        self.pos_drop = nn.Dropout(dropout)
        rates = torch.linspace(0, drop_path, n_layers).tolist()
        self.blocks = nn.ModuleList(
            DividedBlock(d_model, n_heads, d_ff, rate, attn_dropout, qkv_bias, ln_eps, time_mixer)
            for rate in rates
        )
        self.norm = nn.LayerNorm(d_model, eps=ln_eps)
        self.reset_parameters()
        if pretrained:
            load_pretrained(self, pretrained)

    @property
    def feature_dim(self) -> int:
        return self.d_model

    def reset_parameters(self) -> None:
        """ViT's initialisation: truncated normal 0.02 for embeddings and linears, zero biases;
        every ``temporal_fc`` zero (the official loop zeroes all of them)."""
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        nn.init.trunc_normal_(self.cls_token, std=0.02)
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.trunc_normal_(module.weight, std=0.02)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
        for block in self.blocks:
            nn.init.zeros_(block.temporal_fc.weight)
            nn.init.zeros_(block.temporal_fc.bias)

    def embed(self, video: Tensor, first_frame: int = 0) -> Tensor:
        """Patches ``(B, S, T, D)`` with spatial and time embeddings; frames start at ``first_frame``."""
        patches = self.patch_embed(video)
        grid = round(patches.shape[1] ** 0.5)
        pos = self.pos_embed[0, 1:]
        if grid != self.grid:  # nearest-resized, as the official forward does for another crop
            square = pos.T.reshape(1, self.d_model, self.grid, self.grid)
            pos = F.interpolate(square, size=(grid, grid), mode="nearest").flatten(2)[0].T
        T = patches.shape[2]
        time = self.time_embed[0]
        if self.causal:  # later frames reuse the last embedding: nothing moves an earlier frame
            frames = torch.arange(first_frame, first_frame + T, device=time.device)
            time = time[frames.clamp_max(len(time) - 1)]
        else:
            if first_frame + T > len(time):  # nearest-resized when the clip is longer
                time = F.interpolate(time.T[None], size=first_frame + T, mode="nearest")[0].T
            time = time[first_frame : first_frame + T]
        patches = patches + pos[None, :, None] + time[None, None]
        return self.pos_drop(patches)

    def run_blocks(self, cls: Tensor, patches: Tensor, memory: Tensor | None = None) -> tuple[Tensor, Tensor]:
        for block in self.blocks:
            cls, patches = block(cls, patches, memory)
        return cls, patches

    def initial_cls(self, batch_size: int, frames: int = 1) -> Tensor:
        """The class token with its position: ``(B, D)``, or ``(B, frames, D)`` in the causal mode."""
        cls = (self.cls_token[0] + self.pos_embed[0, :1]).expand(batch_size, -1)
        return cls[:, None].expand(-1, frames, -1) if self.causal else cls

    def pooled(self, cls: Tensor) -> Tensor:
        """Features from the output class token(s): the final LayerNorm, per-frame ones averaged."""
        return self.norm(cls).mean(dim=1) if self.causal else self.norm(cls)

    def forward(self, video: Tensor) -> list[Tensor]:
        """``video (B, C, T, H, W)`` -> ``[features (B, d_model)]``."""
        cls, _ = self.run_blocks(self.initial_cls(len(video), video.shape[2]), self.embed(video))
        return [self.pooled(cls)]

    def frame_features(self, video: Tensor) -> Tensor:
        """Causal mode: the features after each frame ``(B, T, d_model)``; the last equals ``forward``."""
        self._require_causal("frame_features")
        cls, _ = self.run_blocks(self.initial_cls(len(video), video.shape[2]), self.embed(video))
        seen = torch.arange(1, video.shape[2] + 1, device=video.device, dtype=cls.dtype)
        return self.norm(cls).cumsum(dim=1) / seen[:, None]

    def init_state(self, batch_size: int, like: Tensor) -> FrameState:
        """The empty stream state for :meth:`step` (``like``: any tensor of the frames' device and dtype)."""
        self._require_causal("step")
        rows = batch_size * self.grid**2
        blocks = [block.temporal_attn.init_state(rows, like) for block in self.blocks]
        return FrameState(0, blocks, like.new_zeros(batch_size, self.d_model))

    def step(self, frame: Tensor, state: FrameState) -> tuple[Tensor, FrameState]:
        """One frame ``(B, C, H, W)`` -> the features after it ``(B, d_model)`` and the next state.

        Constant work and memory per frame; equals :meth:`frame_features` at that frame (eval mode).
        """
        patches = self.embed(frame[:, :, None], state.frames)
        cls = self.initial_cls(len(frame), 1)
        block_states = []
        for block, block_state in zip(self.blocks, state.blocks, strict=True):
            cls, patches, block_state = block.step(cls, patches, block_state)
            block_states.append(block_state)
        total = state.feature_sum + self.norm(cls[:, 0])
        return total / (state.frames + 1), FrameState(state.frames + 1, block_states, total)

    def _require_causal(self, what: str) -> None:
        if not self.causal:
            raise ValueError(f"{what} needs model.time_mixer=aaren: the softmax time mixer sees every frame")


class CRViT(TimeSformer):
    """TimeSformer run ``iterations`` times per video with a recurrent memory (CRT section 5.3).

    Choices the paper leaves open (config keys, defaults in ``conf/model/cr_vit.yaml``):

    - ``frame_split``: ``split`` gives each iteration its own consecutive ``T / iterations`` frames
      (time embeddings at their place in the clip), so the memory carries the earlier frames;
      ``repeat`` shows all ``T`` frames in every iteration.
    - ``memory_input``: the RNN reads ``frames`` (the mean of each frame's patch outputs, after the
      final LayerNorm, in time order) or ``patches`` (every patch output, time-minor order).
    - ``rnn``: ``gru`` or ``ncgru`` (hidden size ``d_model``, so the memory is a token).
    - ``memory_from_block``: the first block whose time attention sees the memory.
    - ``bptt``: let gradients flow from iteration 2 into iteration 1 through the memory and class token.
    """

    def __init__(
        self,
        *args,
        iterations: int = 2,
        frame_split: str = "split",
        memory_input: str = "frames",
        rnn: str = "gru",
        memory_from_block: int = 0,
        bptt: bool = True,
        ncgru_inverse: str = "neumann",
        pretrained: str | None = None,
        **kwargs,
    ) -> None:
        super().__init__(*args, **kwargs)
        if frame_split not in FRAME_SPLITS:
            raise ValueError(f"model.frame_split={frame_split!r}: choose one of {FRAME_SPLITS}")
        if memory_input not in MEMORY_INPUTS:
            raise ValueError(f"model.memory_input={memory_input!r}: choose one of {MEMORY_INPUTS}")
        if frame_split == "split" and self.n_frames % iterations:
            raise ValueError(
                f"frame_split=split needs task.n_frames ({self.n_frames}) divisible by {iterations}"
            )
        self.iterations, self.frame_split, self.memory_input = iterations, frame_split, memory_input
        self.memory_from_block, self.bptt = memory_from_block, bptt
        options = {"inverse": ncgru_inverse} if rnn == "ncgru" else {}
        self.memory_rnn = make_rnn(rnn, self.d_model, self.d_model, **options)
        if pretrained:  # after the memory RNN exists, so that its keys are known to be new
            load_pretrained(self, pretrained)

    @property
    def feature_dim(self) -> int:
        return 2 * self.d_model

    def _require_causal(self, what: str) -> None:
        raise ValueError(
            f"{what}: CR-ViT has no frame-by-frame form (iteration 2 starts from iteration 1's memory); "
            "model=timesformer model.time_mixer=aaren streams"
        )

    def make_memory(self, patches: Tensor) -> Tensor:
        """The RNN's last hidden state over one iteration's non-class outputs ``(B, S, T, D)``."""
        outputs = self.norm(patches)
        sequence = outputs.mean(dim=1) if self.memory_input == "frames" else outputs.flatten(1, 2)
        _, last = self.memory_rnn(sequence)
        return last

    def run_blocks(self, cls: Tensor, patches: Tensor, memory: Tensor | None = None) -> tuple[Tensor, Tensor]:
        for index, block in enumerate(self.blocks):
            cls, patches = block(cls, patches, memory if index >= self.memory_from_block else None)
        return cls, patches

    def clips(self, video: Tensor) -> list[tuple[Tensor, int]]:
        """What each iteration sees: ``(frames, index of its first frame in the clip)``."""
        if self.frame_split == "repeat":
            return [(video, 0)] * self.iterations
        chunks = video.chunk(self.iterations, dim=2)
        starts = torch.tensor([0] + [c.shape[2] for c in chunks[:-1]]).cumsum(0).tolist()
        return list(zip(chunks, starts, strict=True))

    def forward(self, video: Tensor) -> list[Tensor]:
        """``video (B, C, T, H, W)`` -> per iteration ``[prev cls, cls]`` features ``(B, 2·d_model)``."""
        B = len(video)
        memory = video.new_zeros(B, self.d_model)
        previous_cls: Tensor | None = None
        previous_features: Tensor | None = None
        features = []
        for frames, start in self.clips(video):
            cls = self.initial_cls(B, frames.shape[2])
            if previous_cls is not None:
                cls = cls + (previous_cls[:, None] if self.causal else previous_cls)
            cls, patches = self.run_blocks(cls, self.embed(frames, start), memory)
            current = self.pooled(cls)
            features.append(
                torch.cat([current if previous_features is None else previous_features, current], -1)
            )
            memory = self.make_memory(patches)
            # the output class token before the final LayerNorm (per-frame ones averaged)
            previous_cls, previous_features = (cls.mean(dim=1) if self.causal else cls), current
            if not self.bptt:
                memory, previous_cls = memory.detach(), previous_cls.detach()
                previous_features = current.detach()
        return features

"""The video encoders: TimeSformer, and CR-ViT (the same network run twice with a memory), behind
:class:`VideoEncoder`, the interface the video task module takes.

They do not keep the backbones' interface (``models.base.Backbone``: a sequence of embeddings in,
the same length out, ``step`` per token): a clip goes in and class-token features come out, one
entry per iteration. Built from :mod:`~recurrent_attention.tasks.video.divided_block`; the features are
the final LayerNorm of the class token.

Causal mode (a causal time mixer: ``time_mixer=aaren`` or ``linear``). Causal mixing alone does not
make the network causal: the official class token is averaged over all frames in every block and
re-enters each frame's space attention. So with a causal mixer every frame keeps its own class
token (same parameters: learned token plus its position), which meets only its own frame's patches;
the per-frame class features (after the final LayerNorm) are averaged over the frames seen so far
only at the output. Frames past ``n_frames`` reuse the last time embedding (resizing it would move
earlier frames). Every output at frame ``t`` then depends on frames up to ``t`` only, and
:meth:`TimeSformer.step` runs the network one frame at a time with a state of constant size (the
mixer's: Aaren's ``(m, u, w)`` or linear attention's ``(S, z)``, per block, patch location and
head, plus the running sum of the class features), equal to the parallel pass.

CR-ViT (CRT paper section 5.3) runs the network ``iterations`` times per video. Iteration 1 sees a
zero memory; the memory of the next iteration is the last hidden state of an RNN (GRU or NCGRU)
over this iteration's outputs without the class token. The memory is one vector per video, added
to every time attention (from block ``memory_from_block`` on) as one more key/value that every
patch location sees, ahead of the frames. The next iteration's class token starts as the learned
class token plus the previous output class token. Features per iteration are ``[prev cls, cls]``
(``[cls, cls]`` in iteration 1).
"""

from __future__ import annotations

from typing import NamedTuple, Protocol, runtime_checkable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from recurrent_attention.models.base import State
from recurrent_attention.models.ncgru import make_rnn
from recurrent_attention.tasks.video.divided_block import CAUSAL_MIXERS, DividedBlock, PatchEmbed
from recurrent_attention.tasks.video.weights import load_pretrained

FRAME_SPLITS = ("split", "repeat")
MEMORY_INPUTS = ("frames", "patches")
# What the messages of a form only a causal time mixer has name: "a causal time mixer (aaren, linear)".
CAUSAL = f"a causal time mixer ({', '.join(CAUSAL_MIXERS)})"


@runtime_checkable
class VideoEncoder(Protocol):
    """What the video task module calls on its ``backbone``: a clip in, features per iteration out.

    ``encoder(video)`` takes ``video (B, C, T, H, W)`` and returns one ``(B, feature_dim)`` tensor
    per iteration (TimeSformer: one; CR-ViT: one per pass, the last is the prediction's); the module
    puts its linear head on ``feature_dim``. TimeSformer's causal mode adds a per-frame form,
    ``init_state`` and ``step`` (:meth:`TimeSformer.step`), which the module does not call.
    """

    @property
    def feature_dim(self) -> int: ...

    def __call__(self, video: Tensor) -> list[Tensor]: ...


class FrameState(NamedTuple):
    """What :meth:`TimeSformer.step` carries between frames; its size does not grow with them."""

    frames: int  # frames seen
    blocks: list[State]  # each block's time-mixer state, per patch location and head
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
        self.d_model, self.n_frames, self.causal = d_model, n_frames, time_mixer != "softmax"
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
            raise ValueError(
                f"{what} needs {CAUSAL} as model.time_mixer: the softmax time mixer sees every frame"
            )


class CRViT(TimeSformer):
    """TimeSformer run ``iterations`` times per video with a recurrent memory (CRT section 5.3).

    Choices the paper leaves open (config keys, defaults in ``conf/model/cr_vit.yaml``):

    - ``frame_split``: ``repeat`` shows all ``T`` frames in every iteration, so the memory RNN reads
      the whole clip (the paper's 16 frames per video, appendix A); ``split`` gives each iteration
      its own consecutive ``T / iterations`` frames (time embeddings at their place in the clip), so
      the memory carries the earlier frames.
    - ``memory_input``: the RNN reads ``frames`` (the mean of each frame's patch outputs, after the
      final LayerNorm, in time order) or ``patches`` (every patch output, time-minor order).
    - ``rnn``: ``gru_eq4`` (CRT's equation (4)), ``gru`` (``nn.GRU``) or ``ncgru`` (hidden size
      ``d_model``, so the memory is a token).
    - ``memory_from_block``: the first block whose time attention sees the memory.
    - ``bptt``: let gradients flow from iteration 2 into iteration 1 through the memory and class token.
    """

    def __init__(
        self,
        *args,
        iterations: int = 2,
        frame_split: str = "repeat",
        memory_input: str = "frames",
        rnn: str = "gru_eq4",
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
            f"model=timesformer with {CAUSAL} as model.time_mixer streams"
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

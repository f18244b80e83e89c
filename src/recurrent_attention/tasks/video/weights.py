"""Pretrained weights for the video transformer: official TimeSformer ``.pyth`` or timm ViT-B/16.

Layouts read (facts from TimeSformer's ``helpers.load_state_dict`` / ``load_pretrained``):

- TimeSformer ``.pyth`` (SlowFast checkpoint): ``{"model_state": {"model.<key>": tensor}, ...}``;
  the ``model.`` prefix is the wrapper module's and is stripped.
- A Lightning checkpoint of a ``task=video/*`` run here (``checkpoints/last.ckpt``): the weights
  under ``state_dict`` as ``backbone.<key>``; the prefix is stripped and the task's ``head.*``
  left out. This is how stage 2 (CR-ViT) starts from stage 1 (TimeSformer*): CR-ViT's memory RNN
  is the only part without a stage-1 counterpart.
- timm ViT (``.pth``/``.bin``, a bare state dict or under ``state_dict`` / ``model``): image
  weights only. As the official loader does, each block's time attention and its LayerNorm start
  as copies of the spatial ones (``attn`` -> ``temporal_attn``, ``norm1`` -> ``temporal_norm1``);
  ``temporal_fc`` keeps its zero initialisation and ``time_embed`` its zeros.

Either way the classifier ``head.*`` is left out (the task has its own classes), the spatial
position embedding is nearest-resized on its grid when the crop differs and the time embedding is
nearest-resized when the clip length differs. With a causal time mixer (``time_mixer=aaren`` or
``linear``) the fused ``qkv`` and ``proj`` become the mixer's ``proj.qkv`` and ``proj.out_proj`` (the
same fused q/k/v layout; Aaren's learned query stays random).
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from recurrent_attention.data import DataError

StateDict = dict[str, Tensor]


def read_checkpoint(path: Path) -> StateDict:
    """The model weights inside a ``.pyth``, timm or plain checkpoint, with wrapper prefixes stripped."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise DataError(f"model.pretrained={path}: no such file")
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:
        raise DataError(f"model.pretrained={path}: not a readable PyTorch checkpoint ({err})") from err
    if isinstance(checkpoint, dict) and "pytorch-lightning_version" in checkpoint:
        return lightning_backbone(checkpoint.get("state_dict", {}), path)
    for key, prefix in (("model_state", "model."), ("state_dict", "module."), ("model", "module.")):
        if isinstance(checkpoint, dict) and isinstance(checkpoint.get(key), dict):
            return {k.removeprefix(prefix): v for k, v in checkpoint[key].items()}
    if not isinstance(checkpoint, dict):
        raise DataError(f"model.pretrained={path}: expected a state dict, found {type(checkpoint).__name__}")
    return dict(checkpoint)


def lightning_backbone(state: StateDict, path: Path) -> StateDict:
    """The video transformer inside a Lightning checkpoint of this project (stage 1 of the paper's
    recipe): its ``backbone.*`` weights, prefix stripped; the task's head is left out."""
    backbone = {k.removeprefix("backbone."): v for k, v in state.items() if k.startswith("backbone.")}
    if not backbone:
        raise DataError(
            f"model.pretrained={path}: a Lightning checkpoint without backbone.* weights; "
            "point it at a checkpoint of a task=video/* run"
        )
    return backbone


def _nearest(sequence: Tensor, size: int) -> Tensor:
    """``(1, N, D)`` -> ``(1, size, D)`` by nearest neighbour along N."""
    return F.interpolate(sequence.transpose(1, 2), size=size, mode="nearest").transpose(1, 2)


def _resize_positions(pos_embed: Tensor, grid: int) -> Tensor:
    """``(1, 1 + g·g, D)`` -> ``(1, 1 + grid·grid, D)``: the class position kept, the grid nearest-resized."""
    cls, patches = pos_embed[:, :1], pos_embed[:, 1:]
    old = round(patches.shape[1] ** 0.5)
    square = patches.transpose(1, 2).reshape(1, -1, old, old)
    resized = F.interpolate(square, size=(grid, grid), mode="nearest").flatten(2).transpose(1, 2)
    return torch.cat([cls, resized], dim=1)


def _qkv_for_causal_mixer(state: StateDict) -> StateDict:
    """``temporal_attn.qkv``/``proj`` -> a causal mixer's ``proj.qkv``/``proj.out_proj`` (the same
    fused q/k/v layout)."""
    out: StateDict = {}
    for key, value in state.items():
        if ".temporal_attn.qkv." in key:
            out[key.replace(".temporal_attn.qkv.", ".temporal_attn.attn.proj.qkv.")] = value
        elif ".temporal_attn.proj." in key:
            out[key.replace(".temporal_attn.proj.", ".temporal_attn.attn.proj.out_proj.")] = value
        else:
            out[key] = value
    return out


def to_model_layout(state: StateDict, model: nn.Module) -> StateDict:
    """Map a TimeSformer or timm ViT state dict onto ``model``'s keys and shapes."""
    state = {k: v for k, v in state.items() if not k.startswith("head.")}
    if not any(".temporal_attn." in k for k in state):  # image weights: time attention from space
        for key in list(state):
            if key.startswith("blocks.") and (".attn." in key or ".norm1." in key):
                temporal = key.replace(".attn.", ".temporal_attn.").replace(".norm1.", ".temporal_norm1.")
                state[temporal] = state[key].clone()
    if "pos_embed" in state and state["pos_embed"].shape != model.pos_embed.shape:
        state["pos_embed"] = _resize_positions(state["pos_embed"], model.grid)
    if "time_embed" in state and state["time_embed"].shape != model.time_embed.shape:
        state["time_embed"] = _nearest(state["time_embed"], model.time_embed.shape[1])
    if any(k.endswith("temporal_attn.attn.proj.qkv.weight") for k in model.state_dict()):
        state = _qkv_for_causal_mixer(state)
    return state


def load_pretrained(model: nn.Module, path: str | Path) -> None:
    """Load ``path`` into ``model``; only parts with no pretrained counterpart may stay as initialised.

    Those are ``temporal_fc`` and ``time_embed`` (image weights), CR-ViT's memory RNN and Aaren's
    query. Any other missing key, or a key the model lacks, is an error naming the keys.
    """
    state = to_model_layout(read_checkpoint(Path(path)), model)
    own = model.state_dict()
    shapes = [
        f"{k} {tuple(v.shape)} vs {tuple(own[k].shape)}"
        for k, v in state.items()
        if k in own and v.shape != own[k].shape
    ]
    result = model.load_state_dict(
        {k: v for k, v in state.items() if k not in own or v.shape == own[k].shape}, strict=False
    )
    may_stay = ("temporal_fc.", "time_embed", "memory_rnn.", "temporal_attn.attn.query")
    missing = [k for k in result.missing_keys if not any(part in k for part in may_stay)]
    problems = (
        shapes + [f"missing {k}" for k in missing] + [f"unexpected {k}" for k in result.unexpected_keys]
    )
    if problems:
        listed = ", ".join(problems[:6]) + (" ..." if len(problems) > 6 else "")
        raise DataError(
            f"model.pretrained={path}: does not fit the model ({len(problems)} keys: {listed}); "
            "check that model.d_model, n_layers and patch_size match the weights"
        )

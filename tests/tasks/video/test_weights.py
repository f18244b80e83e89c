"""Pretrained-weight key mapping, on state dicts built in the official TimeSformer and timm layouts.

The key names below are written out from the official code (TimeSformer ``vit.py``: ``Block``,
``PatchEmbed``, ``VisionTransformer``; a ``.pyth`` stores them under ``model_state`` with the
wrapper's ``model.`` prefix; timm's ViT has no temporal parts), not taken from the model under test.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from recurrent_attention.data import DataError
from recurrent_attention.tasks.video.divided_block import CAUSAL_MIXERS
from recurrent_attention.tasks.video.encoders import CRViT, TimeSformer

D, DEPTH, HEADS, PATCH = 16, 2, 2, 8


def image_vit_state(grid: int, classes: int = 1000) -> dict[str, torch.Tensor]:
    """A timm ViT state dict (image model) with distinct random values."""
    state = {
        "cls_token": (1, 1, D),
        "pos_embed": (1, grid * grid + 1, D),
        "patch_embed.proj.weight": (D, 3, PATCH, PATCH),
        "patch_embed.proj.bias": (D,),
        "norm.weight": (D,),
        "norm.bias": (D,),
        "head.weight": (classes, D),
        "head.bias": (classes,),
    }
    for i in range(DEPTH):
        state |= {
            f"blocks.{i}.norm1.weight": (D,),
            f"blocks.{i}.norm1.bias": (D,),
            f"blocks.{i}.attn.qkv.weight": (3 * D, D),
            f"blocks.{i}.attn.qkv.bias": (3 * D,),
            f"blocks.{i}.attn.proj.weight": (D, D),
            f"blocks.{i}.attn.proj.bias": (D,),
            f"blocks.{i}.norm2.weight": (D,),
            f"blocks.{i}.norm2.bias": (D,),
            f"blocks.{i}.mlp.fc1.weight": (4 * D, D),
            f"blocks.{i}.mlp.fc1.bias": (4 * D,),
            f"blocks.{i}.mlp.fc2.weight": (D, 4 * D),
            f"blocks.{i}.mlp.fc2.bias": (D,),
        }
    return {key: torch.randn(shape) for key, shape in state.items()}


def timesformer_state(grid: int, frames: int) -> dict[str, torch.Tensor]:
    """The official TimeSformer's state dict: the image keys plus time embedding and temporal parts."""
    state = image_vit_state(grid, classes=400) | {"time_embed": torch.randn(1, frames, D)}
    for i in range(DEPTH):
        state |= {
            f"blocks.{i}.temporal_norm1.weight": torch.randn(D),
            f"blocks.{i}.temporal_norm1.bias": torch.randn(D),
            f"blocks.{i}.temporal_attn.qkv.weight": torch.randn(3 * D, D),
            f"blocks.{i}.temporal_attn.qkv.bias": torch.randn(3 * D),
            f"blocks.{i}.temporal_attn.proj.weight": torch.randn(D, D),
            f"blocks.{i}.temporal_attn.proj.bias": torch.randn(D),
            f"blocks.{i}.temporal_fc.weight": torch.randn(D, D),
            f"blocks.{i}.temporal_fc.bias": torch.randn(D),
        }
    return state


def save_pyth(path: Path, state: dict[str, torch.Tensor]) -> Path:
    torch.save({"epoch": 15, "model_state": {f"model.{k}": v for k, v in state.items()}, "cfg": "..."}, path)
    return path


def build(cls=TimeSformer, **kwargs) -> TimeSformer:
    return cls(img_size=32, patch_size=PATCH, d_model=D, n_layers=DEPTH, n_heads=HEADS, d_ff=4 * D, **kwargs)


def test_pyth_checkpoint_maps_key_for_key_and_resizes_time(tmp_path: Path) -> None:
    state = timesformer_state(grid=4, frames=8)
    model = build(n_frames=4, pretrained=str(save_pyth(tmp_path / "k400.pyth", state)))
    ours = model.state_dict()
    for key in (
        "blocks.1.temporal_attn.qkv.weight",
        "blocks.0.temporal_fc.bias",
        "blocks.1.attn.proj.weight",
    ):
        torch.testing.assert_close(ours[key], state[key])
    torch.testing.assert_close(ours["patch_embed.proj.weight"], state["patch_embed.proj.weight"])
    torch.testing.assert_close(ours["pos_embed"], state["pos_embed"])
    torch.testing.assert_close(ours["time_embed"], state["time_embed"][:, [0, 2, 4, 6]])  # 8 -> 4, nearest
    assert not any(k.startswith("head") for k in ours)


def test_timm_vit_initialises_time_attention_from_space(tmp_path: Path) -> None:
    state = image_vit_state(grid=2)  # a 16-pixel model's grid: resized to the 32-pixel crop's 4 x 4
    torch.save(state, tmp_path / "vit_b16.pth")
    model = build(n_frames=4, pretrained=str(tmp_path / "vit_b16.pth"))
    ours = model.state_dict()
    for i in range(DEPTH):
        torch.testing.assert_close(
            ours[f"blocks.{i}.temporal_attn.qkv.weight"], state[f"blocks.{i}.attn.qkv.weight"]
        )
        torch.testing.assert_close(ours[f"blocks.{i}.temporal_norm1.bias"], state[f"blocks.{i}.norm1.bias"])
        assert ours[f"blocks.{i}.temporal_fc.weight"].abs().sum() == 0
    assert ours["time_embed"].abs().sum() == 0
    grid = state["pos_embed"][0, 1:].reshape(2, 2, D)
    expected = grid.repeat_interleave(2, 0).repeat_interleave(2, 1).reshape(16, D)
    torch.testing.assert_close(ours["pos_embed"][0, 1:], expected)
    torch.testing.assert_close(ours["pos_embed"][0, 0], state["pos_embed"][0, 0])


@pytest.mark.parametrize("mixer", CAUSAL_MIXERS)
def test_crvit_and_a_causal_mixer_load_the_same_checkpoint(tmp_path: Path, mixer: str) -> None:
    state = timesformer_state(grid=4, frames=4)
    path = save_pyth(tmp_path / "k400.pyth", state)
    crvit = build(CRViT, n_frames=4, pretrained=str(path))
    torch.testing.assert_close(
        crvit.state_dict()["blocks.0.temporal_attn.qkv.weight"], state["blocks.0.temporal_attn.qkv.weight"]
    )
    causal = build(n_frames=4, time_mixer=mixer, pretrained=str(path))
    ours = causal.state_dict()
    torch.testing.assert_close(
        ours["blocks.1.temporal_attn.attn.proj.qkv.weight"], state["blocks.1.temporal_attn.qkv.weight"]
    )
    torch.testing.assert_close(
        ours["blocks.1.temporal_attn.attn.proj.out_proj.weight"], state["blocks.1.temporal_attn.proj.weight"]
    )


def test_wrong_width_is_one_clear_error(tmp_path: Path) -> None:
    state = timesformer_state(grid=4, frames=4)
    path = save_pyth(tmp_path / "k400.pyth", state)
    with pytest.raises(DataError, match=r"model\.pretrained=.*does not fit the model") as caught:
        TimeSformer(
            img_size=32,
            patch_size=PATCH,
            d_model=2 * D,
            n_layers=DEPTH,
            n_heads=HEADS,
            d_ff=4 * D,
            n_frames=4,
            pretrained=str(path),
        )
    assert "\n" not in str(caught.value)
    with pytest.raises(DataError, match="no such file"):
        build(n_frames=4, pretrained=str(tmp_path / "absent.pyth"))


def test_lightning_checkpoint_gives_its_backbone_weights(tmp_path: Path) -> None:
    """A ``task=video/*`` run's checkpoint: ``state_dict`` holds ``backbone.<key>`` and the task's head."""
    stage_one = build(n_frames=4)
    state = {f"backbone.{k}": v for k, v in stage_one.state_dict().items()}
    state |= {"head.weight": torch.randn(31, D), "head.bias": torch.randn(31)}
    torch.save(
        {"pytorch-lightning_version": "2.5.0", "epoch": 14, "state_dict": state}, tmp_path / "last.ckpt"
    )
    stage_two = build(CRViT, n_frames=4, pretrained=str(tmp_path / "last.ckpt"))
    ours = stage_two.state_dict()
    for key, value in stage_one.state_dict().items():
        torch.testing.assert_close(ours[key], value, rtol=0, atol=0)
    torch.save(
        {"pytorch-lightning_version": "2.5.0", "state_dict": {"head.weight": torch.zeros(1)}},
        tmp_path / "x.ckpt",
    )
    with pytest.raises(DataError, match=r"without backbone\.\* weights"):
        build(CRViT, n_frames=4, pretrained=str(tmp_path / "x.ckpt"))

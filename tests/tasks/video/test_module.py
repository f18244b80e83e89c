"""The video module's losses and test-view ensembles, against hand computations over the head's logits."""

from __future__ import annotations

import functools

import pytest
import torch
import torch.nn.functional as F

from recurrent_attention.models import Aaren
from recurrent_attention.tasks.video.encoders import CRViT, TimeSformer, VideoEncoder
from recurrent_attention.tasks.video.module import VideoClassificationModule
from tests.helpers.protocols import protocol

K = 5


def module(**kwargs) -> VideoClassificationModule:
    torch.manual_seed(0)
    backbone = CRViT(
        img_size=16,
        patch_size=8,
        n_frames=4,
        d_model=8,
        n_layers=1,
        n_heads=2,
        d_ff=16,
        frame_split="split",
        rnn="gru",
    )
    model = VideoClassificationModule(
        backbone, functools.partial(torch.optim.SGD, lr=0.1), n_classes=K, **kwargs
    ).eval()
    torch.nn.init.normal_(model.head.weight, std=1.0)  # logits of both signs
    torch.nn.init.normal_(model.head.bias, std=1.0)
    return model


def test_the_module_takes_video_encoders_only() -> None:
    """Both encoders keep the VideoEncoder interface; a sequence backbone is one line naming the fix."""
    sizes = {"img_size": 16, "patch_size": 8, "n_frames": 4, "d_model": 8, "n_layers": 1, "n_heads": 2}
    for encoder in (TimeSformer(**sizes, d_ff=16), CRViT(**sizes, d_ff=16)):
        assert isinstance(encoder, VideoEncoder)
    optimizer = functools.partial(torch.optim.SGD, lr=0.1)
    with pytest.raises(ValueError, match="needs a video model: model=timesformer or model=cr_vit"):
        VideoClassificationModule(Aaren(8, 2, 1, 16), optimizer, n_classes=K)


@pytest.mark.parametrize("iteration_loss", ["mean", "last"])
def test_iteration_loss(iteration_loss: str) -> None:
    model = module(iteration_loss=iteration_loss)
    batch = {"video": torch.randn(3, 3, 4, 16, 16), "y": torch.tensor([0, 3, 4])}
    first, second = (F.cross_entropy(logits, batch["y"]) for logits in model(batch["video"]))
    assert abs(float((first - second).detach())) > 1e-3  # the two choices differ here
    expected = (first + second) / 2 if iteration_loss == "mean" else second
    torch.testing.assert_close(model.training_step(batch, 0), expected)


def views_and_logits(model: VideoClassificationModule) -> tuple[torch.Tensor, torch.Tensor]:
    video = torch.randn(4, 3, 3, 4, 16, 16)  # 4 clips x 3 views
    per_view = torch.stack([model(video[:, v])[-1] for v in range(3)], dim=1)  # (4, 3, K)
    return video, per_view


@pytest.mark.parametrize("ensemble", ["max", "mean"])
def test_default_ensemble_combines_every_views_probabilities(ensemble: str) -> None:
    model = module(view_ensemble=ensemble)
    video, logits = views_and_logits(model)
    probabilities = logits.softmax(-1)
    combined = probabilities.amax(1) if ensemble == "max" else probabilities.mean(1)
    expected = (combined / combined.sum(-1, keepdim=True)).log()
    torch.testing.assert_close(model.log_probabilities(video), expected)


def test_reference_ensemble_is_pivit_max_of_raw_logits_into_a_zero_buffer() -> None:
    """PI-ViT's TestMeter: ``preds = max(preds, view logits)`` from ``preds = 0`` per clip."""
    model = module(view_ensemble="max", rules=protocol("video", "reference"))
    video, logits = views_and_logits(model)
    buffer = torch.zeros(4, K)
    for v in range(3):
        buffer = torch.maximum(buffer, logits[:, v])
    assert (buffer == 0).any()  # some class below zero in every view: the buffer's zero shows
    torch.testing.assert_close(model.log_probabilities(video), buffer.log_softmax(-1))

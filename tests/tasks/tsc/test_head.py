"""Padding never changes a case's logits; the heads equal a hand computation from the unpadded case."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from recurrent_attention.models.aaren import Aaren
from recurrent_attention.models.transformer import Transformer
from recurrent_attention.tasks.tsc.head import Classifier

BACKBONES = {"transformer": Transformer, "aaren": Aaren}
MAX_LEN, CHANNELS, CLASSES = 10, 3, 4


def classifier(name: str, head: str) -> Classifier:
    torch.manual_seed(0)
    backbone = BACKBONES[name](d_model=16, n_heads=2, n_layers=2, d_ff=32, dropout=0.1)
    return Classifier(backbone, CHANNELS, CLASSES, MAX_LEN, head=head, dropout=0.1).double().eval()


def padded(case: torch.Tensor, filler: float) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.full((1, MAX_LEN, CHANNELS), filler, dtype=torch.float64)
    x[0, : len(case)] = case
    mask = torch.zeros(1, MAX_LEN, dtype=torch.bool)
    mask[0, : len(case)] = True
    return x, mask


@pytest.mark.parametrize("name", sorted(BACKBONES))
def test_flatten_head_equals_unpadded_computation(name: str) -> None:
    model = classifier(name, "flatten")
    case = torch.randn(6, CHANNELS, dtype=torch.float64)
    hidden, _ = model.backbone(model.embed(case.unsqueeze(0)))  # the unpadded case only
    features = torch.zeros(1, MAX_LEN, model.backbone.d_model, dtype=torch.float64)
    features[0, :6] = F.gelu(hidden[0])
    expected = features.flatten(1) @ model.projection.weight.T + model.projection.bias
    with torch.no_grad():
        for filler in (0.0, 123.0):  # whatever sits in the padding
            torch.testing.assert_close(model(*padded(case, filler)), expected, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("name", sorted(BACKBONES))
def test_last_token_head_equals_unpadded_and_streaming(name: str) -> None:
    model = classifier(name, "last")
    cases = [torch.randn(n, CHANNELS, dtype=torch.float64) for n in (4, 10, 7)]
    batch = [padded(c, 50.0) for c in cases]
    x, mask = torch.cat([b[0] for b in batch]), torch.cat([b[1] for b in batch])
    with torch.no_grad():
        logits = model(x, mask)
        for i, case in enumerate(cases):
            hidden, _ = model.backbone(model.embed(case.unsqueeze(0)))
            expected = F.gelu(hidden[0, -1])  # the head by hand: GELU, linear
            expected = expected @ model.projection.weight.T + model.projection.bias
            torch.testing.assert_close(logits[i], expected, rtol=1e-10, atol=1e-10)
            # streaming: one observation at a time through backbone.step, classify after the last
            state = model.backbone.init_state(1, dtype=torch.float64)
            for t in range(len(case)):
                y_t, state = model.backbone.step(
                    model.embed(case[t : t + 1].unsqueeze(0), start=t)[:, 0], state
                )
            torch.testing.assert_close(model.classify(y_t)[0], logits[i], rtol=1e-8, atol=1e-8)


def test_embedding_rejects_cases_longer_than_max_len() -> None:
    with pytest.raises(ValueError, match=r"task\.max_len=10"):
        classifier("transformer", "flatten").embed(torch.zeros(1, 11, CHANNELS, dtype=torch.float64))


def test_tslib_conv_embedding_is_a_circular_kernel3_convolution() -> None:
    """TSLib's TokenEmbedding by hand: step t reads steps t-1, t, t+1 of the padded case, wrapping
    around its ends, with no bias; the sinusoidal positions are added after it."""
    torch.manual_seed(0)
    backbone = Aaren(d_model=16, n_heads=2, n_layers=1, d_ff=32, dropout=0.0)
    model = Classifier(backbone, CHANNELS, CLASSES, MAX_LEN, embedding="tslib_conv", dropout=0.0).double()
    x = torch.randn(2, MAX_LEN, CHANNELS, dtype=torch.float64)
    weight = model.value_embedding.conv.weight  # (d_model, channels, 3)
    expected = torch.stack(
        [
            sum(x[:, (t + k - 1) % MAX_LEN] @ weight[:, :, k].T for k in range(3)) + model.positions[t]
            for t in range(MAX_LEN)
        ],
        dim=1,
    )
    torch.testing.assert_close(model.embed(x), expected, rtol=1e-12, atol=1e-12)
    assert model.value_embedding.conv.bias is None


def test_tslib_conv_embedding_refuses_to_stream() -> None:
    model = Classifier(
        Aaren(d_model=16, n_heads=2, n_layers=1, d_ff=32), CHANNELS, CLASSES, MAX_LEN, embedding="tslib_conv"
    )
    with pytest.raises(ValueError, match="cannot stream"):
        model.embed(torch.zeros(1, 1, CHANNELS), start=3)

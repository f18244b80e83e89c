"""The divided space-time block against a naive loop over the official token layout, and CR-ViT's memory."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from torch import Tensor

from recurrent_attention.tasks.video.divided_block import CAUSAL_MIXERS, DividedBlock
from recurrent_attention.tasks.video.encoders import CRViT, TimeSformer

D, HEADS, S, T, B = 8, 2, 4, 3, 2


def naive_attention(
    tokens: Tensor, queries: int, qkv_w: Tensor, qkv_b: Tensor, proj_w: Tensor, proj_b: Tensor
):
    """Softmax attention of the last ``queries`` of ``tokens (L, D)`` over all of them, head by head."""
    q, k, v = (tokens @ qkv_w.T + qkv_b).split(D, dim=-1)
    d_head = D // HEADS
    out = torch.zeros(queries, D, dtype=tokens.dtype)
    for h in range(HEADS):
        cols = slice(h * d_head, (h + 1) * d_head)
        for i in range(queries):
            query = q[len(tokens) - queries + i, cols]
            weights = torch.softmax(
                torch.stack([query @ k[j, cols] for j in range(len(tokens))]) / math.sqrt(d_head), 0
            )
            out[i, cols] = sum(weights[j] * v[j, cols] for j in range(len(tokens)))
    return out @ proj_w.T + proj_b


def naive_block(block: DividedBlock, x: Tensor, memory: Tensor | None = None) -> Tensor:
    """Official order on ``x (B, 1 + S·T, D)`` laid out (h w t): time per location (no class token),
    ``temporal_fc``, residual; space per frame with the class token, its outputs averaged; MLP."""
    ta, sa = block.temporal_attn, block.attn
    out = x.clone()
    for b in range(B):
        xt = x[b, 1:].clone()
        for s in range(S):
            rows = slice(s * T, (s + 1) * T)
            tokens = block.temporal_norm1(x[b, 1:][rows])
            if memory is not None:
                tokens = torch.cat([block.temporal_norm1(memory[b : b + 1]), tokens])
            mixed = naive_attention(tokens, T, ta.qkv.weight, ta.qkv.bias, ta.proj.weight, ta.proj.bias)
            xt[rows] = x[b, 1:][rows] + block.temporal_fc(mixed)
        cls_outputs, res = [], torch.zeros_like(xt)
        for t in range(T):
            frame_rows = [s * T + t for s in range(S)]
            tokens = block.norm1(torch.cat([x[b, :1], xt[frame_rows]]))
            mixed = naive_attention(tokens, S + 1, sa.qkv.weight, sa.qkv.bias, sa.proj.weight, sa.proj.bias)
            cls_outputs.append(mixed[0])
            res[frame_rows] = mixed[1:]
        y = torch.cat([x[b, :1] + torch.stack(cls_outputs).mean(0, keepdim=True), xt + res])
        out[b] = y + block.mlp(block.norm2(y))
    return out


def official_layout(cls: Tensor, patches: Tensor) -> Tensor:
    """``cls (B, D)``, ``patches (B, S, T, D)`` -> ``(B, 1 + S·T, D)`` in the official (h w t) order."""
    return torch.cat([cls[:, None], patches.reshape(B, S * T, D)], dim=1)


@pytest.fixture
def block() -> DividedBlock:
    torch.manual_seed(0)
    block = DividedBlock(D, HEADS, 16, drop_path=0.0).double().eval()
    for p in block.parameters():  # temporal_fc starts at zero: give every part a say
        torch.nn.init.normal_(p, std=0.3)
    return block


@pytest.mark.parametrize("with_memory", [False, True])
def test_divided_block_matches_naive_reference(block: DividedBlock, with_memory: bool) -> None:
    cls, patches = torch.randn(B, D, dtype=torch.float64), torch.randn(B, S, T, D, dtype=torch.float64)
    memory = torch.randn(B, D, dtype=torch.float64) if with_memory else None
    got_cls, got_patches = block(cls, patches, memory)
    expected = naive_block(block, official_layout(cls, patches), memory)
    torch.testing.assert_close(official_layout(got_cls, got_patches), expected)


def test_class_token_takes_no_part_in_time_attention(block: DividedBlock) -> None:
    """Changing the class token changes patch outputs only through space attention, never time."""
    patches = torch.randn(B, S, T, D, dtype=torch.float64)
    block.attn.qkv.weight.data.zero_()
    block.attn.qkv.bias.data.zero_()  # space attention: uniform weights over zero values
    block.attn.proj.weight.data.zero_()
    _, a = block(torch.randn(B, D, dtype=torch.float64), patches)
    _, b = block(torch.randn(B, D, dtype=torch.float64), patches)
    torch.testing.assert_close(a, b)


def test_temporal_fc_is_zero_initialised() -> None:
    model = TimeSformer(img_size=16, patch_size=8, n_frames=2, d_model=D, n_layers=3, n_heads=HEADS, d_ff=16)
    for blk in model.blocks:
        assert blk.temporal_fc.weight.abs().sum() == 0 and blk.temporal_fc.bias.abs().sum() == 0


def test_the_causal_mixers_are_aaren_and_linear_attention() -> None:
    assert set(CAUSAL_MIXERS) == {"aaren", "linear"}


def causal_timesformer(mixer: str, n_frames: int = 3) -> TimeSformer:
    torch.manual_seed(0)
    model = TimeSformer(
        img_size=16, patch_size=8, n_frames=n_frames, d_model=D, n_layers=2, n_heads=HEADS, d_ff=16,
        time_mixer=mixer,
    )  # fmt: skip
    for p in model.parameters():  # every part, temporal_fc and time embedding included, has a say
        torch.nn.init.normal_(p, std=0.3)
    return model.double().eval()


@pytest.mark.parametrize("mixer", CAUSAL_MIXERS)
@pytest.mark.parametrize("changed", [0, 2, 4])
def test_a_causal_mixer_makes_the_whole_network_causal(changed: int, mixer: str) -> None:
    """Perturb frame ``changed`` of 5 (the time embedding holds 3): every output before it stays
    bit for bit, after the last block and the final norm; its own outputs move."""
    model = causal_timesformer(mixer)
    video = torch.randn(2, 3, 5, 16, 16, dtype=torch.float64)
    other = video.clone()
    other[:, :, changed] += 1.0
    cls_a, patches_a = model.run_blocks(model.initial_cls(2, 5), model.embed(video))
    cls_b, patches_b = model.run_blocks(model.initial_cls(2, 5), model.embed(other))
    torch.testing.assert_close(patches_a[:, :, :changed], patches_b[:, :, :changed], rtol=0, atol=0)
    torch.testing.assert_close(cls_a[:, :changed], cls_b[:, :changed], rtol=0, atol=0)
    features_a, features_b = model.frame_features(video), model.frame_features(other)
    torch.testing.assert_close(features_a[:, :changed], features_b[:, :changed], rtol=0, atol=0)
    assert (features_a[:, changed] - features_b[:, changed]).abs().min() > 1e-6
    torch.testing.assert_close(model(video)[0], features_a[:, -1])


@pytest.mark.parametrize("mixer", CAUSAL_MIXERS)
def test_step_equals_the_parallel_pass_with_a_state_of_constant_size(mixer: str) -> None:
    model = causal_timesformer(mixer)
    video = torch.randn(2, 3, 5, 16, 16, dtype=torch.float64)
    expected = model.frame_features(video)
    state = model.init_state(2, video)
    sizes = []
    for t in range(5):
        with torch.no_grad():  # a stream's step: the mixers' deployed (lean) steps
            features, state = model.step(video[:, :, t], state)
        torch.testing.assert_close(features, expected[:, t])
        sizes.append(sum(x.numel() for block in state.blocks for x in block) + state.feature_sum.numel())
    assert len(set(sizes)) == 1 and state.frames == 5
    assert all(block.temporal_attn.stepper._mix is not None for block in model.blocks)


@pytest.mark.parametrize(("cls", "mixer"), [(TimeSformer, "softmax"), (CRViT, "aaren"), (CRViT, "linear")])
def test_only_the_causal_timesformer_steps(cls: type, mixer: str) -> None:
    model = cls(
        img_size=16, patch_size=8, n_frames=2, d_model=D, n_layers=1, n_heads=HEADS, d_ff=16, time_mixer=mixer
    )
    causal = r"a causal time mixer \(aaren, linear\) as model\.time_mixer"
    with pytest.raises(ValueError, match=causal):
        model.init_state(1, torch.zeros(1))
    with pytest.raises(ValueError, match=causal):
        model.frame_features(torch.zeros(1, 3, 2, 16, 16))


def branch_block(keep: str) -> DividedBlock:
    """A block in training mode, drop-path 0.5, whose only non-zero residual branch is ``keep``."""
    torch.manual_seed(0)
    block = DividedBlock(D, HEADS, 16, drop_path=0.5).double().train()
    for p in block.parameters():
        torch.nn.init.normal_(p, std=0.3)
    silenced = {"time": [block.temporal_fc], "space": [block.attn.proj], "mlp": [block.mlp.fc2]}
    for name, modules in silenced.items():
        if name != keep:
            for module in modules:
                torch.nn.init.zeros_(module.weight)
                torch.nn.init.zeros_(module.bias)
    torch.nn.init.zeros_(block.temporal_fc.bias)  # the drop comes before temporal_fc, as officially
    return block


def test_mlp_drop_path_is_one_draw_per_sample_for_class_token_and_patches() -> None:
    """The official block runs the MLP branch on the joined tokens ``(B, 1 + S·T, D)``: one mask per
    sample; a sample's class token and patches are kept or dropped together."""
    block = branch_block("mlp")
    cls, patches = torch.randn(64, D, dtype=torch.float64), torch.randn(64, S, T, D, dtype=torch.float64)
    out_cls, out_patches = block(cls, patches)
    cls_kept = (out_cls - cls).abs().amax(-1) > 0
    patches_kept = (out_patches - patches).abs().flatten(1).amax(-1) > 0
    assert torch.equal(cls_kept, patches_kept) and 0 < int(cls_kept.sum()) < 64
    expected = cls + 2.0 * block.mlp(block.norm2(cls))  # kept: scaled by 1 / (1 - 0.5)
    torch.testing.assert_close(out_cls[cls_kept], expected[cls_kept])


def test_time_drop_path_is_one_draw_per_patch_location() -> None:
    """The official time branch acts on ``(B·H·W, T, D)``: one mask per sample and location."""
    block = branch_block("time")
    cls, patches = torch.randn(8, D, dtype=torch.float64), torch.randn(8, S, T, D, dtype=torch.float64)
    _, out = block(cls, patches)
    kept = (out - patches).abs().amax(-1) > 0  # (B, S, T)
    assert torch.equal(kept, kept[:, :, :1].expand_as(kept))  # all frames of a location alike
    per_sample = kept[:, :, 0].float().mean(1)
    assert ((per_sample > 0) & (per_sample < 1)).any()  # locations of one sample differ


def small_crvit(**kwargs) -> CRViT:
    torch.manual_seed(0)
    model = CRViT(
        img_size=16, patch_size=8, n_frames=4, d_model=D, n_layers=2, n_heads=HEADS, d_ff=16, **kwargs
    )
    for p in model.blocks.parameters():  # ViT's 0.02 init makes attention near uniform: sharpen it
        torch.nn.init.normal_(p, std=0.3)
    return model.eval()


@pytest.mark.parametrize("rnn", ["gru", "gru_eq4", "ncgru"])
def test_memory_is_zero_in_iteration_one_and_made_by_the_rnn_after(rnn: str) -> None:
    model = small_crvit(rnn=rnn, frame_split="split")
    seen: list[Tensor] = []
    model.blocks[0].register_forward_pre_hook(lambda module, args: seen.append(args[2].clone()))
    video = torch.randn(2, 3, 4, 16, 16)
    model(video)
    assert len(seen) == 2 and torch.equal(seen[0], torch.zeros(2, D))
    first_half = model.embed(video[:, :, :2], 0)
    _, patches = model.run_blocks(model.initial_cls(2), first_half, torch.zeros(2, D))
    _, expected = model.memory_rnn(model.norm(patches).mean(dim=1))
    torch.testing.assert_close(seen[1], expected)
    assert seen[1].abs().sum() > 0


@pytest.mark.parametrize("frame_split", ["split", "repeat"])
def test_memory_changes_only_the_second_iteration(frame_split: str) -> None:
    model = small_crvit(frame_split=frame_split)
    other = copy.deepcopy(model)
    for p in other.memory_rnn.parameters():
        torch.nn.init.normal_(p, std=0.5)
    video = torch.randn(2, 3, 4, 16, 16)
    first, second = model(video)
    other_first, other_second = other(video)
    torch.testing.assert_close(first, other_first)  # iteration 1: zero memory, whatever the RNN
    # an unused memory would leave iteration 2 bit-for-bit equal
    assert (second[:, D:] - other_second[:, D:]).abs().max() > 1e-4
    assert torch.equal(first[:, :D], first[:, D:])  # [cls, cls] in iteration 1
    torch.testing.assert_close(second[:, :D], first[:, D:])  # [prev cls, cls] in iteration 2


def test_bptt_false_stops_gradient_into_iteration_one() -> None:
    for bptt, expect_grad in ((True, True), (False, False)):
        model = small_crvit(bptt=bptt, frame_split="split")
        video = torch.randn(1, 3, 4, 16, 16, requires_grad=True)
        _, second = model(video)
        (second[:, D:] * torch.randn(D)).sum().backward()  # a plain sum of a LayerNorm output is constant
        grad_first_frames = video.grad[:, :, :2].abs().sum()
        assert (grad_first_frames > 0) == expect_grad


def test_vit_base_sizes_give_the_paper_parameter_count() -> None:
    """TimeSformer at ViT-B/16, 16 frames, 224 crop: 121.26M without the 31-class head (~121.3M with)."""
    model = TimeSformer(n_frames=16)
    assert sum(p.numel() for p in model.parameters()) + 768 * 31 + 31 == 121_288_735


def block_inputs(model: CRViT, index: int) -> list[tuple[Tensor, Tensor, Tensor | None]]:
    """Record ``(cls, patches, memory)`` each time block ``index`` runs (once per iteration)."""
    seen: list[tuple[Tensor, Tensor, Tensor | None]] = []

    def hook(module, args) -> None:
        seen.append(tuple(None if a is None else a.clone() for a in args))

    model.blocks[index].register_forward_pre_hook(hook)
    return seen


def test_iteration_two_class_token_carries_iteration_one_output() -> None:
    """Iteration 2's class token starts as the learned token (with its position) plus iteration 1's
    output class token before the final LayerNorm."""
    model = small_crvit()
    first_in = block_inputs(model, 0)
    last_out: list[Tensor] = []
    model.blocks[-1].register_forward_hook(lambda module, args, out: last_out.append(out[0].clone()))
    model(torch.randn(2, 3, 4, 16, 16))
    learned = model.cls_token[0, 0] + model.pos_embed[0, 0]
    torch.testing.assert_close(first_in[0][0], learned.expand(2, -1))
    torch.testing.assert_close(first_in[1][0], learned + last_out[0])


def test_iteration_two_frames_carry_their_place_in_the_clip() -> None:
    """With frame_split=split, iteration 2 sees frames 2..3 with time embeddings 2..3 (not 0..1)."""
    model = small_crvit(frame_split="split")
    torch.nn.init.normal_(model.time_embed, std=1.0)
    seen = block_inputs(model, 0)
    video = torch.randn(2, 3, 4, 16, 16)
    model(video)
    patches = model.patch_embed(video[:, :, 2:])  # (B, S, 2, D), nothing added yet
    expected = patches + model.pos_embed[0, 1:, None] + model.time_embed[0, None, 2:4]
    torch.testing.assert_close(seen[1][1], expected)


def test_memory_reaches_only_blocks_from_memory_from_block() -> None:
    model = small_crvit(memory_from_block=1)
    before, after = block_inputs(model, 0), block_inputs(model, 1)
    model(torch.randn(2, 3, 4, 16, 16))
    assert [m is None for _, _, m in before] == [True, True]
    assert torch.equal(after[0][2], torch.zeros(2, D)) and after[1][2].abs().sum() > 0

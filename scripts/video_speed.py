#!/usr/bin/env python
"""Video models on this machine: parameters, training and inference clips/s, CR-ViT vs TimeSformer.

Both models are timed in the same run on the same random clips (ratios are what carries over to
other machines). ``--size vit-b16``: ViT-B/16, 16 frames at 224 (the paper's size; slow on a CPU,
so few clips); ``--size synthetic``: the size of experiment=video/synthetic_cpu.

    OMP_NUM_THREADS=1 python scripts/video_speed.py --size synthetic
    python scripts/video_speed.py --size vit-b16 --batch 1 --repeats 2

``--stream``: TimeSformer with ``time_mixer=aaren`` run frame by frame (``step``: ms per frame, its
state's size) against its parallel pass over the whole clip (ms per clip and per frame), and the
largest difference between the two outputs.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from recurrent_attention.tasks.video.encoders import CRViT, TimeSformer

SIZES = {
    "vit-b16": {
        "img_size": 224,
        "patch_size": 16,
        "n_frames": 16,
        "d_model": 768,
        "n_layers": 12,
        "n_heads": 12,
        "d_ff": 3072,
    },
    "synthetic": {
        "img_size": 32,
        "patch_size": 8,
        "n_frames": 8,
        "d_model": 64,
        "n_layers": 2,
        "n_heads": 4,
        "d_ff": 128,
    },
}


def clips_per_second(step, batch: int, repeats: int) -> float:
    step()  # warm-up
    start = time.perf_counter()
    for _ in range(repeats):
        step()
    return batch * repeats / (time.perf_counter() - start)


def measure(model: torch.nn.Module, size: dict, n_classes: int, batch: int, repeats: int) -> dict[str, float]:
    head = torch.nn.Linear(model.feature_dim, n_classes)
    params = sum(p.numel() for p in [*model.parameters(), *head.parameters()])
    video = torch.randn(batch, 3, size["n_frames"], size["img_size"], size["img_size"])
    target = torch.randint(0, n_classes, (batch,))
    optimizer = torch.optim.SGD([*model.parameters(), *head.parameters()], lr=1e-4, momentum=0.9)

    def train_step() -> None:
        model.train()
        loss = torch.stack([F.cross_entropy(head(f), target) for f in model(video)]).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    @torch.no_grad()
    def inference_step() -> None:
        model.eval()
        head(model(video)[-1])

    return {
        "params": params,
        "train": clips_per_second(train_step, batch, repeats),
        "inference": clips_per_second(inference_step, batch, repeats),
    }


def fastest_ms(call, repeats: int) -> float:
    """The fastest of ``repeats`` timed calls (after a warm-up), in milliseconds."""
    call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return 1000 * min(times)


@torch.no_grad()
def stream(size: dict, batch: int, repeats: int) -> None:
    model = TimeSformer(**size, time_mixer="aaren").eval()
    frames = size["n_frames"]
    video = torch.randn(batch, 3, frames, size["img_size"], size["img_size"])

    def frame_by_frame() -> tuple[list[torch.Tensor], object]:
        state, outputs = model.init_state(batch, video), []
        for t in range(frames):
            features, state = model.step(video[:, :, t], state)
            outputs.append(features)
        return outputs, state

    outputs, state = frame_by_frame()
    gap = (torch.stack(outputs, 1) - model.frame_features(video)).abs().max().item()
    state_numbers = sum(x.numel() for block in state.blocks for x in block) + state.feature_sum.numel()
    parallel = fastest_ms(lambda: model(video), repeats)
    stepped = fastest_ms(frame_by_frame, repeats) / frames
    print(
        f"stream: step {stepped:.2f} ms/frame; parallel pass {parallel:.2f} ms/clip of {frames} frames "
        f"= {parallel / frames:.2f} ms/frame; step / (parallel per frame) {stepped * frames / parallel:.2f}; "
        f"state {state_numbers:,d} numbers whatever the frames seen; max |step - parallel| {gap:.1e}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="synthetic")
    parser.add_argument("--classes", type=int, default=31)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--stream", action="store_true", help="time the causal model's frame-by-frame step")
    args = parser.parse_args()
    size = SIZES[args.size]
    torch.manual_seed(0)
    print(f"size {args.size}: {size}, batch {args.batch}, torch threads {torch.get_num_threads()}")
    if args.stream:
        stream(size, args.batch, args.repeats)
        return
    results = {}
    for name, cls in (("timesformer", TimeSformer), ("cr_vit", CRViT)):
        results[name] = measure(cls(**size), size, args.classes, args.batch, args.repeats)
        r = results[name]
        print(
            f"{name:12s} params {r['params']:>12,d}  train {r['train']:8.3g} clips/s  "
            f"inference {r['inference']:8.3g} clips/s"
        )
    base, ours = results["timesformer"], results["cr_vit"]
    print(
        f"cr_vit / timesformer: params {ours['params'] / base['params']:.4f}, "
        f"train speed {ours['train'] / base['train']:.2f}, "
        f"inference speed {ours['inference'] / base['inference']:.2f}"
    )


if __name__ == "__main__":
    main()

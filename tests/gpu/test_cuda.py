"""The GPU's side of the contracts, run in a ``verify`` window (``pytest -m gpu``; skipped without CUDA).

The CPU suite holds every path and backbone to independent truths on the CPU; these hold the same
code on CUDA, where other kernels run (cuBLAS, flash SDPA, bf16 autocast): Aaren's three prefix
paths against the naive masked softmax in fp32 and bf16, values and gradients, scores up to 1e4;
every sequence backbone's parallel = step and causality; one ``trainer=gpu`` smoke run per family.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from recurrent_attention.ops import attention_chunked, attention_recurrent, attention_scan
from tests.conftest import ROOT, read_summaries
from tests.helpers.backbones import D_MODEL, build_backbone, sequence_backbones
from tests.helpers.d4rl_files import write_tiny_d4rl
from tests.ops.test_prefix_attention import naive_prefix_attention

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available(), reason="needs a CUDA device (a device-kit verify window)"
    ),
]
PATHS = {"chunked": attention_chunked, "scan": attention_scan, "recurrent": attention_recurrent}
# bf16 holds ~3 significant digits: its inputs are rounded, then every path computes in fp32.
TOLERANCE = {torch.float32: 2e-4, torch.bfloat16: 2e-2}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("scale", [1.0, 1e2, 1e4])
@pytest.mark.parametrize("path", sorted(PATHS))
def test_prefix_paths_match_the_naive_softmax_on_cuda(path: str, scale: float, dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(0)
    scores = (torch.randn(2, 3, 300, generator=gen) * scale).to(dtype)
    values = torch.randn(2, 3, 300, 8, generator=gen).to(dtype)
    truth_s = scores.double().requires_grad_()
    truth_v = values.double().requires_grad_()
    truth = naive_prefix_attention(truth_s, truth_v)
    weights = torch.randn_like(truth).to(dtype).double()  # the upstream gradient a bf16 output receives
    (truth * weights).sum().backward()

    s = scores.cuda().requires_grad_()
    v = values.cuda().requires_grad_()
    out = PATHS[path](s, v)[0]
    (out.double() * weights.cuda()).sum().backward()
    tol = TOLERANCE[dtype]
    torch.testing.assert_close(out.double().cpu(), truth.detach(), rtol=tol, atol=tol)
    torch.testing.assert_close(v.grad.double().cpu(), truth_v.grad, rtol=tol, atol=tol)
    torch.testing.assert_close(s.grad.double().cpu(), truth_s.grad, rtol=tol, atol=tol * scale)


@pytest.mark.parametrize("name", sequence_backbones())
def test_backbone_step_equals_forward_and_is_causal_on_cuda(name: str) -> None:
    model = build_backbone(name).float().cuda()
    x = torch.randn(2, 12, D_MODEL, generator=torch.Generator().manual_seed(1)).cuda()
    with torch.no_grad():
        y, _ = model(x, state=None)
        state = model.init_state(2)
        stepped = []
        for t in range(x.shape[1]):
            y_t, state = model.step(x[:, t], state)
            stepped.append(y_t)
        changed = x.clone()
        changed[:, 7] += 1.0
        y_changed, _ = model(changed, state=None)
    limit = getattr(model, "mem_len", None)
    n = x.shape[1] if limit is None else min(x.shape[1], limit + 1)
    torch.testing.assert_close(torch.stack(stepped, 1)[:, :n], y[:, :n], rtol=1e-4, atol=1e-4)
    assert torch.equal(y_changed[:, :7], y[:, :7])
    assert not torch.allclose(y_changed[:, 7], y[:, 7])


# Video is left out: its clips decode with PyAV, which no device kit carries.
FAMILY_SMOKE = {
    "tsf": ["task=tsf/etth1"],
    "tsc": ["task=tsc/japanesevowels"],
    "ef": ["task=ef/mimic"],
    "lm": ["task=lm/ptb", "model=crt"],
    "rl": ["task=rl/hopper_medium", "task.eval_episodes=2", "task.eval_envs=2", "task.max_episode_steps=50"],
}


@pytest.mark.parametrize("family", sorted(FAMILY_SMOKE))
def test_one_gpu_smoke_run_per_family(family: str, tmp_path) -> None:
    overrides = FAMILY_SMOKE[family]
    if family == "rl":  # a tiny file in D4RL's schema: the smoke run's data
        overrides = [*overrides, f"task.datamodule.path={write_tiny_d4rl(tmp_path / 'hopper.hdf5')}"]
    # A fresh interpreter, not the suite's forkserver: a process forked after CUDA's start cannot use it.
    argv = [sys.executable, "train.py", "preset=smoke", "trainer=gpu", f"paths.output_dir={tmp_path / 'out'}"]
    done = subprocess.run([*argv, *overrides], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    (summary,) = read_summaries(tmp_path / "out")
    assert summary["device"].startswith(torch.cuda.get_device_name(0))
    assert summary["metrics"]

"""The GPU's side of the contracts, on the test device (``tests/gpu/conftest.py``): CUDA in a ``verify``
window, this CPU in the normal suite (so they cannot rot), ``RA_GPU_TEST_DEVICE`` to choose.

The CPU suite holds every path and backbone to independent truths on the CPU; these hold the same
code on CUDA, where other kernels run (cuBLAS, flash SDPA, bf16 autocast): Aaren's three prefix
paths against the naive masked softmax in fp32 and bf16, and under bf16 autocast over several
chunks, values and gradients, scores up to 1e4; every sequence backbone's parallel = step (its
state built on the model's device) and causality; every sequence backbone compiled whole
(``fullgraph``), forward and backward equal to eager; a ``trainer=gpu`` smoke run per family.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from recurrent_attention.ops import attention_chunked, attention_recurrent, attention_scan
from recurrent_attention.ops.prefix_attention import cumulative_chunk_size
from tests.conftest import ROOT, read_summaries, run_train
from tests.gpu.conftest import explicitly_chosen, needs_values
from tests.helpers.backbones import D_MODEL, build_backbone, sequence_backbones
from tests.helpers.d4rl_files import write_tiny_d4rl
from tests.ops.test_prefix_attention import naive_prefix_attention

pytestmark = pytest.mark.gpu
PATHS = {"chunked": attention_chunked, "scan": attention_scan, "recurrent": attention_recurrent}
# bf16 holds ~3 significant digits: its inputs are rounded, then every path computes in fp32.
TOLERANCE = {torch.float32: 2e-4, torch.bfloat16: 2e-2}


def naive_truth(scores: torch.Tensor, values: torch.Tensor, seed: int):
    """The naive softmax in float64 on the CPU: its output, the upstream gradient it is given, and
    the gradients that gradient sends to scores and values."""
    truth_s = scores.double().requires_grad_()
    truth_v = values.double().requires_grad_()
    truth = naive_prefix_attention(truth_s, truth_v)
    weights = torch.randn(truth.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    (truth * weights).sum().backward()
    return truth.detach(), weights, truth_s.grad, truth_v.grad


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("scale", [1.0, 1e2, 1e4])
@pytest.mark.parametrize("path", sorted(PATHS))
def test_prefix_paths_match_the_naive_softmax_on_the_device(
    path: str, scale: float, dtype: torch.dtype, device: torch.device
) -> None:
    needs_values(device)
    gen = torch.Generator().manual_seed(0)
    scores = (torch.randn(2, 3, 300, generator=gen) * scale).to(dtype)
    values = torch.randn(2, 3, 300, 8, generator=gen).to(dtype)
    truth, weights, grad_s, grad_v = naive_truth(scores, values, seed=1)
    weights = weights.to(dtype).double()  # the upstream gradient a bf16 output receives

    s = scores.to(device).requires_grad_()
    v = values.to(device).requires_grad_()
    out = PATHS[path](s, v)[0]
    (out.double() * weights.to(device)).sum().backward()
    tol = TOLERANCE[dtype]
    torch.testing.assert_close(out.double().cpu(), truth, rtol=tol, atol=tol)
    torch.testing.assert_close(v.grad.double().cpu(), grad_v, rtol=tol, atol=tol)
    torch.testing.assert_close(s.grad.double().cpu(), grad_s, rtol=tol, atol=tol * scale)


# Longer than one chunk of the chunked path's default (1024 tokens at most, then 512), so that its
# scan over chunk summaries runs under autocast too, as it does in a bf16-mixed run of long inputs.
AUTOCAST_N = 1100


@pytest.mark.parametrize("scale", [1.0, 1e2])
@pytest.mark.parametrize("path", sorted(PATHS))
def test_prefix_paths_match_the_naive_softmax_under_bf16_autocast(
    path: str, scale: float, device: torch.device
) -> None:
    """A ``bf16-mixed`` run: scores and values come out of linear layers in bf16 inside autocast,
    the path runs there, and the backward runs after it (as Lightning runs it)."""
    needs_values(device)
    assert cumulative_chunk_size(AUTOCAST_N) < AUTOCAST_N  # several chunks
    gen = torch.Generator().manual_seed(2)
    scores = (torch.randn(1, 2, AUTOCAST_N, generator=gen) * scale).bfloat16()
    values = torch.randn(1, 2, AUTOCAST_N, 8, generator=gen).bfloat16()
    truth, weights, grad_s, grad_v = naive_truth(scores, values, seed=3)

    s = scores.float().to(device).requires_grad_()
    v = values.float().to(device).requires_grad_()
    with torch.autocast(device.type, dtype=torch.bfloat16):
        out = PATHS[path](s.bfloat16(), v.bfloat16())[0]
    assert out.dtype == torch.bfloat16
    (out.double() * weights.bfloat16().double().to(device)).sum().backward()
    tol = TOLERANCE[torch.bfloat16]
    torch.testing.assert_close(out.double().cpu(), truth, rtol=tol, atol=tol)
    torch.testing.assert_close(v.grad.double().cpu(), grad_v, rtol=tol, atol=tol)
    torch.testing.assert_close(s.grad.double().cpu(), grad_s, rtol=tol, atol=tol * scale)


def state_tensors(state: object) -> list[torch.Tensor]:
    """Every tensor inside a backbone's state (tuples, lists, dicts and named tuples, nested)."""
    if isinstance(state, torch.Tensor):
        return [state]
    if isinstance(state, dict):
        state = list(state.values())
    if isinstance(state, (list, tuple)):
        return [t for item in state for t in state_tensors(item)]
    return (
        [t for item in vars(state).values() for t in state_tensors(item)]
        if hasattr(state, "__dict__")
        else []
    )


@pytest.mark.parametrize("name", sequence_backbones())
def test_backbone_step_equals_forward_and_is_causal_on_the_device(name: str, device: torch.device) -> None:
    model = build_backbone(name).float().to(device)
    x = torch.randn(2, 12, D_MODEL, generator=torch.Generator().manual_seed(1)).to(device)
    if device.type == "meta" and name == "crt":
        pytest.skip("CRT's NCGRU checks its inverse's accuracy (a value) at each step: meta holds none")
    with torch.no_grad():
        state = model.init_state(2, device=x.device, dtype=x.dtype)
        stepped = []
        for t in range(x.shape[1]):
            y_t, state = model.step(x[:, t], state)
            stepped.append(y_t)
    assert {t.device for t in [*stepped, *state_tensors(state)]} == {x.device}
    assert torch.stack(stepped, 1).shape == x.shape
    if device.type == "meta":  # the forward's own checks read values (Aaren's late rows)
        return
    with torch.no_grad():
        y, _ = model(x, state=None)
        changed = x.clone()
        changed[:, 7] += 1.0
        y_changed, _ = model(changed, state=None)
    limit = getattr(model, "mem_len", None)
    n = x.shape[1] if limit is None else min(x.shape[1], limit + 1)
    torch.testing.assert_close(torch.stack(stepped, 1)[:, :n], y[:, :n], rtol=1e-4, atol=1e-4)
    assert torch.equal(y_changed[:, :7], y[:, :7])
    assert not torch.allclose(y_changed[:, 7], y[:, 7])


@pytest.mark.parametrize("name", sequence_backbones())
def test_compiled_backbone_equals_eager_forward_and_backward(name: str, device: torch.device) -> None:
    """``torch.compile(backbone, fullgraph=True)``: one graph (no break, no eager fallback), equal to
    eager in values and gradients. On CUDA it is inductor's code; on the CPU ``aot_eager``, which
    traces the same graph and its backward without inductor's C++ build (seconds, not minutes)."""
    needs_values(device)
    backend = "inductor" if device.type == "cuda" else "aot_eager"
    model = build_backbone(name).float().to(device).train()
    x = torch.randn(2, 12, D_MODEL, generator=torch.Generator().manual_seed(4)).to(device)
    torch._dynamo.reset()
    grads = []
    for forward in (model, torch.compile(model, fullgraph=True, backend=backend)):
        torch.manual_seed(0)  # the same dropout masks (dropout is 0 at the test sizes; kept for safety)
        model.zero_grad()
        inputs = x.clone().requires_grad_()
        y, _ = forward(inputs, state=None)
        y.square().sum().backward()
        grads.append(
            (y.detach(), inputs.grad, [p.grad.clone() for p in model.parameters() if p.grad is not None])
        )
    (eager_y, eager_gx, eager_gp), (compiled_y, compiled_gx, compiled_gp) = grads
    torch.testing.assert_close(compiled_y, eager_y, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(compiled_gx, eager_gx, rtol=1e-4, atol=1e-4)
    assert len(compiled_gp) == len(eager_gp)
    for compiled, eager in zip(compiled_gp, eager_gp, strict=True):
        torch.testing.assert_close(compiled, eager, rtol=1e-4, atol=1e-4)


# Video is left out: its clips decode with PyAV, which no device kit carries.
FAMILY_SMOKE = {
    "tsf": ["task=tsf/etth1"],
    "tsc": ["task=tsc/japanesevowels"],
    "ef": ["task=ef/mimic"],
    "lm": ["task=lm/ptb", "model=crt"],
    "rl": ["task=rl/hopper_medium", "task.eval_episodes=2", "task.eval_envs=2", "task.max_episode_steps=50"],
}


# On the CPU one family runs by default (each run costs seconds of the suite's CPU time); all of them
# where the device was named (RA_GPU_TEST_DEVICE=cpu) and on CUDA.
DEFAULT_CPU_FAMILIES = ("tsf",)


def smoke_families() -> list:
    every = not DEFAULT_CPU_FAMILIES or explicitly_chosen() or torch.cuda.is_available()
    return [
        pytest.param(family, marks=pytest.mark.slow)
        for family in sorted(FAMILY_SMOKE)
        if every or family in DEFAULT_CPU_FAMILIES
    ]


@pytest.mark.parametrize("family", smoke_families())
def test_one_gpu_smoke_run_per_family(family: str, device: torch.device, tmp_path) -> None:
    """``trainer=gpu`` on CUDA; on the CPU the same precision (``bf16-mixed``) with ``accelerator=cpu``."""
    needs_values(device)
    overrides = [*FAMILY_SMOKE[family], "preset=smoke"]
    if family == "rl":  # a tiny file in D4RL's schema: the smoke run's data
        overrides = [*overrides, f"task.datamodule.path={write_tiny_d4rl(tmp_path / 'hopper.hdf5')}"]
    if device.type == "cuda":
        # A fresh interpreter, not the suite's forkserver: a process forked after CUDA's start cannot use it.
        argv = [sys.executable, "train.py", "trainer=gpu", f"paths.output_dir={tmp_path / 'out'}", *overrides]
        done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
    else:
        run_train([*overrides, "trainer=cpu", "trainer.precision=bf16-mixed"], tmp_path / "out")
    (summary,) = read_summaries(tmp_path / "out")
    name = torch.cuda.get_device_name(0) if device.type == "cuda" else "CPU"
    assert summary["device"].startswith(name)
    (config,) = (tmp_path / "out").rglob(".hydra/config.yaml")
    assert "precision: bf16-mixed" in config.read_text()
    assert summary["metrics"]

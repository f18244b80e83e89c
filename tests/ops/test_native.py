"""The compiled kernels against their PyTorch forms (values, final states, late rows, gradients),
and what happens when they cannot be used: switched off, a failed build, a tracer."""

from __future__ import annotations

import logging
import os
import shutil
import sys
import warnings
from pathlib import Path
from types import ModuleType

import pytest
import torch

from recurrent_attention.models import Aaren
from recurrent_attention.models.aaren import AarenAttention
from recurrent_attention.ops import attention_chunked, native
from tests.ops.kernels import cumulative_kernels, require_native

TOLERANCE = {torch.float32: {"rtol": 1e-5, "atol": 1e-5}, torch.float64: {"rtol": 1e-12, "atol": 1e-12}}


def kernel_inputs(dtype: torch.dtype, carry: bool, strided: bool, seed: int = 0):
    """Scores (2, 3, 9) and values (2, 3, 9, 5) (as the model's transposed views when ``strided``)
    and a carry (m, u, w) or None, all leaves that want gradients except m."""
    gen = torch.Generator().manual_seed(seed)
    if strided:
        scores = torch.randn(2, 9, 3, generator=gen, dtype=dtype).transpose(1, 2)
        values = torch.randn(2, 9, 3, 5, generator=gen, dtype=dtype).transpose(1, 2)
    else:
        scores = torch.randn(2, 3, 9, generator=gen, dtype=dtype) * 3
        values = torch.randn(2, 3, 9, 5, generator=gen, dtype=dtype)
    state = (None, None, None)
    if carry:
        m = torch.randn(2, 3, generator=gen, dtype=dtype) * 3
        u = (torch.rand(2, 3, generator=gen, dtype=dtype) + 1).requires_grad_()
        w = torch.randn(2, 3, 5, generator=gen, dtype=dtype).requires_grad_()
        state = (m, u, w)
    return scores.requires_grad_(), values.requires_grad_(), state


def kernel_results(compiled: bool, scores, values, state, weights):
    """Outputs, final state, late rows and the gradients of a weighted sum of outputs and state."""
    out, m, u, w, late = cumulative_kernels(compiled)(scores, values, *state)
    loss = (out * weights[0]).sum() + (u * weights[1]).sum() + (w * weights[2]).sum()
    leaves = [scores, values] + [t for t in state[1:] if t is not None]
    return (out, m, u, w), late, torch.autograd.grad(loss, leaves)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("carry", [False, True])
@pytest.mark.parametrize("strided", [False, True])
def test_cumulative_kernel_equals_its_pytorch_form(dtype: torch.dtype, carry: bool, strided: bool) -> None:
    scores, values, state = kernel_inputs(dtype, carry, strided)
    gen = torch.Generator().manual_seed(1)
    weights = [torch.randn(s, generator=gen, dtype=dtype) for s in [(2, 3, 9, 5), (2, 3), (2, 3, 5)]]
    compiled = kernel_results(True, scores, values, state, weights)
    reference = kernel_results(False, scores, values, state, weights)
    assert compiled[1] is None and reference[1] is None
    for got, expected in zip(compiled[0] + compiled[2], reference[0] + reference[2], strict=True):
        torch.testing.assert_close(got, expected, **TOLERANCE[dtype])


def test_cumulative_kernel_splits_rows_over_threads_without_changing_a_bit() -> None:
    """32 rows of 2048 x 16 values (long enough that both threads run at once) are split by
    at::parallel_for over two threads: every row still equals the one-thread result exactly, and
    the PyTorch form to rounding."""
    gen = torch.Generator().manual_seed(3)
    scores = torch.randn(4, 8, 2048, generator=gen, dtype=torch.float64, requires_grad=True)
    values = torch.randn(4, 8, 2048, 16, generator=gen, dtype=torch.float64, requires_grad=True)
    weights = torch.randn(4, 8, 2048, 16, generator=gen, dtype=torch.float64)
    results = []
    threads = torch.get_num_threads()
    try:
        for compiled, n_threads in ((True, 1), (True, 2), (False, 1)):
            torch.set_num_threads(n_threads)
            out, *_ = cumulative_kernels(compiled)(scores, values, None, None, None)
            results.append((out, *torch.autograd.grad((out * weights).sum(), (scores, values))))
    finally:
        torch.set_num_threads(threads)
    (one, two, reference) = results
    assert all(torch.equal(a, b) for a, b in zip(one, two, strict=True))
    for got, expected in zip(two, reference, strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("carry", [False, True])
def test_cumulative_kernel_marks_the_same_late_rows_and_keeps_the_rows_before(carry: bool) -> None:
    """A score 1e4 above the first (and a NaN) make their rows and every later one late, in both
    forms; the rows before agree, and so do the gradients, which late tokens do not receive."""
    scores, values, state = kernel_inputs(torch.float64, carry, strided=False)
    with torch.no_grad():
        scores[0, 1, 4] = 1e4
        scores[1, 2, 6] = float("nan")
    weights = [torch.ones(2, 3, 9, 5, dtype=torch.float64), torch.zeros(2, 3), torch.zeros(2, 3, 5)]
    weights[0][0, 1, 4:] = 0  # the caller replaces late rows: their gradient comes from elsewhere
    weights[0][1, 2, 6:] = 0
    (outputs, late, grads), (ref_outputs, ref_late, ref_grads) = (
        kernel_results(compiled, scores, values, state, weights) for compiled in (True, False)
    )
    assert torch.equal(late, ref_late)
    assert late[0, 1].tolist() == [k >= 4 for k in range(9)] and late.sum() == 5 + 3
    keep = ~late.unsqueeze(-1)
    torch.testing.assert_close(outputs[0] * keep, ref_outputs[0] * keep, rtol=1e-12, atol=1e-12)
    for got, expected in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("bias", [True, False])
def test_value_score_projection_equals_its_pytorch_form(dtype: torch.dtype, bias: bool) -> None:
    """Values and the gradients of every parameter it reads (the query, the fused q/k/v weight and
    bias): the value rows, the score rows and both biases each weighted by a different gradient."""
    require_native()
    torch.manual_seed(0)
    layer = AarenAttention(12, 3, qkv_bias=bias).to(dtype)
    grad_weight, grad_bias = torch.randn(12 + 3, 12, dtype=dtype), torch.randn(12 + 3, dtype=dtype)
    results = []
    for projection in (layer.value_score_projection, layer.torch_value_score_projection):
        layer.zero_grad()
        weight, fused_bias = projection()
        loss = (weight * grad_weight).sum() + (0 if fused_bias is None else (fused_bias * grad_bias).sum())
        loss.backward()
        grads = {name: p.grad.clone() for name, p in layer.named_parameters() if p.grad is not None}
        results.append((weight.detach(), fused_bias, grads))
    (weight, fused_bias, grads), (ref_weight, ref_bias, ref_grads) = results
    torch.testing.assert_close(weight, ref_weight, **TOLERANCE[dtype])
    assert (fused_bias is None) == (not bias)
    if bias:
        torch.testing.assert_close(fused_bias.detach(), ref_bias.detach(), **TOLERANCE[dtype])
    expected = {"query", "proj.qkv.weight"} | ({"proj.qkv.bias"} if bias else set())
    assert set(grads) == set(ref_grads) == expected
    for name in expected:
        torch.testing.assert_close(grads[name], ref_grads[name], **TOLERANCE[dtype])


@pytest.mark.parametrize("norm_first", [False, True])
def test_aaren_trains_the_same_with_and_without_the_compiled_kernels(
    norm_first: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A whole backbone, float64: outputs, final states and every parameter's gradient."""
    require_native()
    torch.manual_seed(0)
    model = Aaren(d_model=16, n_heads=4, n_layers=2, d_ff=32, dropout=0.0, norm_first=norm_first).double()
    x = torch.randn(3, 11, 16, dtype=torch.float64)
    results = []
    for compiled in (True, False):
        if not compiled:
            monkeypatch.setattr(native, "extension", lambda: None)
        model.zero_grad()
        out, states = model(x)
        (out.square().sum() + sum(s.w.sum() for s in states)).backward()
        results.append((out, states, [p.grad.clone() for p in model.parameters()]))
    (out, states, grads), (ref_out, ref_states, ref_grads) = results
    torch.testing.assert_close(out, ref_out, rtol=1e-12, atol=1e-12)
    for state, ref_state in zip(states, ref_states, strict=True):
        for got, expected in zip(state, ref_state, strict=True):
            torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
    for got, expected in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)


def test_compiled_kernels_are_differentiable_once() -> None:
    """A backward that builds a graph (for a second derivative) is refused, not silently cut."""
    require_native()
    scores, values, _ = kernel_inputs(torch.float64, carry=False, strided=False)
    out, *_ = cumulative_kernels(True)(scores, values, None, None, None)
    with pytest.raises(RuntimeError, match="differentiable once"):
        torch.autograd.grad(out.sum(), values, create_graph=True)
    layer = AarenAttention(8, 2).double()
    weight, _ = layer.value_score_projection()
    with pytest.raises(RuntimeError, match="differentiable once"):
        torch.autograd.grad(weight.square().sum(), layer.query, create_graph=True)


def test_cumulative_kernel_refuses_bad_input_by_name() -> None:
    kernel = cumulative_kernels(True)
    with pytest.raises(RuntimeError, match="at least one token"):
        kernel(torch.zeros(2, 0), torch.zeros(2, 0, 3), None, None, None)
    with pytest.raises(RuntimeError, match="disagree in shape"):
        kernel(torch.zeros(2, 4), torch.zeros(2, 5, 3), None, None, None)
    with pytest.raises(RuntimeError, match="m, u and w, or none"):
        require_native()(torch.zeros(2, 4), torch.zeros(2, 4, 3), torch.zeros(2), None, None, 44.0)


def test_switched_off_the_pytorch_kernel_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(native.SWITCH, "0")
    native.extension.cache_clear()
    try:
        assert not native.in_use()  # nothing asked for the kernels yet: not built, not loaded
        assert native.extension() is None and not native.in_use()
        assert native.cumulative_attention(torch.zeros(2, 3)) is None
        assert native.value_score_projection(torch.zeros(3)) is None
    finally:
        native.extension.cache_clear()


def test_a_failed_build_warns_once_and_falls_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real build that fails (a missing header, as on a machine without torch's headers): a
    warning that says why and how to skip the build, then the PyTorch forms, same results."""
    broken = tmp_path / "broken.cpp"
    broken.write_text('#include "no_such_header.h"\n')
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "build"))
    monkeypatch.delenv(native.SWITCH, raising=False)  # the build path itself, even where switched off
    monkeypatch.setattr(native, "SOURCES", [broken])
    monkeypatch.setattr(native, "NAME", "recurrent_attention_broken_build")
    native.extension.cache_clear()
    try:
        with pytest.warns(UserWarning, match=f"(?s)native attention kernels unavailable.*{native.SWITCH}=0"):
            assert native.extension() is None
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # cached: the failure is not retried, nor warned again
            scores, values, _ = kernel_inputs(torch.float64, carry=False, strided=False)
            out, _ = attention_chunked(scores, values)
        expected, *_ = cumulative_kernels(compiled=False)(scores, values, None, None, None)
        torch.testing.assert_close(out, expected, rtol=0, atol=0)
    finally:
        native.extension.cache_clear()


def test_not_used_off_cpu_in_other_dtypes_or_under_a_tracer() -> None:
    assert native.cumulative_attention(torch.zeros(2, 3, device="meta")) is None
    assert native.cumulative_attention(torch.zeros(2, 3, dtype=torch.bfloat16)) is None
    seen = []

    def probe(scores: torch.Tensor) -> torch.Tensor:
        seen.append(native.cumulative_attention(scores))
        return scores * 2

    torch.jit.trace(probe, torch.zeros(2, 3), check_trace=False)
    assert seen == [None]


def test_the_ninja_package_is_found_when_ninja_is_not_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch's builder looks for ninja on PATH only; a venv run without activation has the ninja
    package's binary off PATH (a fresh CI machine has no system ninja)."""
    ninja = pytest.importorskip("ninja")
    monkeypatch.setenv("PATH", "/nonexistent")
    native._put_ninja_on_path()
    assert os.environ["PATH"].split(os.pathsep)[0] == ninja.BIN_DIR
    assert shutil.which("ninja") == str(Path(ninja.BIN_DIR) / "ninja")


def test_the_build_is_cached_per_source_and_per_python_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bug: every venv on a machine shared one cache entry, so each rebuilt it in turn."""
    from torch.utils import cpp_extension

    names: list[str] = []
    monkeypatch.setattr(cpp_extension, "load", lambda name, **kwargs: names.append(name))
    monkeypatch.delenv(native.SWITCH, raising=False)  # nothing is built: load is replaced

    def built_name() -> str:
        native.extension.cache_clear()
        native.extension()
        return names[-1]

    try:
        here = built_name()
        assert built_name() == here  # the same environment and sources: the same cached build
        monkeypatch.setattr(sys, "prefix", str(tmp_path / "another-venv"))
        other_env = built_name()
        source = tmp_path / "changed.cpp"
        source.write_text("// another version of the kernels\n")
        monkeypatch.setattr(native, "SOURCES", [*native.SOURCES, source])
        assert len({here, other_env, built_name()}) == 3
    finally:
        native.extension.cache_clear()


def test_each_checkout_builds_into_its_own_cache_folder(tmp_path, monkeypatch) -> None:
    """Two checkouts of the same sources (git worktrees) get two names: torch's builder rebuilds a
    name whenever its sources' paths change, so one shared name made each rebuild over the other."""
    copies = []
    for checkout in ("a", "b"):
        folder = tmp_path / checkout / "csrc"
        folder.mkdir(parents=True)
        copies.append([Path(shutil.copy(source, folder)) for source in native.SOURCES])
    names = []
    for sources in (*copies, copies[0]):
        monkeypatch.setattr(native, "SOURCES", sources)
        names.append(native.build_name(["-O3"]))
    assert names[0] != names[1]
    assert names[0] == names[2]
    assert names[0] != native.build_name(["-O2"])


def test_a_header_change_rebuilds(tmp_path, monkeypatch) -> None:
    """The sources include csrc/native.h: a change to it alone (a class's members) must not load a
    build of the old header."""
    before = native.build_name(["-O3"])
    header = tmp_path / "native.h"
    header.write_text(native.HEADERS[0].read_text() + "// one more line\n")
    monkeypatch.setattr(native, "HEADERS", [header])
    assert native.build_name(["-O3"]) != before


def test_the_build_line_says_what_it_does_and_the_measured_time() -> None:
    """The line once promised "about a minute" for a build that took 2m58s on a busy 2-core machine:
    it now names the files and the measured CPU time, and divides it by the cores ninja can use."""
    from recurrent_attention.ops.native import BUILD_CPU_S, SOURCES, build_note

    assert len(SOURCES) == 4 and BUILD_CPU_S == 115
    assert build_note(cores=1).startswith(
        "the first load per source version compiles 4 C++ files with g++ -O3: "
    )
    assert "~115 CPU-seconds, about 2 min on 1 free core(s)" in build_note(cores=1)  # 115 / 60
    assert "about 1 min on 2 free core(s)" in build_note(cores=2)  # 57.5 s
    assert "about 1 min on 4 free core(s)" in build_note(cores=64)  # one file per core at most


def test_a_cold_build_says_so_before_and_how_long_it_took_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The first run sat minutes at "Sanity Checking" with one line: now a line before the build
    (what it compiles, about how long) and one after (the time it took); a built module, none."""
    from torch.utils import cpp_extension

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "build"))
    monkeypatch.delenv(native.SWITCH, raising=False)
    loaded = ModuleType("fake_native")

    def fake_load(name: str, **_: object) -> ModuleType:  # what a build leaves: the library
        (tmp_path / "build" / name / f"{name}.so").write_bytes(b"")
        return loaded

    monkeypatch.setattr(cpp_extension, "load", fake_load)
    clock = iter([100.0, 163.4, 200.0, 200.5])
    monkeypatch.setattr(native.time, "perf_counter", lambda: next(clock))
    native.extension.cache_clear()
    try:
        with caplog.at_level(logging.INFO, logger=native.__name__):
            assert native.extension() is loaded
            cold = [r.getMessage() for r in caplog.records]
            caplog.clear()
            native.extension.cache_clear()
            assert native.extension() is loaded
            warm = [r.getMessage() for r in caplog.records]
    finally:
        native.extension.cache_clear()
    assert cold == [
        f"building the native attention kernels: {native.build_note()}; later runs load them",
        "built the native attention kernels in 63 s",
    ]
    assert "about" in cold[0] and "free core(s)" in cold[0]
    assert warm == []


def test_the_build_targets_this_cpu_where_the_compiler_can_and_is_cached_per_cpu(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """-march=native only where the compiler takes it (else the portable build), and a build for this
    CPU is named by it: a cache shared by two machines (a cluster's home folder) must not hand one
    CPU's build, which may use instructions the other lacks, to the other."""
    monkeypatch.setenv("CXX", "/nonexistent/c++")
    native.arch_flags.cache_clear()
    try:
        assert native.arch_flags() == []
    finally:
        native.arch_flags.cache_clear()
    names = {}
    for cpu in ("cpu a", "cpu b"):
        monkeypatch.setattr(native, "cpu_identity", lambda cpu=cpu: cpu)
        names[cpu] = (native.build_name(["-O3", native.ARCH_FLAG]), native.build_name(["-O3"]))
    assert names["cpu a"][0] != names["cpu b"][0]
    assert names["cpu a"][1] == names["cpu b"][1]  # a portable build runs on either


def test_in_use_is_whether_this_process_loaded_the_kernels() -> None:
    """Asking loads nothing (a run summary's question must not build the kernels); after a load, yes."""
    require_native()
    native.extension.cache_clear()
    try:
        assert not native.in_use() and native.extension.cache_info().currsize == 0
        assert native.extension() is not None and native.in_use()
    finally:
        native.extension.cache_clear()

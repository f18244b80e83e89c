"""Rollout policies against from-scratch forwards: window, stream (whole history), staggered (restarts)."""

from __future__ import annotations

import pytest
import torch

from recurrent_attention.tasks.rl.rollout import Policy, StaggeredPolicy, StreamPolicy, WindowPolicy
from tests.tasks.rl.test_head import ACT_DIM, STATE_DIM, make_model

K = 5


def drive(policy: Policy, returns, states, steps: int) -> torch.Tensor:
    """Feed the same recorded inputs to a policy; its own actions are fed back as in an episode."""
    actions = []
    with torch.no_grad():
        for t in range(steps):
            action = policy.act(returns[:, t], states[:, t], t)
            policy.observe(action)
            actions.append(action)
    return torch.stack(actions, 1)


@pytest.mark.parametrize("backbone", ["aaren", "transformer"])
def test_stream_equals_window_while_shorter_than_context(backbone: str) -> None:
    model = make_model(backbone)
    torch.manual_seed(1)
    steps = 3 * K
    returns, states = torch.rand(3, steps) * 3000, torch.randn(3, steps, STATE_DIM)
    window = drive(WindowPolicy(model, K), returns, states, steps)
    stream = drive(StreamPolicy(model), returns, states, steps)
    assert window.shape == (3, steps, ACT_DIM)
    torch.testing.assert_close(stream[:, :K], window[:, :K], atol=1e-5, rtol=1e-5)
    # after K steps the window forgets the first steps and the stream does not
    assert (stream[:, K:] - window[:, K:]).abs().max() > 1e-3


def test_window_matches_the_full_model_on_the_last_k_steps() -> None:
    """The window policy's action at t is the model's prediction from the last K recorded steps."""
    model = make_model("transformer")
    torch.manual_seed(2)
    steps = 2 * K
    returns, states = torch.rand(2, steps) * 3000, torch.randn(2, steps, STATE_DIM)
    policy = WindowPolicy(model, K)
    actions = drive(policy, returns, states, steps)
    t = steps - 1
    first = t - K + 1
    with torch.no_grad():
        expected = model(
            returns[:, first:],
            states[:, first:],
            actions[:, first:],
            torch.arange(first, steps).expand(2, -1),
        )[:, -1]
    torch.testing.assert_close(actions[:, t], expected, atol=1e-5, rtol=1e-5)


def full_history_actions(model, returns, states, actions, first: int, last: int) -> torch.Tensor:
    """The model's actions for steps ``first..last`` from a from-scratch forward over exactly those steps."""
    with torch.no_grad():
        return model(
            returns[:, first : last + 1],
            states[:, first : last + 1],
            actions[:, first : last + 1],
            torch.arange(first, last + 1).expand(len(returns), -1),
        )


@pytest.mark.parametrize("backbone", ["aaren", "transformer", "linear_attention"])
def test_long_stream_equals_a_forward_over_the_whole_history(backbone: str) -> None:
    """After 100 steps (300 tokens, 20 x K) the carried state, stepped token by token through the
    backbone's deployed step, still equals the parallel forward."""
    model = make_model(backbone)
    assert StreamPolicy(model).stepper is not None  # the deployed step, not the model's forward
    torch.manual_seed(3)
    steps = 20 * K
    returns, states = torch.rand(2, steps) * 3000, torch.randn(2, steps, STATE_DIM)
    stream = drive(StreamPolicy(model), returns, states, steps)
    expected = full_history_actions(model, returns, states, stream, 0, steps - 1)
    torch.testing.assert_close(stream, expected, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("backbone", ["aaren", "transformer"])
def test_staggered_acts_from_the_older_of_two_restarted_contexts(backbone: str) -> None:
    """At t the acting context starts at the later of the last restarts 0, K, 2K... or K/2, 3K/2...

    whichever is older; its action equals a from-scratch forward over exactly those steps, so after
    the first K/2 steps the context is K/2 + 1 to K steps long, as in training.
    """
    model = make_model(backbone)
    torch.manual_seed(4)
    steps, half = 4 * K + 3, K // 2
    returns, states = torch.rand(2, steps) * 3000, torch.randn(2, steps, STATE_DIM)
    staggered = drive(StaggeredPolicy(model, K), returns, states, steps)
    lengths = []
    for t in range(steps):
        starts = [t - t % K] + ([t - (t - half) % K] if t >= half else [])
        first = min(starts)
        lengths.append(t - first + 1)
        expected = full_history_actions(model, returns, states, staggered, first, t)[:, -1]
        torch.testing.assert_close(staggered[:, t], expected, atol=1e-5, rtol=1e-4)
    assert min(lengths[half:]) == half + 1 and max(lengths) == K


@pytest.mark.parametrize("backbone", ["aaren", "transformer"])
def test_stream_under_bf16_autocast_steps_the_deployed_backbone_in_float32(backbone: str) -> None:
    """As ``trainer.precision=bf16-mixed`` tests: the deployed step runs outside autocast at the
    weights' dtype (its layout in bf16 beside a float32 state was refused); only the embeddings and
    the action head round to bf16, so the actions stay within bf16 rounding of float32's."""
    model = make_model(backbone)
    torch.manual_seed(1)
    returns, states = torch.rand(3, 2 * K) * 3000, torch.randn(3, 2 * K, STATE_DIM)
    full = drive(StreamPolicy(model), returns, states, 2 * K)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mixed = drive(StreamPolicy(model), returns, states, 2 * K)
    assert mixed.dtype == torch.bfloat16
    torch.testing.assert_close(mixed.float(), full, atol=0.05, rtol=0)

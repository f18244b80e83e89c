"""Window and stream rollout policies: equal while the episode is shorter than K, different after."""

from __future__ import annotations

import pytest
import torch

from recurrent_attention.tasks.rl.rollout import StreamPolicy, WindowPolicy
from tests.tasks.rl.test_head import ACT_DIM, STATE_DIM, make_model

K = 5


def drive(policy: WindowPolicy | StreamPolicy, returns, states, steps: int) -> torch.Tensor:
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

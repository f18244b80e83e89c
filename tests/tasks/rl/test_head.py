"""The Decision Transformer head: causal over its interleaved tokens, for every backbone."""

from __future__ import annotations

import pytest
import torch
from hydra.utils import instantiate

from recurrent_attention.config import backbone_config
from recurrent_attention.tasks.rl.head import DecisionTransformer
from tests.helpers.backbones import model_config, sequence_backbones

STATE_DIM, ACT_DIM, T = 5, 3, 8


def make_model(backbone: str, seed: int = 0) -> DecisionTransformer:
    """The head around ``conf/model/<backbone>.yaml``'s backbone at the test sizes."""
    torch.manual_seed(seed)
    model = DecisionTransformer(
        instantiate(backbone_config(model_config(backbone).model)), STATE_DIM, ACT_DIM
    )
    model.set_state_statistics(torch.randn(STATE_DIM), torch.rand(STATE_DIM) + 0.5)
    return model.eval()


def inputs(batch: int = 2, length: int = T) -> tuple[torch.Tensor, ...]:
    returns = torch.randn(batch, length) * 1000
    states = torch.randn(batch, length, STATE_DIM)
    actions = torch.rand(batch, length, ACT_DIM) * 2 - 1
    timesteps = torch.arange(length).expand(batch, -1) + 7
    return returns, states, actions, timesteps


@pytest.mark.parametrize("backbone", sequence_backbones())
def test_action_at_t_never_sees_action_t_or_later(backbone: str) -> None:
    model = make_model(backbone)
    returns, states, actions, timesteps = inputs()
    base = model(returns, states, actions, timesteps)
    assert base.shape == (2, T, ACT_DIM) and base.abs().max() <= 1.0
    t = 4
    changed = actions.clone()
    changed[:, t:] = -changed[:, t:] + 0.5
    after = model(returns, states, changed, timesteps)
    torch.testing.assert_close(after[:, : t + 1], base[:, : t + 1], rtol=0, atol=1e-6)
    # the check can fail: the next step does read action t, and the state and return at t matter
    assert (after[:, t + 1] - base[:, t + 1]).abs().max() > 1e-4
    later_state = states.clone()
    later_state[:, t + 1 :] += 3.0
    torch.testing.assert_close(model(returns, later_state, actions, timesteps)[:, : t + 1], base[:, : t + 1])
    own_state = states.clone()
    own_state[:, t] += 3.0
    assert (model(returns, own_state, actions, timesteps)[:, t] - base[:, t]).abs().max() > 1e-4


def test_states_are_normalised_with_the_dataset_statistics() -> None:
    model = make_model("aaren")
    returns, states, actions, timesteps = inputs()
    base = model(returns, states, actions, timesteps)
    # shifting the states and the mean together leaves the normalised states, hence the actions, alone
    model.set_state_statistics(model.state_mean + 10.0, model.state_std)
    torch.testing.assert_close(model(returns, states + 10.0, actions, timesteps), base, atol=1e-5, rtol=0)


def test_states_are_divided_by_the_dataset_std() -> None:
    model = make_model("aaren")
    returns, states, actions, timesteps = inputs()
    base = model(returns, states, actions, timesteps)
    # states 3x further from the mean with a 3x std normalise to the same inputs
    mean = model.state_mean.clone()
    model.set_state_statistics(mean, model.state_std * 3)
    torch.testing.assert_close(model(returns, mean + 3 * (states - mean), actions, timesteps), base)
    # the check can fail: the same states under the wider std are different inputs
    assert (model(returns, states, actions, timesteps) - base).abs().max() > 1e-3


def test_returns_to_go_are_divided_by_the_scale() -> None:
    """A return of 3600 enters the model as 3.6 (min-DT's rtg_scale 1000), whatever the scale's value."""
    scaled = make_model("aaren")
    unscaled = make_model("aaren")
    unscaled.rtg_scale = 1.0
    returns, states, actions, timesteps = inputs()
    torch.testing.assert_close(
        scaled(returns, states, actions, timesteps), unscaled(returns / 1000, states, actions, timesteps)
    )
    assert (
        unscaled(returns, states, actions, timesteps) - scaled(returns, states, actions, timesteps)
    ).abs().max() > 1e-3

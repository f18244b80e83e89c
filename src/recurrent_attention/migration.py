"""Resume a training checkpoint written before q/k/v were fused into one projection (13988e3).

Before that commit :class:`~recurrent_attention.models.blocks.HeadProjections` held three linear
layers ``q_proj``, ``k_proj``, ``v_proj`` (in that order, before ``out_proj``), so where a model's
``parameters()`` now list ``qkv.weight, qkv.bias`` they listed ``q.weight, q.bias, k.weight, k.bias,
v.weight, v.bias`` (without ``qkv_bias``: ``q.weight, k.weight, v.weight``). The weights of such a
checkpoint are found by name and joined (:func:`migrate_state_dict`, before the model loads them:
``TaskModule.on_load_checkpoint``, ``finished_run``); an optimiser's state, though, is indexed by
position in ``parameters()``, so Lightning would hand the fused model an optimiser state with more
parameters than it has. :func:`fuse_optimizer_states`
rewrites that state as the fused model's optimiser would have written it: each fused parameter's
per-element buffers (Adam's and RAdam's moments, SGD's momentum) are its three parts' joined in
q, k, v order, and its per-parameter scalars (the step count) are the parts', which were stepped
together and so agree. The resumed run then continues exactly as from a fused checkpoint.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from recurrent_attention.errors import CheckpointError

SEPARATE_PROJECTIONS = ("q_proj", "k_proj", "v_proj")
"""The modules that held the query, key and value projections before they were fused into ``qkv``."""

FUSION_COMMIT = "13988e3"
"""The commit that fused q/k/v: a checkout before it resumes the old layout as it was written."""

Slot = tuple[int, int | None]
"""A parameter of the old layout: the index of the parameter that holds it now, and which third
(0 query, 1 key, 2 value) of that fused parameter it is, or None for the whole parameter."""


def migrate_state_dict(state_dict: dict[str, Any]) -> dict[str, Any]:
    """``state_dict`` in today's layout (changed in place and returned): every module that holds all
    three of ``q_proj``/``k_proj``/``v_proj`` weights (and biases) gets them joined as ``qkv``'s.

    A module with only some of the three is left as it is, so that a strict load names what is wrong.
    """
    suffix = f"{SEPARATE_PROJECTIONS[0]}.weight"
    prefixes = [key.removesuffix(suffix) for key in list(state_dict) if key.endswith(suffix)]
    for prefix in prefixes:
        for kind in ("weight", "bias"):
            keys = [f"{prefix}{name}.{kind}" for name in SEPARATE_PROJECTIONS]
            if all(key in state_dict for key in keys):
                state_dict[f"{prefix}qkv.{kind}"] = torch.cat([state_dict.pop(key) for key in keys])
    return state_dict


def migrate_checkpoint(module: nn.Module, checkpoint: dict[str, Any], source: str) -> None:
    """A Lightning ``checkpoint`` of ``module`` in today's layout, in place: the optimiser states
    first (:func:`fuse_optimizer_states` reads the old layout from the state dict), then the weights."""
    fuse_optimizer_states(module, checkpoint, source)
    if "state_dict" in checkpoint:
        migrate_state_dict(checkpoint["state_dict"])


def legacy_projections(module: nn.Module, state_dict: dict[str, Any]) -> list[str]:
    """The names of ``module``'s fused projections (modules with a ``qkv`` parameter) whose weights
    ``state_dict`` holds in the separate q/k/v layout."""
    query = SEPARATE_PROJECTIONS[0]
    parameters = dict(module.named_parameters())
    return [
        name
        for name, _ in module.named_modules()
        if f"{name}.qkv.weight" in parameters and f"{name}.{query}.weight" in state_dict
    ]


def legacy_parameter_slots(module: nn.Module, legacy: list[str]) -> list[Slot]:
    """``module.parameters()`` as the old layout listed them, for the projections named in ``legacy``:
    each fused ``qkv`` weight (and bias) stands for its three parts, each part's weight followed by
    its bias, as three separate linear layers list them."""
    index = {name: i for i, (name, _) in enumerate(module.named_parameters())}
    fused = {f"{name}.qkv.weight": name for name in legacy}
    fused_biases = {f"{name}.qkv.bias" for name in legacy}
    slots: list[Slot] = []
    for name, position in index.items():
        if name in fused_biases:
            continue  # listed with its weight's parts
        if name not in fused:
            slots.append((position, None))
            continue
        bias = index.get(f"{fused[name]}.qkv.bias")
        for part in range(len(SEPARATE_PROJECTIONS)):
            slots.append((position, part))
            if bias is not None:
                slots.append((bias, part))
    return slots


def _joined(values: list[Any], part_shape: torch.Size, what: str) -> Any:
    """One fused parameter's entry from its three parts' ``values``: per-element buffers joined in
    q, k, v order; anything else (a step count) must be the same in all three."""
    if all(isinstance(v, torch.Tensor) and v.dim() > 0 and v.shape == part_shape for v in values):
        return torch.cat(values)
    first = values[0]
    same = all(
        torch.equal(v, first)
        if isinstance(v, torch.Tensor) and isinstance(first, torch.Tensor)
        else v == first
        for v in values
    )
    if not same:
        raise CheckpointError(f"{what} differs between the query, key and value parts")
    return first


def _fused_optimizer_state(
    state: dict[str, Any], slots: list[Slot], parameters: list[nn.Parameter], source: str
) -> dict[str, Any]:
    groups = state["param_groups"]
    ids = [i for group in groups for i in group["params"]]
    if len(groups) != 1 or ids != list(range(len(slots))):
        raise CheckpointError(
            f"{source}: its optimiser state lists {len(ids)} parameters in {len(groups)} group(s), where "
            f"this model in the q/k/v layout from before {FUSION_COMMIT} has {len(slots)} in one group, "
            "so it cannot be converted to the fused layout"
        )
    parts: dict[int, list[int]] = {}
    for old, (position, _) in enumerate(slots):
        parts.setdefault(position, []).append(old)
    fused: dict[int, Any] = {}
    for position, olds in parts.items():
        entries = [state["state"].get(old) for old in olds]
        if len(olds) == 1 or all(entry is None for entry in entries):
            if entries[0] is not None:
                fused[position] = entries[0]
            continue
        if any(entry is None for entry in entries) or len({frozenset(e) for e in entries}) != 1:
            raise CheckpointError(
                f"{source}: the optimiser holds state for only some of the query, key and value parts of "
                f"parameter {position}, which one fused parameter cannot hold"
            )
        part_shape = torch.Size([parameters[position].shape[0] // len(olds), *parameters[position].shape[1:]])
        try:
            fused[position] = {
                key: _joined([entry[key] for entry in entries], part_shape, f"optimiser entry {key!r}")
                for key in entries[0]
            }
        except CheckpointError as err:
            raise CheckpointError(f"{source}: parameter {position}: {err}") from None
    return {"state": fused, "param_groups": [{**groups[0], "params": list(range(len(parameters)))}]}


def fuse_optimizer_states(module: nn.Module, checkpoint: dict[str, Any], source: str) -> None:
    """Rewrite, in place, the optimiser states of a Lightning ``checkpoint`` of ``module`` written in
    the separate q/k/v layout as the fused layout's; a checkpoint in the fused layout is left as it is.

    ``source`` names the checkpoint in errors: a state that cannot be converted raises
    :class:`CheckpointError` with the two ways on (finish the run on a checkout before the fusion,
    or start it again).
    """
    legacy = legacy_projections(module, checkpoint.get("state_dict", {}))
    if not legacy or not checkpoint.get("optimizer_states"):
        return
    slots = legacy_parameter_slots(module, legacy)
    parameters = list(module.parameters())
    try:
        checkpoint["optimizer_states"] = [
            _fused_optimizer_state(state, slots, parameters, source)
            for state in checkpoint["optimizer_states"]
        ]
    except CheckpointError as err:
        raise CheckpointError(
            f"{err}. Finish this run on a checkout before the fusion (git checkout {FUSION_COMMIT}~1), "
            "or start it again with force=true"
        ) from None

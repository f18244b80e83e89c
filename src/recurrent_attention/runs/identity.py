"""A run is identified by its resolved config, not by the words typed on the command line.

``run_id`` is a short hash of everything that changes a run's result: the resolved config (model,
task, trainer precision/accelerator/devices/epochs, experiment effects, seed, every override) plus
the task and preset choices that name it in tables. Keys that only say where files go or how a run
is watched (``paths``, ``force``, ``logger``, progress bar, model summary, logging interval, Hydra's
own settings) are left out, so they never split one run into two folders. ``config_id`` is the same
hash with the seed removed: the runs that a results table averages over seeds share it.

Values are hashed as resolved and typed, so ``task.lr=0.5`` and ``task.lr=5e-1`` are one run, but
``trainer.limit_train_batches=1`` (one batch) and ``=1.0`` (every batch) are not.

The data read is part of the identity too (``data.fingerprint``): the registry's checksums, or a
fingerprint of the contents of own files, so an edited CSV is a new run, never "already finished".
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict, read_write
from omegaconf.errors import OmegaConfBaseException

from recurrent_attention.data.fingerprint import data_identity

HASH_LENGTH = 12
# Dotted keys that do not change a run's result.
IGNORED_KEYS = (
    "hydra",
    "paths",
    "force",
    "logger",
    "trainer.enable_progress_bar",
    "trainer.enable_model_summary",
    "trainer.log_every_n_steps",
)
# Config-group choices that name a run (``task=tsf/etth1``, ``preset=cpu``) beside its values.
NAMING_CHOICES = ("task", "preset")
# Classes moved since runs were made: a ``_target_`` is hashed under the path it had then, so that a
# move changes no run's id (its folder is still found, finished or resumable).
MOVED_TARGETS = {
    f"recurrent_attention.tasks.video.encoders.{name}": f"recurrent_attention.tasks.video.transformer.{name}"
    for name in ("TimeSformer", "CRViT")
}

# Keys added since runs were made, with the value that reproduces those runs ({model name or "*":
# {dotted key: value}}): left out of the hash while they hold it, so that a new option changes no
# earlier run's id (a finished run is still found); any other value is a new run.
ADDED_KEYS: dict[str, dict[str, Any]] = {
    "transformer": {
        "model.relative_positions": False,
        "model.absolute_positions": True,
        "model.carry_state": False,
    },
    "aaren": {
        "model.carry_state": False,
        "model.absolute_positions": True,
        "model.scaled_scores": True,
        "model.backbone.scaled_scores": True,
    },
    **{
        crt: {
            "model.relative_positions": False,
            "model.backbone.relative_positions": False,
            "model.txl_blocks": False,
            "model.backbone.txl_blocks": False,
        }
        for crt in ("crt", "crt_gru")
    },
    "transformer_xl": {
        "model.shared_position_dropout": False,
        "model.backbone.shared_position_dropout": False,
    },
    # model.compile=true is its own run: compiled kernels round differently from eager ones
    "*": {
        "task.paper_models": False,
        "model.compile": False,
        "model.compile_backend": "inductor",
        "task.module.txl_init": False,
    },
}


@dataclass(frozen=True)
class ProtocolMove:
    """How one family's configs said their protocol before it was an object (issue 68).

    ``definitions``: each protocol's ``task.protocols.<name>`` node as that move wrote it;
    ``before``: the keys a config with ``task.compat=<name>`` held then, with their values."""

    definitions: dict[str, dict[str, Any]]
    before: Callable[[str], dict[str, Any]]


def _rules(family: str, cls: str, **fields: Any) -> dict[str, Any]:
    return {"_target_": f"recurrent_attention.tasks.{family}.protocol.{cls}", **fields}


TSLIB_TYPE1_EVERY_5 = {
    "_target_": "recurrent_attention.tasks.schedules.tslib_type1",
    "_partial_": True,
    "every": 5,
}
# The protocol objects replaced the name passed as a string (``compat: ${task.compat}``) and the
# families' per-protocol tables. A config whose ``task.protocols`` are still the move's definitions,
# with ``task.rules`` (and the datamodule's and module's copy) the one ``task.compat`` names, is hashed
# as it was before: those keys out, the old ones back; any other protocol is a new run.
PROTOCOL_MOVES: dict[str, ProtocolMove] = {
    "tsf": ProtocolMove(
        {
            "default": _rules("tsf", "TSFProtocol", drop_last_test_batch=False),
            "reference": _rules("tsf", "TSFProtocol", drop_last_test_batch=True),
        },
        lambda compat: {"task.datamodule.compat": compat},
    ),
    "rl": ProtocolMove(
        {
            "default": _rules("rl", "RLProtocol", trajectory_sampling="length", periodic_eval=False),
            "reference": _rules("rl", "RLProtocol", trajectory_sampling="uniform", periodic_eval=True),
        },
        lambda compat: {"task.datamodule.compat": compat, "task.module.compat": compat},
    ),
    "video": ProtocolMove(
        {
            "default": _rules(
                "video",
                "VideoProtocol",
                val_view="centre",
                eval_short_side="crop",
                truncate_frame_indices=False,
                view_scores="softmax",
                test_checkpoint="best",
            ),
            "reference": _rules(
                "video",
                "VideoProtocol",
                val_view="random",
                eval_short_side="short_side_min",
                truncate_frame_indices=True,
                view_scores="logits",
                test_checkpoint="last",
            ),
        },
        lambda compat: {
            "task.datamodule.compat": compat,
            "task.module.compat": compat,
            "task.test_checkpoints": {"default": "best", "reference": "last"},
        },
    ),
    "ef": ProtocolMove(
        {
            "default": _rules(
                "ef",
                "EFProtocol",
                nll="per_predicted_event",
                rmse="per_event",
                checkpoint_metric="val/nll",
                time_every_layer=False,
            ),
            "reference": _rules(
                "ef",
                "EFProtocol",
                nll="meta_tpp",
                rmse="meta_tpp",
                checkpoint_metric="val/rmse",
                time_every_layer=True,
            ),
        },
        lambda compat: {
            "task.module.compat": compat,
            "task.module.time_every_layer": compat == "reference",
            "task.time_every_layer": compat == "reference",
            "task.protocols": {
                "default": {"checkpoint_metric": "val/nll", "time_every_layer": False},
                "reference": {"checkpoint_metric": "val/rmse", "time_every_layer": True},
            },
        },
    ),
    "tsc": ProtocolMove(
        {
            "default": _rules(
                "tsc",
                "TSCProtocol",
                validation="train_split",
                test_scaling="train",
                selection_metric="val/acc",
                embedding="linear",
                lr_scheduler=None,
            ),
            "reference": _rules(
                "tsc",
                "TSCProtocol",
                validation="test",
                test_scaling="own",
                selection_metric="val/tslib_improvements",
                embedding="tslib_conv",
                lr_scheduler=TSLIB_TYPE1_EVERY_5,
            ),
        },
        lambda compat: {
            "task.datamodule.compat": compat,
            "task.module.compat": compat,
            "task.embeddings": {"default": "linear", "reference": "tslib_conv"},
            "task.selection_metric": {"default": "val/acc", "reference": "val/tslib_improvements"},
            "task.lr_schedules": {"default": None, "reference": TSLIB_TYPE1_EVERY_5},
        },
    ),
    # issue 66's task.module.txl_init, which ADDED_KEYS then leaves out while false
    "lm": ProtocolMove(
        {
            "default": _rules("lm", "LMProtocol", txl_init=False),
            "reference": _rules("lm", "LMProtocol", txl_init=True),
        },
        lambda compat: {"task.module.txl_init": compat == "reference"},
    ),
}
PROTOCOL_KEYS = ("task.protocols", "task.rules", "task.datamodule.rules", "task.module.rules")


def identity_content(cfg: DictConfig, choices: Mapping[str, Any], seedless: bool = False) -> dict[str, Any]:
    """What the hash covers: the resolved config less ``IGNORED_KEYS``, the naming choices and the
    data read (``data_identity``: registry checksums or own files' fingerprints).

    Ignored values are masked before resolving, so a copy made by interpolation (the datamodule's
    ``data_dir: ${paths.data_dir}``) is ignored too. ``seedless`` leaves the seed out the same way,
    so that values derived from it (RL's ``eval_seed: ${seed}``) do not tell seeds' configs apart.
    """
    job = copy.deepcopy(OmegaConf.masked_copy(cfg, [key for key in cfg if key != "hydra"]))
    masked = (*IGNORED_KEYS, "seed") if seedless else IGNORED_KEYS
    with read_write(job), open_dict(job):
        for dotted in masked:
            node = OmegaConf.select(job, dotted, default=None, throw_on_missing=False)
            if node is not None:
                OmegaConf.update(job, dotted, _masked(node), merge=False)
        content = OmegaConf.to_container(job, resolve=True)
    for dotted in masked:
        *parents, leaf = dotted.split(".")
        node = content
        for key in parents:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(leaf, None)
    _as_before_protocol_objects(content)
    _nest_backbone(content)
    _restore_removed(content)
    _drop_added(content)
    choices = {name: choices.get(name) for name in NAMING_CHOICES}
    return {"config": _unmoved(content), "choices": choices, "data": data_identity(cfg)}


TRANSFORMER_XL = "recurrent_attention.models.transformer_xl.TransformerXL"
# Before issue 68 a model node copied the backbone's arguments into ``model.backbone``, beside the
# keys only the run read (these) and the video encoders' clip sizes, which only the copy held (those).
# Aaren and linear attention left out attn_dropout too, which presets and LM set for every model.
UNCOPIED_KEYS = ("name", "compile", "compile_backend", "carry_state", "absolute_positions")
UNCOPIED_BY_CLASS = {
    "recurrent_attention.models.aaren.Aaren": ("attn_dropout",),
    "recurrent_attention.models.linear_attention.LinearTransformer": ("attn_dropout",),
}
ONLY_COPIED_KEYS = ("img_size", "n_frames")


def _nest_backbone(content: dict[str, Any]) -> None:
    """Hash a model node in the shape runs were made in: today's node is the backbone's config
    (``_target_`` and its arguments beside the run's keys); then the arguments were copied into a
    ``backbone`` node. A node that has one already (a run folder's config) is left as it is."""
    model = content.get("model")
    if not isinstance(model, dict) or "_target_" not in model:
        return
    uncopied = (*UNCOPIED_KEYS, *UNCOPIED_BY_CLASS.get(model["_target_"], ()))
    backbone = {key: value for key, value in model.items() if key not in uncopied}
    content["model"] = {
        **{key: value for key, value in model.items() if key != "_target_" and key not in ONLY_COPIED_KEYS},
        "backbone": backbone,
    }


def _restore_removed(content: dict[str, Any]) -> None:
    """Put back the keys removed since runs were made, at the value they held then, which the rest
    of the config determines: LM's ``task.paper_models`` (true under ``compat=reference``, where it
    switched the models to the paper's, now ``model=paper/*``) and the Transformer's
    ``model.relative_positions`` (true where it built Transformer-XL's class, now
    ``model=paper/transformer``). :func:`_drop_added` then drops them where they are false."""
    task, model = content.get("task"), content.get("model")
    if isinstance(task, dict) and task.get("family") == "lm":
        task.setdefault("paper_models", task.get("compat") == "reference")
    if isinstance(model, dict) and model.get("name") == "transformer":
        backbone = model.get("backbone")
        target = backbone.get("_target_") if isinstance(backbone, dict) else model.get("_target_")
        model.setdefault("relative_positions", target == TRANSFORMER_XL)


def _drop_added(content: dict[str, Any]) -> None:
    """Remove from ``content`` the :data:`ADDED_KEYS` that hold their earlier runs' value."""
    model = content.get("model")
    name = model.get("name") if isinstance(model, dict) else None
    for dotted, old_value in {**ADDED_KEYS["*"], **ADDED_KEYS.get(name, {})}.items():
        *parents, leaf = dotted.split(".")
        node: Any = content
        for key in parents:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict) and leaf in node and _same(node[leaf], old_value):
            del node[leaf]


def _as_before_protocol_objects(content: dict[str, Any]) -> None:
    """``content`` as it was before its family's protocol became an object (:data:`PROTOCOL_MOVES`),
    where its protocol is one of that move's definitions."""
    task = content.get("task")
    if not isinstance(task, dict) or (move := PROTOCOL_MOVES.get(task.get("family"))) is None:
        return
    compat = task.get("compat")
    rules = move.definitions.get(compat)
    if task.get("protocols") != move.definitions or rules is None:
        return
    copies = [
        task.get("rules"),
        *(task.get(part, {}).get("rules", rules) for part in ("datamodule", "module")),
    ]
    if any(node != rules for node in copies):
        return
    for dotted in PROTOCOL_KEYS:
        *parents, leaf = dotted.split(".")
        _node(content, parents).pop(leaf, None)
    for dotted, value in move.before(compat).items():
        *parents, leaf = dotted.split(".")
        _node(content, parents)[leaf] = value


def _node(content: dict[str, Any], keys: list[str]) -> dict[str, Any]:
    for key in keys:
        content = content[key]
    return content


def _same(value: Any, old_value: Any) -> bool:
    """Equal and of one type (``1`` is not ``True``; a string read from YAML is not the literal)."""
    return type(value) is type(old_value) and value == old_value


def _unmoved(node: Any) -> Any:
    """``node`` with every ``_target_`` of :data:`MOVED_TARGETS` back at its old path."""
    if isinstance(node, dict):
        return {
            key: MOVED_TARGETS.get(value, value) if key == "_target_" else _unmoved(value)
            for key, value in node.items()
        }
    if isinstance(node, list):
        return [_unmoved(value) for value in node]
    return node


def _masked(node: Any) -> Any:
    """The same structure with every value replaced by a constant (interpolations included)."""
    if isinstance(node, (DictConfig, ListConfig)):
        node = OmegaConf.to_container(node, resolve=False)
    if isinstance(node, dict):
        return {key: _masked(value) for key, value in node.items()}
    if isinstance(node, list):
        return [_masked(value) for value in node]
    return "<ignored>"


def content_hash(content: Mapping[str, Any]) -> str:
    text = json.dumps(content, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:HASH_LENGTH]


def run_ids(cfg: DictConfig, choices: Mapping[str, Any]) -> dict[str, str]:
    """``run_id`` (with the seed) and ``config_id`` (without) of a config; tables reuse this.

    ``cfg`` is the composed config (a ``hydra`` node, if present, is left out); ``choices`` are
    Hydra's config-group choices (``HydraConfig.get().runtime.choices``).
    """
    return {
        "run_id": content_hash(identity_content(cfg, choices)),
        "config_id": content_hash(identity_content(cfg, choices, seedless=True)),
    }


UNRESOLVED_ID = "unresolved"


def run_id_resolver(*, _root_: DictConfig) -> str:
    """``${ra.run_id:}``: the run's hash, for ``hydra.run.dir`` and ``hydra.sweep.subdir``.

    A config that does not resolve gets the folder ``...-unresolved``, so that the app starts and
    ``train.py`` can stop with one line naming the key (``config_checks.require_resolvable``)
    instead of Hydra failing to format an OmegaConf traceback.
    """
    try:
        return run_ids(_root_, OmegaConf.to_container(_root_.hydra.runtime.choices))["run_id"]
    except OmegaConfBaseException:
        return UNRESOLVED_ID

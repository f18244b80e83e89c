"""Up-front checks of the config values a user can mistype on the command line.

Without them ``model.n_heads=0`` dies in a ZeroDivisionError deep inside a layer, ``model.n_layers=0``
trains a model with no layers, and ``seed=abc`` fails in Lightning's seeding. :func:`check_config`
runs before anything is built and raises one :class:`ConfigError` line naming the key, the value
and what is allowed. The rules are one table: a key absent from the composed config (a model or
task family that does not have it) is skipped, and a rule about one architecture's own option
(Aaren's ``path``, CRT's ``rnn``) names the backbone classes it is about (``owners``): another
backbone may have an option of that name with values of its own, which its constructor checks
(a ``ValueError`` there is one line too: ``train.build_backbone``). A task family adds its own
rules (the values its data and heads accept) with :func:`register_family_rules` from its ``checks.py``, which
``recurrent_attention.tasks.register_families`` imports: this module imports no family.
"""

from __future__ import annotations

import difflib
import importlib.util
import inspect
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import OverrideParseException
from hydra.utils import get_class
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import InterpolationResolutionError, MissingMandatoryValue, OmegaConfBaseException
from torch._dynamo import list_backends  # Lightning imports it anyway

from recurrent_attention.config import CONFIG_DIR
from recurrent_attention.errors import ConfigError
from recurrent_attention.models.blocks import ACTIVATIONS
from recurrent_attention.models.ncgru import RNN_KINDS
from recurrent_attention.ops import PATHS

ABSENT = object()
MAX_SEED = 2**32 - 1  # numpy's seed range, which Lightning's seed_everything enforces


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _batch_limit(value: Any) -> bool:
    """Lightning's ``limit_*_batches``: an integer counts batches, a float is a fraction of them."""
    if _integer(value):
        return value > 0
    return _number(value) and 0 < value <= 1


@dataclass(frozen=True)
class Rule:
    """``keys`` must hold a value that ``accepts``; ``allowed`` says in words what that is.

    ``owners``: the ``model._target_`` classes the rule is about (empty: every config
    that has the keys)."""

    keys: tuple[str, ...]
    accepts: Callable[[Any], bool]
    allowed: str
    nullable: bool = False
    owners: tuple[str, ...] = ()


def choice(key: str, options: Iterable[str], owners: tuple[str, ...] = ()) -> Rule:
    names = tuple(sorted(options))
    return Rule((key,), lambda value: value in names, f"one of {', '.join(names)}", owners=owners)


AAREN = ("recurrent_attention.models.aaren.Aaren",)
# The backbones without attention probabilities (their constructors take attn_dropout and drop it).
NO_ATTENTION_PROBABILITIES = (*AAREN, "recurrent_attention.models.linear_attention.LinearTransformer")
# The backbones whose rnn, position_rnn, ncgru_inverse and bptt are CRT's (CR-ViT is CRT's video model).
CRT = (
    "recurrent_attention.models.crt.CompactRecurrentTransformer",
    "recurrent_attention.tasks.video.encoders.CRViT",
)


RULES = (
    Rule(("seed",), lambda v: _integer(v) and 0 <= v <= MAX_SEED, f"an integer from 0 to {MAX_SEED}"),
    Rule(
        (
            "model.d_model",
            "model.n_heads",
            "model.n_layers",
            "model.d_ff",
            "model.seg_len",
            "task.seq_len",
            "task.pred_len",
            "task.seg_len",
            "task.bptt_segments",
            "task.batch_size",
            "task.eval_batch_size",
            "task.max_epochs",
            "task.n_channels",
            "task.n_classes",
            "task.max_len",
            "task.n_marks",
            "task.n_components",
            "task.vocab_size",
        ),
        lambda v: _integer(v) and v > 0,
        "a positive integer",
    ),
    # A run that would take no optimiser step tests a randomly initialised model: refused, as
    # task.max_epochs=0 is (trainer.max_epochs copies it; set directly, it is checked here).
    Rule(("trainer.max_epochs",), lambda v: _integer(v) and v > 0, "a positive integer"),
    Rule(
        ("trainer.max_steps",),
        lambda v: _integer(v) and (v == -1 or v > 0),
        "-1 (no limit) or an integer > 0",
    ),
    Rule(
        ("trainer.limit_train_batches", "trainer.limit_test_batches"),
        _batch_limit,
        "a number of batches (an integer > 0) or a fraction in (0, 1]",
    ),
    Rule(("task.tokens_per_step",), lambda v: _integer(v) and v > 0, "a positive integer or null", True),
    Rule(
        ("model.mem_len", "task.mem_len", "task.warmup_steps", "task.split_seed"),
        lambda v: _integer(v) and v >= 0,
        "an integer >= 0",
    ),
    Rule(("model.dropout", "model.attn_dropout"), lambda v: _number(v) and 0 <= v < 1, "a number in [0, 1)"),
    # Presets and LM set attn_dropout: 0.0 for every model; Aaren and linear attention have no
    # attention probabilities to drop.
    Rule(
        ("model.attn_dropout",),
        lambda v: v == 0,
        "0: this model has no attention probabilities to drop (model.dropout drops in its residual blocks)",
        owners=NO_ATTENTION_PROBABILITIES,
    ),
    Rule(("task.val_fraction",), lambda v: _number(v) and 0 < v < 1, "a number in (0, 1)"),
    Rule(("task.time_eps",), lambda v: _number(v) and v > 0, "a number > 0"),
    # lr 0 is allowed: frozen weights are a legitimate check (every epoch then scores the same).
    Rule(("task.lr", "task.weight_decay"), lambda v: _number(v) and v >= 0, "a number >= 0"),
    Rule(("task.gradient_clip_val",), lambda v: _number(v) and v > 0, "a number > 0 or null", True),
    Rule(
        (
            "force",
            "model.norm_first",
            "model.final_norm",
            "model.compile",
            "task.instance_norm",
            "task.lower_case",
        ),
        lambda v: isinstance(v, bool),
        "true or false",
    ),
    Rule(("model.bptt",), lambda v: isinstance(v, bool), "true or false", owners=CRT),
    choice("model.activation", ACTIVATIONS),
    choice("model.path", PATHS, AAREN),
    choice("model.rnn", RNN_KINDS, CRT),
    choice("model.position_rnn", RNN_KINDS, CRT),
    choice("model.ncgru_inverse", ("neumann", "exact"), CRT),
    Rule(
        ("model.compile_backend",),
        lambda v: v in list_backends(exclude_tags=()),
        "a torch.compile backend (torch._dynamo.list_backends(exclude_tags=()): inductor, aot_eager, ...)",
    ),
    choice("task.test_checkpoint", ("best", "last")),
    Rule(("stage1",), lambda v: isinstance(v, str) and bool(v), "the stage-1 run's checkpoint file"),
)
FAMILY_RULES: dict[str, tuple[Rule, ...]] = {}


def register_family_rules(family: str, *rules: Rule) -> None:
    """``family``'s own rules, checked after :data:`RULES` as if they ended that table.

    Rules rather than a check function, so that a family's bad value competes with the core's as
    before (the key the user set wins over a copy of it). Registering a family again replaces its
    rules.
    """
    FAMILY_RULES[family] = rules


def models_sized_by(cfg: DictConfig) -> list[str]:
    """The ``conf/model`` options whose every ``???`` size this config's ``model`` node sets: the
    models its task serves (a video task sizes TimeSformer and CR-ViT, not a sequence backbone)."""
    node = cfg.get("model")
    if not isinstance(node, DictConfig):
        return []
    suits = []
    for path in sorted((CONFIG_DIR / "model").glob("*.yaml")):
        sizes = OmegaConf.load(path)
        unset = [k for k in sizes if isinstance(k, str) and OmegaConf.is_missing(sizes, k)]
        if unset and all(k in node and not OmegaConf.is_missing(node, k) for k in unset):
            suits.append(path.stem)
    return suits


def _unset_message(cfg: DictConfig, key: str) -> str:
    """Model files leave their sizes to the task (conf/README.md), so a size left unset usually means
    a model the task does not serve (an Aaren with a video task): the line says so and names the
    models the task does serve, rather than asking for the one key."""
    model, task = (OmegaConf.select(cfg, name, default=None) for name in ("model.name", "task.name"))
    suits = models_sized_by(cfg) if key.startswith("model.") else []
    if not suits:
        pairing = f"model={model} suit task {task}" if model and task else "the model suit the task"
        hint = f" (the task sets the model's sizes: does {pairing}?)" if key.startswith("model.") else ""
        return f"{key} has no value (???); set it, e.g. {key}=<value>{hint}"
    return (
        f"model={model} does not fit task {task}: the model leaves {key} to the task, which does not "
        f"set it; use a model whose sizes it sets: model={', model='.join(suits)}"
    )


def _value(cfg: DictConfig, key: str) -> Any:
    """The resolved value at ``key``, or ``ABSENT`` when this config has no such key."""
    try:
        return OmegaConf.select(cfg, key, default=ABSENT, throw_on_missing=True)
    except MissingMandatoryValue:
        raise ConfigError(_unset_message(cfg, key)) from None
    except InterpolationResolutionError as err:
        raise ConfigError(f"{key}: cannot resolve its value ({str(err).splitlines()[0]})") from None


def _interpolated(cfg: DictConfig, key: str) -> bool:
    """True when ``key`` copies another key (``${task.seg_len}``): the user set that one instead."""
    parent, _, leaf = key.rpartition(".")
    node = OmegaConf.select(cfg, parent) if parent else cfg
    return OmegaConf.is_interpolation(node, leaf)


def require_resolvable(cfg: DictConfig) -> None:
    """Every ``${...}`` resolves, or one :class:`ConfigError` line names the key that does not.

    A model and a task that do not fit together (``model=timesformer`` with a TSF task, whose
    clip sizes it reads) or a mistyped interpolation would otherwise stop in an OmegaConf traceback.
    """
    try:
        OmegaConf.to_container(cfg, resolve=True)
    except OmegaConfBaseException as err:
        key = getattr(err, "full_key", None) or "the config"
        raise ConfigError(
            f"{key} does not resolve: {str(err).splitlines()[0]} (does this model=... fit this task=...?)"
        ) from None


def check_config(cfg: DictConfig) -> None:
    """Raise :class:`ConfigError` on the first value a run would crash on or silently misuse.

    A bad value copied by interpolation fails at several keys; the message names the one it was
    set at, not a copy. Last, every other interpolation must resolve (:func:`require_resolvable`).
    """
    check_protocol(cfg)
    target = _value(cfg, "model._target_")
    rules = [
        rule
        for rule in (*RULES, *(rule for family in FAMILY_RULES.values() for rule in family))
        if not rule.owners or target in rule.owners
    ]
    failures = [
        (key, value, rule)
        for rule in rules
        for key in rule.keys
        if (value := _value(cfg, key)) is not ABSENT
        and not (value is None and rule.nullable)
        and not rule.accepts(value)
    ]
    if failures:
        key, value, rule = min(failures, key=lambda failure: _interpolated(cfg, failure[0]))
        raise ConfigError(f"{key}={value!r} is not allowed: use {rule.allowed}")
    d_model, n_heads = _value(cfg, "model.d_model"), _value(cfg, "model.n_heads")
    if d_model is not ABSENT and n_heads is not ABSENT and d_model % n_heads:
        raise ConfigError(
            f"model.d_model={d_model} is not divisible by model.n_heads={n_heads}: "
            "use a d_model that is a multiple of n_heads"
        )
    model = cfg.get("model")
    unset = (
        [key for key in model if OmegaConf.is_missing(model, key)] if isinstance(model, DictConfig) else []
    )
    if unset:  # a key the model leaves to the task (a video model's clip) that no rule names
        raise ConfigError(_unset_message(cfg, f"model.{unset[0]}"))
    check_accelerator(cfg)
    check_logger_installed(cfg)
    require_resolvable(cfg)


def check_protocol(cfg: DictConfig) -> None:
    """``task.compat`` names one of the family's protocols (``task.protocols``, one file each in
    ``conf/task/<family>/protocol/``), and the object it selects (``task.rules``) accepts its fields:
    its class checks their values, here before anything is built."""
    protocols = OmegaConf.select(cfg, "task.protocols", default=None)
    if not isinstance(protocols, DictConfig) or "rules" not in cfg.task:
        return
    compat, family = cfg.task.get("compat"), cfg.task.get("family")
    if compat not in protocols:
        raise ConfigError(
            f"task.compat={compat!r} is not allowed: use one of {', '.join(sorted(protocols))} "
            f"(the files of conf/task/{family}/protocol/)"
        )
    fields = OmegaConf.to_container(cfg.task.rules, resolve=True)
    target = fields.pop("_target_")
    try:
        get_class(target)(**fields)
    except TypeError as err:
        raise ConfigError(
            f"task.rules ({target}): {err}; conf/task/{family}/protocol/{compat}.yaml"
        ) from None


GPU_ACCELERATORS = ("gpu", "cuda")


def check_accelerator(cfg: DictConfig) -> None:
    """``trainer=gpu`` on a machine without a CUDA GPU stops here, before any data is read (Lightning
    would raise only after the datamodule has loaded, in a traceback)."""
    accelerator = _value(cfg, "trainer.accelerator")
    if accelerator in GPU_ACCELERATORS and not torch.cuda.is_available():
        build = f"CUDA {torch.version.cuda} build" if torch.version.cuda else "CPU-only build"
        raise ConfigError(
            f"trainer.accelerator={accelerator} (trainer=gpu) but torch {torch.__version__} ({build}) sees "
            "no CUDA GPU; use trainer=cpu, or on a GPU machine install torch's CUDA build (make setup)"
        )


# Config nodes whose keys the configs define: a key added to them by ``+key=value`` is a misspelling
# unless the user says otherwise (``++key=value``).
DEFINED_NODES = ("task", "model", "trainer", "preset")


def trainer_arguments() -> set[str]:
    """The arguments of Lightning's ``Trainer``, which ``trainer`` is instantiated into: one that
    conf/trainer does not set (``+trainer.max_steps``, as Hydra's own error suggests) is a real key."""
    import lightning.pytorch as pl  # train.py imports it anyway; checks that need it are rare

    return set(inspect.signature(pl.Trainer.__init__).parameters) - {"self"}


def check_added_keys(cfg: DictConfig, overrides: Sequence[str]) -> None:
    """A ``+task.lrr=0.1`` (Hydra suggests the ``+`` for a key it does not know) is one line naming
    the close keys, not a run at the default lr in a folder and table row of its own.

    Hydra refuses ``+`` on a key that exists, so every ``+`` key that reaches the app is one no config
    defines. ``++key=value`` (Hydra's "set or add") is the escape for a key one's own code reads.
    """
    for override in OverridesParser.create().parse_overrides(list(overrides)):
        key = override.key_or_group
        root = key.partition(".")[0]
        if (
            not override.is_add()
            or "." not in key
            or override.package is not None
            or root not in DEFINED_NODES
        ):
            continue
        parent, _, leaf = key.rpartition(".")
        if parent == "trainer" and leaf in trainer_arguments():
            continue
        node = OmegaConf.select(cfg, parent, default=None, throw_on_resolution_failure=False)
        siblings = [str(name) for name in node if name != leaf] if isinstance(node, DictConfig) else []
        close = [f"{parent}.{name}" for name in difflib.get_close_matches(leaf, siblings, n=3, cutoff=0.6)]
        hint = f"close names: {', '.join(close)}" if close else f"no key of {parent} is close"
        raise ConfigError(
            f"+{key}: no config defines {key} ({hint}); fix the name, "
            f"or write ++{key}=... to add a key that your own code reads"
        )


# Loggers whose package is an extra of the project, not a dependency: (module, extra).
LOGGER_EXTRAS = {"lightning.pytorch.loggers.WandbLogger": ("wandb", "wandb")}


def module_installed(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def check_logger_installed(cfg: DictConfig) -> None:
    """``logger=wandb`` where wandb is not installed stops here, naming the extra (Lightning would
    fail after the data had loaded, with a requirement line, exit 1 and a failed.json)."""
    target = OmegaConf.select(cfg, "logger._target_", default=None)
    if target in LOGGER_EXTRAS and not module_installed(LOGGER_EXTRAS[target][0]):
        module, extra = LOGGER_EXTRAS[target]
        raise ConfigError(
            f"logger={extra} needs the {module} package, which this install lacks: "
            f"pip install -e '.[{extra}]' (make setup installs it), or use logger=csv"
        )


SWEEP_SYNTAX = "()[]*$"  # choice(...), range(...), glob(...), interpolations: left to Hydra


def group_options(group: str) -> list[str]:
    """The options of a config group (``task`` -> ``tsf/etth1``, ...), as one types them."""
    folder = CONFIG_DIR / group
    return sorted(p.relative_to(folder).with_suffix("").as_posix() for p in folder.rglob("*.yaml"))


def check_group_choices(args: Sequence[str]) -> None:
    """A misspelt ``task=``/``model=`` (any group of ``conf/``) is one line naming close options.

    Runs on the command line before Hydra, whose own answer is several lines and exit 1. Groups
    under ``hydra/`` are left to Hydra (its plugins add options that ``conf/`` does not hold), and
    so is everything when ``hydra.searchpath`` adds config folders of the user's own.
    """
    if any(arg.lstrip("+").startswith("hydra.searchpath") for arg in args):
        return
    for arg in args:
        key, sep, value = arg.partition("=")
        group = key.lstrip("+~").partition("@")[0]
        if arg.startswith("-") or not sep or group.startswith("hydra") or not (CONFIG_DIR / group).is_dir():
            continue
        if any(c in value for c in SWEEP_SYNTAX):
            continue
        options = group_options(group)
        for choice in value.split(","):
            if choice and choice != "null" and choice not in options:
                shown = [o for o in options if not o.rpartition("/")[2].startswith("_")]
                close = difflib.get_close_matches(choice, shown, n=5, cutoff=0.6)
                hint = f"close names: {', '.join(close)}" if close else "no option is close"
                raise ConfigError(
                    f"{group}={choice} is not an option of conf/{group}/ ({hint}); "
                    "python train.py --help lists them all"
                )


REMOVED_KEYS: dict[str, str] = {
    "task.paper_models": "the CRT paper's LM models are model configs now: model=paper/transformer, "
    "paper/transformer_xl, paper/crt or paper/crt_gru, under either task.compat (docs/lm.md)",
    "task.time_every_layer": "it is a field of EF's protocol now: "
    "task.protocols.<default|reference>.time_every_layer",
    "task.embeddings": "each TSC protocol names its embedding: task.protocols.<default|reference>.embedding "
    "(task.embedding picks one for a run)",
    "task.selection_metric": "it is a field of TSC's protocol now: "
    "task.protocols.<default|reference>.selection_metric",
    "task.lr_schedules": "it is a field of TSC's protocol now: "
    "task.protocols.<default|reference>.lr_scheduler",
    "task.test_checkpoints": "each video protocol names its checkpoint: task.protocols.<default|reference>."
    "test_checkpoint (task.test_checkpoint picks one for a run)",
    "model.backbone": "the model node is the backbone's config now: model.<key>, e.g. model.d_model=64",
}
"""Override keys that the protocol objects and the flat model configs removed, and what replaced each
(a key and every key under it): Hydra's own answer is four lines that do not say where the key went."""


def check_removed_keys(args: Sequence[str]) -> None:
    """An override of a removed key (:data:`REMOVED_KEYS`) is one line naming its replacement."""
    for arg in args:
        key = arg.partition("=")[0].lstrip("+~")
        if arg.startswith("-"):
            continue
        for removed, instead in REMOVED_KEYS.items():
            if key == removed or key.startswith(removed + "."):
                raise ConfigError(f"{key} was removed: {instead}")


# Hydra's flags that take the next word as their value (``--cfg job``), which is no override.
VALUE_FLAGS = ("--config-path", "-cp", "--config-name", "-cn", "--config-dir", "-cd", "--cfg", "-c")
VALUE_FLAGS += ("--package", "-p", "--info", "-i", "--experimental-rerun")


def check_override_syntax(args: Sequence[str]) -> None:
    """An override Hydra's grammar cannot read is one line saying how to quote it.

    A path with a space, typed without quotes, reaches the command as two words (the second one no
    ``key=value``); one with a non-ASCII letter or a bracket stops Hydra's lexer. Both work quoted,
    ``key='my data/données.csv'``, which Hydra's own message does not say.
    """
    parser = OverridesParser.create()
    previous = ""
    for arg in args:
        follows = previous
        previous = arg
        if arg.startswith("-") or follows in VALUE_FLAGS:
            continue
        try:
            parser.parse_overrides([arg])
        except OverrideParseException:
            if "=" not in arg and "=" in follows and not follows.startswith("-"):
                key, _, value = follows.partition("=")
                raise ConfigError(
                    f"{arg!r} is not key=value: a value with a space reaches train.py as two words; "
                    f"quote it, e.g. \"{key}='{value} {arg}'\""
                ) from None
            key, sep, value = arg.partition("=")
            if sep:
                raise ConfigError(
                    f"{key}={value}: Hydra cannot read this value unquoted (a space, a non-ASCII letter or "
                    f"one of ()[]{{}},:'\" in it); quote it, e.g. \"{key}='{value}'\""
                ) from None
            raise ConfigError(f"{arg!r} is not key=value; python train.py --help shows the forms") from None

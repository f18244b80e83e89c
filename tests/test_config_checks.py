"""``check_config`` on configs composed from the real ``conf/``: every shipped combination passes,
and each value a user can mistype is refused in one line naming the key, the value and the rule."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from recurrent_attention.config import CONFIG_DIR, register_resolvers
from recurrent_attention.config_checks import (
    REMOVED_KEYS,
    ConfigError,
    check_added_keys,
    check_config,
    check_group_choices,
    check_override_syntax,
    check_removed_keys,
)
from tests.conftest import ROOT
from tests.e2e.test_configs import FIRST_TASK_OF_FAMILY

register_resolvers()


def composed(*overrides: str):
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        return compose("train", overrides=list(overrides))


@pytest.mark.parametrize("task", sorted(FIRST_TASK_OF_FAMILY.values()))
@pytest.mark.parametrize("preset", ["smoke", "paper"])
def test_shipped_presets_pass(task: str, preset: str) -> None:
    """Every task and model pair passes in tests/e2e/test_configs.py (cpu preset); here the other presets."""
    model = "timesformer" if task.startswith("video/") else "aaren"
    check_config(composed(f"task={task}", f"model={model}", f"preset={preset}"))


BAD = [
    # (overrides, key named in the message, value named, what is allowed)
    (["task=tsf/etth1", "task.pred_len=0"], "task.pred_len", "0", "positive integer"),
    (["task=tsf/etth1", "task.seq_len=-4"], "task.seq_len", "-4", "positive integer"),
    (["model.d_model=0"], "model.d_model", "0", "positive integer"),
    (["model.n_heads=0"], "model.n_heads", "0", "positive integer"),
    (["model.n_layers=0"], "model.n_layers", "0", "positive integer"),
    (["model.d_model=64.0"], "model.d_model", "64.0", "positive integer"),
    (["model.d_model=true"], "model.d_model", "True", "positive integer"),
    (["seed=abc"], "seed", "'abc'", "integer from 0"),
    (["seed=1.5"], "seed", "1.5", "integer from 0"),
    (["seed=-1"], "seed", "-1", "integer from 0"),
    (["task.batch_size=0"], "task.batch_size", "0", "positive integer"),
    (["task.max_epochs=0"], "task.max_epochs", "0", "positive integer"),
    # a run that would take no optimiser step: a random initialisation's metrics, never a result
    (["trainer.max_epochs=0"], "trainer.max_epochs", "0", "positive integer"),
    (["trainer.max_epochs=abc"], "trainer.max_epochs", "'abc'", "positive integer"),
    (["trainer.max_epochs=1.5"], "trainer.max_epochs", "1.5", "positive integer"),
    (["+trainer.max_steps=0"], "trainer.max_steps", "0", "-1 (no limit)"),
    (["trainer.limit_train_batches=0"], "trainer.limit_train_batches", "0", "integer > 0"),
    (["trainer.limit_train_batches=0.0"], "trainer.limit_train_batches", "0.0", "fraction in (0, 1]"),
    (["trainer.limit_train_batches=1.5"], "trainer.limit_train_batches", "1.5", "fraction in (0, 1]"),
    (["trainer.limit_test_batches=0"], "trainer.limit_test_batches", "0", "integer > 0"),
    (["model.dropout=1.0"], "model.dropout", "1.0", "[0, 1)"),
    (["model.dropout=-0.1"], "model.dropout", "-0.1", "[0, 1)"),
    (["task.lr=-1e-3"], "task.lr", "-0.001", ">= 0"),
    (["task.lr=nan"], "task.lr", "nan", ">= 0"),
    (["model=aaren", "model.path=scann"], "model.path", "'scann'", "chunked"),
    (["model=aaren", "model.attn_dropout=0.1"], "model.attn_dropout", "0.1", "no attention probabilities"),
    (["model.activation=swish"], "model.activation", "'swish'", "gelu, relu"),
    (["task=tsf/etth1", "task.features=X"], "task.features", "'X'", "M, S"),
    (["task=tsf/etth1", "task.freq=q"], "task.freq", "'q'", "one of"),
    (["task=tsc/handwriting", "task.val_fraction=1.0"], "task.val_fraction", "1.0", "(0, 1)"),
    (["task=tsc/handwriting", "task.head=mean"], "task.head", "'mean'", "flatten, last"),
    (["task=tsc/handwriting", "task.embedding=conv"], "task.embedding", "'conv'", "linear, tslib_conv"),
    (["task=ef/mimic", "task.format=csv"], "task.format", "'csv'", "easytpp"),
    (["task=ef/mimic", "task.weight_decay=-1"], "task.weight_decay", "-1", ">= 0"),
    # model.seg_len copies task.seg_len: the message names the key the user set
    (["task=lm/ptb", "model=crt", "task.seg_len=0"], "task.seg_len", "0", "positive integer"),
    (["task=lm/ptb", "task.tokens_per_step=0"], "task.tokens_per_step", "0", "or null"),
    (["task=lm/ptb", "model=crt", "model.rnn=lstm"], "model.rnn", "'lstm'", "gru, gru_eq4, ncgru"),
    (["model.compile=yes"], "model.compile", "'yes'", "true or false"),
    (["model.compile_backend=inductr"], "model.compile_backend", "'inductr'", "inductor, aot_eager"),
]


@pytest.mark.parametrize(("overrides", "key", "value", "allowed"), BAD, ids=[" ".join(b[0]) for b in BAD])
def test_bad_value_names_key_value_and_rule(overrides: list[str], key: str, value: str, allowed: str) -> None:
    with pytest.raises(ConfigError) as info:
        check_config(composed(*overrides))
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{key}={value} ") and allowed in message


def test_an_architectures_own_rules_reach_only_its_backbones() -> None:
    """Aaren's ``path`` and CRT's ``rnn``/``bptt`` rules are theirs: a backbone with options of those
    names and values of its own (linear attention's ``path=parallel``, an ``rnn: lstm``, an integer
    ``bptt``) passes, and its constructor checks them (the next test)."""
    check_config(
        composed("model=linear_attention", "model.path=parallel", "+model.rnn=lstm", "+model.bptt=3")
    )


@pytest.mark.slow
def test_a_bad_option_refused_by_a_backbone_constructor_is_one_line(tmp_path) -> None:
    """``model.path=scan`` is Aaren's, not linear attention's: the constructor's ValueError stops the
    run with its one line and exit 2, as the up-front checks do."""
    from tests.conftest import run_train

    proc = run_train(["preset=smoke", "model=linear_attention", "model.path=scan"], tmp_path, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "error: model.path='scan': choose one of chunked, parallel, recurrent\n" in proc.stderr
    assert not list(tmp_path.rglob("summary.json"))


def test_d_model_must_divide_into_heads() -> None:
    with pytest.raises(ConfigError, match=r"model\.d_model=10 is not divisible by model\.n_heads=4"):
        check_config(composed("model.d_model=10", "model.n_heads=4"))


def test_nullable_keys_accept_null() -> None:
    check_config(composed("task=lm/ptb", "task.tokens_per_step=null", "task.gradient_clip_val=null"))


def test_unset_mandatory_value_is_named() -> None:
    cfg = composed("task=ef/wiki")
    cfg.task.n_marks = "???"
    with pytest.raises(ConfigError, match=r"task\.n_marks has no value"):
        check_config(cfg)


@pytest.mark.parametrize("model", ["aaren", "linear_attention"])
def test_a_model_size_left_unset_names_the_models_the_task_takes(model: str) -> None:
    """Model files leave sizes to the task: a sequence backbone with a video task (which sizes
    TimeSformer and CR-ViT) has no norm_first; the bug: the line asked for model.norm_first alone."""
    with pytest.raises(ConfigError) as info:
        check_config(composed("task=video/smarthome_cs", f"model={model}"))
    assert str(info.value) == (
        f"model={model} does not fit task smarthome_cs: the model leaves model.norm_first to the task, "
        "which does not set it; use a model whose sizes it sets: model=timesformer"
    )


def test_config_error_is_a_value_error() -> None:
    assert issubclass(ConfigError, ValueError)


@pytest.mark.slow
def test_train_py_stops_on_a_bad_value_with_one_line(tmp_path) -> None:
    """The check runs in train.py before anything is built: exit 2, one line, no traceback."""
    from tests.conftest import run_train

    proc = run_train(["preset=smoke", "model.n_heads=0"], tmp_path, check=False)
    assert proc.returncode == 2
    assert "model.n_heads=0 is not allowed" in proc.stderr and "Traceback" not in proc.stderr
    assert not list(tmp_path.rglob("summary.json"))


@pytest.mark.slow
def test_a_model_that_does_not_fit_the_task_is_one_line(tmp_path) -> None:
    """A video transformer leaves its clip size to a video task: with a TSF task, one line, exit 2."""
    from tests.conftest import run_train

    proc = run_train(["preset=smoke", "model=timesformer", "task=tsf/etth1"], tmp_path, check=False)
    assert proc.returncode == 2
    assert "model=timesformer does not fit task" in proc.stderr and "Traceback" not in proc.stderr
    assert "leaves model.img_size to the task" in proc.stderr


@pytest.mark.parametrize(
    ("override", "line"),
    [
        ("+task.lrr=0.1", "+task.lrr: no config defines task.lrr (close names: task.lr); fix the name, "),
        ("+model.n_head=2", "+model.n_head: no config defines model.n_head (close names: model.n_heads); "),
        ("+trainer.max_epoch=2", "+trainer.max_epoch: no config defines trainer.max_epoch (close names: "),
        ("+model.zzz=1", "+model.zzz: no config defines model.zzz (no key of model is close); fix the name"),
    ],
)
def test_a_key_added_under_a_defined_node_is_a_misspelling(override: str, line: str) -> None:
    with pytest.raises(ConfigError) as caught:
        check_added_keys(composed("task=tsf/etth1", override), [override])
    assert str(caught.value).startswith(line) and f"++{override[1:].partition('=')[0]}=" in str(caught.value)


def test_an_added_lightning_trainer_argument_is_a_key_then_checked_by_its_rule() -> None:
    """The loop: Hydra answers ``trainer.max_steps=0`` "use +trainer.max_steps=0", which was then
    refused as a misspelling of trainer.max_epochs; Lightning's Trainer reads it, and its rule applies."""
    overrides = ["+trainer.max_steps=0"]
    cfg = composed("task=tsf/etth1", *overrides)
    check_added_keys(cfg, overrides)
    with pytest.raises(ConfigError, match=r"^trainer\.max_steps=0 is not allowed: use -1 \(no limit\)"):
        check_config(cfg)
    with pytest.raises(ConfigError, match=r"^\+trainer\.max_step: no config defines"):
        check_added_keys(composed("task=tsf/etth1", "+trainer.max_step=3"), ["+trainer.max_step=3"])


def test_force_added_keys_and_keys_of_own_nodes_pass() -> None:
    """``++`` is the escape; ``+callbacks.*`` and config groups are not keys of a defined node."""
    overrides = ["++task.lrr=0.1", "+callbacks.x._target_=a.B", "+experiment=crt/ptb_3layer_cpu", "task.lr=1"]
    check_added_keys(composed("task=tsf/etth1", "++task.lrr=0.1", "+callbacks.x._target_=a.B"), overrides)


@pytest.mark.slow
def test_train_py_refuses_a_misspelt_added_key_in_one_line(tmp_path) -> None:
    from tests.conftest import run_train

    proc = run_train(["preset=smoke", "+task.lrr=0.1"], tmp_path, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert (
        proc.stderr.strip().splitlines()[-1].startswith("error: +task.lrr: no config defines task.lrr (close")
    )
    assert not list(tmp_path.rglob("*.json"))


def test_a_logger_whose_extra_is_not_installed_is_one_line(monkeypatch) -> None:
    from recurrent_attention import config_checks

    monkeypatch.setattr(config_checks, "module_installed", lambda name: name != "wandb")
    with pytest.raises(
        ConfigError, match=r"^logger=wandb needs the wandb package, .*pip install -e '\.\[wandb\]'"
    ):
        check_config(composed("preset=smoke", "logger=wandb"))
    check_config(composed("preset=smoke", "logger=tensorboard"))


@pytest.mark.slow
def test_logger_wandb_runs_offline_without_a_key_or_names_its_extra(tmp_path, monkeypatch) -> None:
    """Installed (make setup): the run finishes offline; a pip install without the extra: one line."""
    from recurrent_attention.config_checks import module_installed
    from tests.conftest import run_train
    from tests.tasks.tsf.test_data import write_ett_csv

    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    data = tmp_path / "ETTh1.csv"  # an own file: the run needs no data mirror or network
    write_ett_csv(data, 14400)
    settings = [
        "preset=smoke",
        "logger=wandb",
        f"task.datamodule.path={data}",
        "task.pred_len=8",
        "task.seq_len=16",
    ]
    proc = run_train(settings, tmp_path / "out", check=False)
    if module_installed("wandb"):
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert list((tmp_path / "out").rglob("summary.json")) and list(
            (tmp_path / "out").rglob("offline-run-*")
        )
    else:
        assert proc.returncode == 2 and not list((tmp_path / "out").rglob("failed.json"))
        assert proc.stderr.strip().splitlines()[-1].startswith("error: logger=wandb needs the wandb package")


def test_unresolvable_config_is_a_config_error() -> None:
    cfg = composed("task=tsf/etth1", "model.norm_eps=${task.crop_size}")
    with pytest.raises(ConfigError, match=r"model\.norm_eps does not resolve"):
        check_config(cfg)


def test_a_video_model_with_a_sequence_task_names_the_clip_size_it_lacks() -> None:
    cfg = composed("task=tsf/etth1", "model=timesformer")
    with pytest.raises(
        ConfigError, match=r"model=timesformer does not fit .* leaves model\.img_size to the task"
    ):
        check_config(cfg)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a CUDA GPU")
def test_trainer_gpu_without_a_gpu_stops_before_any_data_is_read() -> None:
    with pytest.raises(
        ConfigError, match=r"trainer.accelerator=gpu \(trainer=gpu\) but torch .* sees no CUDA GPU"
    ):
        check_config(composed("trainer=gpu"))


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["task=tsf/etth9"],
            "task=tsf/etth9 is not an option of conf/task/ (close names: tsf/etth2, tsf/etth1",
        ),
        (
            ["-m", "model=transformer,aaron", "seed=1,2"],
            "model=aaron is not an option of conf/model/ (close names: aaren)",
        ),
        (["preset=fast"], "preset=fast is not an option of conf/preset/ (no option is close)"),
        (
            ["+experiment=aaren/tfs"],
            "experiment=aaren/tfs is not an option of conf/experiment/ (close names: aaren/tsf",
        ),
    ],
)
def test_a_misspelt_group_choice_names_the_close_ones(args: list[str], line: str) -> None:
    with pytest.raises(ConfigError) as err:
        check_group_choices(args)
    assert str(err.value).startswith(line)


def test_group_choices_that_exist_or_are_sweep_syntax_pass() -> None:
    check_group_choices(["task=tsf/etth1", "model=transformer,aaren", "experiment=null", "task.lr=0.1"])
    check_group_choices(["model=choice(aaren,transformer)", "hydra/launcher=joblib", "--cfg", "job"])
    check_group_choices(["task/video/optimizer@task.module.optimizer=adamw"])
    check_group_choices(["hydra.searchpath=[file:///my/conf]", "task=mine/own_task"])


@pytest.mark.slow
def test_train_py_answers_a_misspelt_model_in_one_line_with_exit_2() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), "model=aaron"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "error: model=aaron is not an option of conf/model/ (close names: aaren); "
        "python train.py --help lists them all"
    ]


@pytest.mark.parametrize(
    ("args", "line"),
    [
        # a path with a space, unquoted: the shell splits it into two words
        (
            ["task=tsf/etth1", "task.datamodule.path=/tmp/my", "data.csv"],
            "'data.csv' is not key=value: a value with a space reaches train.py as two words; quote it, "
            "e.g. \"task.datamodule.path='/tmp/my data.csv'\"",
        ),
        (
            ["task.datamodule.path=/tmp/données.csv"],
            "task.datamodule.path=/tmp/données.csv: Hydra cannot read this value unquoted (a space, a "
            "non-ASCII letter or one of ()[]{},:'\" in it); quote it, "
            "e.g. \"task.datamodule.path='/tmp/données.csv'\"",
        ),
    ],
)
def test_an_override_hydra_cannot_read_says_how_to_quote_it(args: list[str], line: str) -> None:
    """The bug: Hydra's lexer error, with nothing saying that quoting works."""
    with pytest.raises(ConfigError) as info:
        check_override_syntax(args)
    assert str(info.value) == line


def test_overrides_hydra_reads_pass_the_syntax_check() -> None:
    quoted = "task.datamodule.path='/tmp/my data/données.csv'"
    check_override_syntax(["-m", "model=aaren,transformer", "seed=range(1,3)", quoted, "--cfg", "job"])


@pytest.mark.parametrize(
    ("arg", "line"),
    [
        (
            "task.paper_models=true",
            "task.paper_models was removed: the CRT paper's LM models are model configs now",
        ),
        (
            "+task.time_every_layer=false",
            "task.time_every_layer was removed: it is a field of EF's protocol now",
        ),
        (
            "model.backbone.d_model=64",
            "model.backbone.d_model was removed: the model node is the backbone's config",
        ),
    ],
)
def test_an_override_of_a_removed_key_names_what_replaced_it(arg: str, line: str) -> None:
    with pytest.raises(ConfigError) as err:
        check_removed_keys(["model=crt", arg])
    assert str(err.value).startswith(line)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("task", "model"),
    [
        ("lm/ptb", "crt"),
        ("ef/mimic", "aaren"),
        ("tsc/japanesevowels", "aaren"),
        ("video/smarthome_cs", "cr_vit"),
    ],
)
def test_no_removed_key_is_in_a_composed_config_and_its_neighbours_pass(task: str, model: str) -> None:
    """The check stops what Hydra would refuse, never a key the configs still hold: none of the removed
    keys (nor a key under one) is in a family's composed config, and keys beside them pass."""
    cfg = composed(f"task={task}", f"model={model}")
    for removed in REMOVED_KEYS:
        assert OmegaConf.select(cfg, removed, default=None) is None, removed
    check_removed_keys(
        ["task.paper_models_note=1", "model.backbones=2", "task.embedding=linear", "task.lr=0.1"]
    )

"""The README's description of the cpu preset states the limits the preset actually sets."""

from __future__ import annotations

from hydra import compose, initialize_config_dir

from recurrent_attention.config import CONFIG_DIR, register_resolvers
from tests.conftest import ROOT


def test_readme_cpu_preset_row_matches_the_preset() -> None:
    register_resolvers()
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("train", overrides=["preset=cpu"])
    (row,) = [line for line in (ROOT / "README.md").read_text().splitlines() if line.startswith("| `cpu`")]
    trainer = cfg.trainer
    assert (
        f"at most {trainer.limit_train_batches} training and {trainer.limit_val_batches} validation batches"
        in row
    )
    assert f"{cfg.task.max_epochs} epochs" in row
    assert f"d_model {cfg.model.d_model}, {cfg.model.n_heads} heads, d_ff {cfg.model.d_ff}" in row

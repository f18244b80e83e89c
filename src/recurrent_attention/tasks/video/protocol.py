"""Video's protocol: how Smarthome clips are validated and tested (conf/task/video/protocol/)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from recurrent_attention.tasks.protocol import TaskProtocol


@dataclass(frozen=True)
class VideoProtocol(TaskProtocol):
    """``val_view``: ``centre`` (one deterministic view, so epochs compare) or ``random`` (a
    training-style view: random window, scale jitter, crop and flip; PI-ViT).
    ``eval_short_side``: evaluation views resized so their short side is the ``crop`` or
    ``short_side_min`` (then centre-cropped; PI-ViT). ``truncate_frame_indices``: a view's frame
    positions truncated as PI-ViT's decoder does, else rounded. ``view_scores``: the test views'
    ``softmax`` probabilities combined, or their raw ``logits`` max-combined into a zero buffer
    (PI-ViT's ``TestMeter``). ``test_checkpoint``: the ``best`` validation checkpoint or the ``last``
    is tested (``task.test_checkpoint``, which ``train.py`` reads)."""

    family = "video"
    choices: ClassVar[dict[str, tuple[str, ...]]] = {
        "val_view": ("centre", "random"),
        "eval_short_side": ("crop", "short_side_min"),
        "view_scores": ("softmax", "logits"),
        "test_checkpoint": ("best", "last"),
    }
    val_view: str
    eval_short_side: str
    truncate_frame_indices: bool
    view_scores: str
    test_checkpoint: str


# conf/task/video/protocol/default.yaml, for a task built without a config (a test holds them equal)
DEFAULT = VideoProtocol(
    val_view="centre",
    eval_short_side="crop",
    truncate_frame_indices=False,
    view_scores="softmax",
    test_checkpoint="best",
)

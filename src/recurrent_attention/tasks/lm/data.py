"""Word-level corpora (PTB, WikiText), contiguous batching into streams, windows of segments.

Reading follows Transformer-XL: every line is split on whitespace and ends with one ``<eos>``
(blank WikiText lines become a lone ``<eos>``), so PTB train has 887,521 words + 42,068 ``<eos>``.
The vocabulary is built from the training file only: ``<eos>`` first, then words by decreasing
count (ties in order of first appearance); ``<unk>`` is an ordinary word of these corpora.

Batching: the token stream is cut into ``B`` contiguous streams (the tail that does not divide
evenly is dropped), so row b of every batch continues row b of the previous one and a carried
state stays meaningful. A training item is a window of ``bptt_segments`` consecutive segments
(one optimiser step; the module runs the segments in order and truncates BPTT at the window);
an evaluation item is one segment. Items are returned in order, never shuffled.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import lightning as L
import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from recurrent_attention.data import DataError, DataLocation, describe_origin
from recurrent_attention.data.reading import reading
from recurrent_attention.errors import ConfigError
from recurrent_attention.tasks.base import distributed_world, loader_options, make_loader

EOS, UNK = "<eos>", "<unk>"
SPLIT_FILES = {"train": "train", "val": "valid", "test": "test"}


def line_tokens(path: str | Path, lower_case: bool = False) -> Iterator[list[str]]:
    """The words of each line of ``path`` followed by ``<eos>``; bytes that are not UTF-8 name their line."""
    with reading(path, "UTF-8 text corpus"), open(path, encoding="utf-8") as fh:
        try:
            for line in fh:
                words = line.lower().split() if lower_case else line.split()
                words.append(EOS)
                yield words
        except UnicodeDecodeError:
            raise DataError(f"{path}: line {first_undecodable_line(path)} is not UTF-8 text") from None


def first_undecodable_line(path: str | Path) -> int:
    """Text mode decodes in blocks, so the failing line is found again byte line by byte line."""
    with open(path, "rb") as fh:
        for number, raw in enumerate(fh, start=1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError:
                return number
    return 0


class Vocabulary:
    """Word <-> id, built from the training file; unknown words map to ``<unk>`` when it exists."""

    def __init__(self, symbols: list[str]) -> None:
        self.symbols = symbols
        self.index = {s: i for i, s in enumerate(symbols)}
        if len(self.index) != len(symbols):
            raise ValueError("vocabulary symbols must be unique")

    @classmethod
    def from_file(cls, path: str | Path, lower_case: bool = False) -> Vocabulary:
        counts: Counter[str] = Counter()
        for words in line_tokens(path, lower_case):
            counts.update(words[:-1])
        counts.pop(EOS, None)
        if not counts:
            raise DataError(f"{path}: holds no words; a training corpus needs at least one")
        return cls([EOS, *(word for word, _ in counts.most_common())])

    def __len__(self) -> int:
        return len(self.symbols)

    def encode_file(self, path: str | Path, lower_case: bool = False) -> Tensor:
        """Token ids of the whole file as one ``int64`` tensor."""
        unk = self.index.get(UNK)
        index = self.index

        def ids() -> Iterator[int]:
            for words in line_tokens(path, lower_case):
                for word in words:
                    i = index.get(word, unk)
                    if i is None:
                        raise DataError(
                            f"{path}: word {word!r} is not in the training vocabulary and there is no {UNK}"
                        )
                    yield i

        return torch.from_numpy(np.fromiter(ids(), dtype=np.int64))


def batchify(ids: Tensor, n_streams: int, source: str | Path = "the corpus") -> Tensor:
    """``(T,)`` -> ``(n_streams, T // n_streams)``: stream b is the b-th contiguous chunk of the corpus."""
    length = ids.numel() // n_streams
    if length < 2:
        raise DataError(f"{source}: {ids.numel()} tokens are too few for {n_streams} streams")
    return ids[: n_streams * length].view(n_streams, length)


class SegmentWindows(Dataset):
    """Item i: inputs ``x`` and next-token targets ``y`` of window i, both ``(B, <= window)``."""

    def __init__(self, streams: Tensor, window: int) -> None:
        self.streams, self.window = streams, window

    def __len__(self) -> int:
        return -(-(self.streams.shape[1] - 1) // self.window)

    def __getitem__(self, i: int) -> dict[str, Tensor]:
        if not 0 <= i < len(self):
            raise IndexError(i)
        start = i * self.window
        end = min(start + self.window, self.streams.shape[1] - 1)
        return {"x": self.streams[:, start:end], "y": self.streams[:, start + 1 : end + 1]}


class LMDataModule(L.LightningDataModule):
    """A registered corpus (``train``/``valid``/``test`` files) as ordered windows of segments.

    ``tokens_per_step`` (optional) replaces ``batch_size`` by ``tokens_per_step / (seg_len x
    bptt_segments)`` streams, so that every segment length gets the same tokens per optimiser step
    and the same number of steps for a given share of the epoch (short CPU budgets compare models
    at equal optimisation effort). WikiText comes from its release zip or from its Hugging Face copy
    written back in the release's line format; both give the same files, and ``origins`` (logged at
    setup) says which route produced each file read. ``files`` maps ``train``/``valid``/``test`` to
    explicit paths (own data, test fixtures) and bypasses the registry. ``vocab_size`` is what the
    model was built for; a corpus whose training vocabulary differs is an error, not a silent
    resize. Items are already batches (B streams x one window), hence ``DataLoader(batch_size=None)``.

    Under DDP the streams, not the windows, are shared out: each process reads whole streams in
    order, so the memory a backbone carries from window to window stays intact. Training has
    ``batch_size`` streams per process (as Lightning's batch size is per device); evaluation
    splits the ``eval_batch_size`` streams of one process between the processes, so every token
    is scored once, exactly as on one process.
    """

    def __init__(
        self,
        source: str,
        vocab_size: int,
        seg_len: int,
        bptt_segments: int = 1,
        batch_size: int = 20,
        eval_batch_size: int = 10,
        tokens_per_step: int | None = None,
        lower_case: bool = False,
        files: dict[str, str] | None = None,
        data_dir: str = "data",
        mirror: str | None = None,
        download: bool = True,
        num_workers: int = 0,
        pin_memory: bool = False,
        persistent_workers: bool = False,
    ) -> None:
        super().__init__()
        self.source, self.vocab_size, self.lower_case = source, vocab_size, lower_case
        self.loader_options = loader_options(num_workers, pin_memory, persistent_workers)
        self.seg_len, self.bptt_segments = seg_len, bptt_segments
        if tokens_per_step is not None:
            batch_size = max(1, round(tokens_per_step / (seg_len * bptt_segments)))
        self.batch_size, self.eval_batch_size = batch_size, eval_batch_size
        missing = [key for key in SPLIT_FILES.values() if files is not None and not files.get(key)]
        if missing:
            raise ConfigError(
                f"task.files has no {', '.join(missing)}: own corpora need all three, e.g. "
                "task.files='{train: a.txt, valid: b.txt, test: c.txt}'"
            )
        self.files, self.location = files, DataLocation(source, data_dir, mirror, download)
        self.vocab: Vocabulary | None = None
        self.datasets: dict[str, SegmentWindows] = {}
        self.origins: dict[str, str] = {}

    def file(self, key: str) -> Path:
        if self.files is not None:
            path, origin = Path(self.files[key]), "given in task.files"
        else:
            path = self.location.registered(key)
            origin = describe_origin(path)
        self.origins[key] = f"{path} (from {origin})"
        return path

    def prepare_data(self) -> None:
        for key in SPLIT_FILES.values():
            self.file(key)

    def setup(self, stage: str | None = None) -> None:
        if self.datasets:
            return
        self.vocab = Vocabulary.from_file(self.file("train"), self.lower_case)
        if len(self.vocab) != self.vocab_size:
            raise DataError(
                f"{self.source}: the training vocabulary has {len(self.vocab)} words but "
                f"task.vocab_size={self.vocab_size}; set task.vocab_size={len(self.vocab)}"
            )
        rank, world = distributed_world()
        if self.eval_batch_size % world:
            raise ConfigError(
                f"task.eval_batch_size={self.eval_batch_size} streams cannot be shared by {world} "
                "processes: make it a multiple of the number of devices"
            )
        for split, key in SPLIT_FILES.items():
            path = self.file(key)
            ids = self.vocab.encode_file(path, self.lower_case)
            if split == "train":
                streams = batchify(ids, self.batch_size * world, path)
                window = self.seg_len * self.bptt_segments
            else:
                streams, window = batchify(ids, self.eval_batch_size, path), self.seg_len
            self.datasets[split] = SegmentWindows(streams[rank::world], window)
        for key in SPLIT_FILES.values():
            rank_zero_info(f"{self.source} {key}: {self.origins[key]}")

    def _loader(self, split: str) -> DataLoader:
        return make_loader(
            self.datasets[split], batch_size=None, shuffle=False, rank_local=True, **self.loader_options
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader("train")

    def val_dataloader(self) -> DataLoader:
        return self._loader("val")

    def test_dataloader(self) -> DataLoader:
        return self._loader("test")

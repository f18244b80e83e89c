"""WikiText's two download routes, served offline in their real formats.

- the release zip (``wikitext-2/wiki.valid.tokens`` ...) over local HTTP from a server that, like
  wikitext.smerity.com, answers 403 to Python's default ``Python-urllib`` User-Agent;
- a Hugging Face dataset folder laid out as ``Salesforce/wikitext`` on the Hub (README.md with the
  config's data files, one parquet file per split), readable by ``datasets.load_dataset``.
"""

from __future__ import annotations

import hashlib
import http.server
import threading
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from recurrent_attention.data.sources import Archive, HFDataset, Source, SourceFile

HF_SPLITS = {"train": "train", "valid": "validation", "test": "test"}


def hub_rows(release_text: str) -> list[str]:
    """The rows Hugging Face's wikitext builder made from a release file.

    It iterated over the file's lines and stored each as is, except that a line holding only
    whitespace became ``""`` (datasets/wikitext/wikitext.py, ``_generate_examples``).
    """
    lines = [line + "\n" for line in release_text.split("\n")[:-1]]
    return [line if line.strip() else "" for line in lines]


def write_hub_folder(root: Path, config: str, texts: dict[str, str]) -> Path:
    """A dataset folder like ``Salesforce/wikitext``: ``<config>/<split>-00000-of-00001.parquet``."""
    import datasets

    data_files = []
    for key, text in texts.items():
        split = HF_SPLITS[key]
        (root / config).mkdir(parents=True, exist_ok=True)
        datasets.Dataset.from_dict({"text": hub_rows(text)}).to_parquet(
            root / config / f"{split}-00000-of-00001.parquet"
        )
        data_files.append(f"  - split: {split}\n    path: {config}/{split}-*")
    readme = "---\nconfigs:\n- config_name: " + config + "\n  data_files:\n" + "\n".join(data_files)
    (root / "README.md").write_text(readme + "\n---\n# test copy of a WikiText config\n")
    return root


def write_release_zip(path: Path, folder: str, texts: dict[str, str]) -> Path:
    """A zip laid out as the release: ``<folder>/wiki.<key>.tokens``, plus the folder entry."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(f"{folder}/", b"")
        for key, text in texts.items():
            zf.writestr(f"{folder}/wiki.{key}.tokens", text.encode("utf-8"))
    return path


class _RefusesPythonAgent(http.server.SimpleHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.headers.get("User-Agent", "").startswith("Python-urllib"):
            self.send_error(403, "Forbidden")
            return
        super().do_GET()

    def log_message(self, *args) -> None:
        pass


@contextmanager
def serve_folder(folder: Path) -> Iterator[str]:
    """Serve ``folder`` on localhost; yields the base URL."""

    def handler(*args, **kwargs):
        return _RefusesPythonAgent(*args, directory=str(folder), **kwargs)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def wikitext_source(
    name: str, folder: str, zip_url: str, zip_path: Path, hub: Path, config: str, keys: list[str]
) -> Source:
    """A registry entry shaped like ``wikitext2``: the release zip first, the Hub folder second."""
    files = {key: SourceFile(f"{folder}/wiki.{key}.tokens", archive="release") for key in keys}
    zip_bytes = zip_path.read_bytes()
    return Source(
        name,
        "lm",
        files,
        archives={"release": Archive(zip_url, hashlib.sha256(zip_bytes).hexdigest(), size=len(zip_bytes))},
        hf=HFDataset(str(hub), name=config, splits={key: HF_SPLITS[key] for key in keys}),
    )

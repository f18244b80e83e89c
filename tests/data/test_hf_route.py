"""WikiText's two routes (release zip, Hugging Face copy) give byte-identical files, offline.

Truths used: hand-written release text; the HF builder's row rule (tests/helpers/wikitext_routes.py);
the split sizes Hugging Face published for wikitext-2-v1 (dataset_infos.json: 3760 / 4358 rows,
1134127 / 1270951 Arrow bytes); the release token counts (Merity et al. 2017, Table 1); the
sha256 of the WikiText-2 valid/test copies in ../shared/data.
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from recurrent_attention.cli.download_data import main as download_data
from recurrent_attention.data import DataError, describe_origin, get_source, resolve_file, sha256sum
from recurrent_attention.data import sources as sources_module
from recurrent_attention.data.hf import HFRouteError, dataset_rows, write_split
from recurrent_attention.tasks.lm.data import Vocabulary, line_tokens
from tests.helpers.wikitext_routes import (
    hub_rows,
    serve_folder,
    wikitext_source,
    write_hub_folder,
    write_release_zip,
)

datasets = pytest.importorskip("datasets")

ROOT = Path(__file__).resolve().parents[2]
SHARED_WT2 = Path(os.environ.get("RA_DATA_MIRROR") or ROOT.parent / "shared" / "data") / "wikitext-2"

# A release excerpt: blank lines are " \n", words are space-separated with a leading and a trailing
# space, non-ASCII kept; U+2028 inside a line must not split it.
RELEASE = (
    " \n = Valkyria Chronicles III = \n \n"
    " Senjō no Valkyria 3 : <unk> Chronicles ( Japanese : 戦場のヴァルキュリア3 ) is a game . \n"
    " \n = = Gameplay = = \n \n It costs 1 @,@ 000 yen \u2028 in Japan . \n"
)
ROWS = [
    "",
    " = Valkyria Chronicles III = \n",
    "",
    " Senjō no Valkyria 3 : <unk> Chronicles ( Japanese : 戦場のヴァルキュリア3 ) is a game . \n",
    "",
    " = = Gameplay = = \n",
    "",
    " It costs 1 @,@ 000 yen \u2028 in Japan . \n",
]


def test_rows_written_back_are_the_release_bytes(tmp_path: Path) -> None:
    split = datasets.Dataset.from_dict({"text": ROWS})
    dest = tmp_path / "wikitext-2" / "wiki.test.tokens"
    assert write_split(dataset_rows(split), dest, total=split.num_rows) == len(ROWS)
    assert dest.read_bytes() == RELEASE.encode("utf-8")
    assert hub_rows(RELEASE) == ROWS  # the builder's rule read from the same text gives the same rows


@pytest.mark.parametrize("bad", [" no newline at the end ", " two \n lines \n"])
def test_a_row_that_is_not_one_line_is_refused_and_nothing_is_left(tmp_path: Path, bad: str) -> None:
    dest = tmp_path / "wiki.test.tokens"
    with pytest.raises(HFRouteError, match="not one line"):
        write_split(["", bad], dest)
    assert list(tmp_path.iterdir()) == []


needs_shared = pytest.mark.skipif(
    not (SHARED_WT2 / "wiki.valid.tokens").is_file(),
    reason="no WikiText-2 copy in $RA_DATA_MIRROR or ../shared/data",
)


@needs_shared
@pytest.mark.parametrize(("key", "rows", "arrow_bytes"), [("valid", 3760, 1134127), ("test", 4358, 1270951)])
def test_shared_wikitext2_as_hugging_face_rows_has_the_published_split_size(
    tmp_path: Path, key: str, rows: int, arrow_bytes: int
) -> None:
    """Hugging Face's num_bytes is the Arrow string column: UTF-8 data + int32 offsets (rows + 1).

    It matches only if every row is the line with its newline and blank lines are "" (keeping
    " \\n" or dropping the newline both give other sizes), so this pins the row format; writing
    the rows back must give the release file, whose sha256 the registry holds.
    """
    release = SHARED_WT2 / f"wiki.{key}.tokens"
    split = datasets.Dataset.from_dict({"text": hub_rows(release.read_text(encoding="utf-8"))})
    assert split.num_rows == rows
    assert sum(len(r.encode("utf-8")) for r in split["text"]) + 4 * (rows + 1) == arrow_bytes
    dest = tmp_path / f"wiki.{key}.tokens"
    write_split(dataset_rows(split), dest, total=split.num_rows)
    assert dest.read_bytes() == release.read_bytes()
    assert sha256sum(dest) == get_source("wikitext2").file(key).sha256


def _resolve_by_both_routes(tmp_path: Path, monkeypatch, texts: dict[str, str]) -> tuple[dict, dict]:
    """Files of a WikiText-shaped source fetched (a) from the release zip over HTTP, (b) from the Hub copy."""
    served = tmp_path / "served"
    zip_path = write_release_zip(served / "wikitext-2-v1.zip", "wikitext-2", texts)
    hub = write_hub_folder(tmp_path / "hub", "wikitext-2-v1", texts)
    monkeypatch.delenv("RA_DATA_MIRROR", raising=False)
    paths = {}
    with serve_folder(served) as base:
        with pytest.raises(urllib.error.HTTPError, match="403"):  # the server refuses urllib's own agent
            urllib.request.urlopen(f"{base}/wikitext-2-v1.zip")
        for route, url in (("zip", f"{base}/wikitext-2-v1.zip"), ("hf", f"{base}/gone/wikitext-2-v1.zip")):
            source = wikitext_source("wt", "wikitext-2", url, zip_path, hub, "wikitext-2-v1", list(texts))
            monkeypatch.setattr(sources_module, "registry", lambda source=source: {"wt": source})
            paths[route] = {key: resolve_file("wt", key, tmp_path / route) for key in texts}
    return paths["zip"], paths["hf"]


def test_both_routes_write_the_same_files_and_record_which_route(tmp_path: Path, monkeypatch) -> None:
    texts = {"train": RELEASE * 3, "valid": RELEASE, "test": RELEASE.replace("Japan", "<unk>")}
    by_zip, by_hf = _resolve_by_both_routes(tmp_path, monkeypatch, texts)
    for key, text in texts.items():
        assert by_zip[key].read_bytes() == by_hf[key].read_bytes() == text.encode("utf-8")
        assert describe_origin(by_zip[key]).endswith("/wikitext-2-v1.zip")
        assert describe_origin(by_hf[key]).startswith("Hugging Face datasets ")
    assert not list((tmp_path / "hf").rglob(".wiki.*")), "no temporary file left behind"


@needs_shared
def test_shared_wikitext2_reads_the_same_whichever_route_produced_it(tmp_path: Path, monkeypatch) -> None:
    texts = {
        key: (SHARED_WT2 / f"wiki.{key}.tokens").read_text(encoding="utf-8") for key in ("valid", "test")
    }
    registered_sha = {key: get_source("wikitext2").file(key).sha256 for key in texts}
    by_zip, by_hf = _resolve_by_both_routes(tmp_path, monkeypatch, texts)
    # Merity et al. (2017), Table 1: tokens incl. one <eos> per line; lines as torchtext counts them.
    for key, tokens, lines in (("valid", 217646, 3760), ("test", 245569, 4358)):
        for path in (by_zip[key], by_hf[key]):
            assert sum(1 for _ in line_tokens(path)) == lines
            assert Vocabulary.from_file(path).encode_file(path).numel() == tokens
            assert sha256sum(path) == registered_sha[key]


def test_neither_route_reachable_is_one_line_naming_both(tmp_path: Path, monkeypatch, capsys) -> None:
    zip_path = write_release_zip(tmp_path / "unused.zip", "wikitext-2", {"valid": RELEASE})
    missing = (tmp_path / "gone" / "wikitext-2-v1.zip").as_uri()
    source = wikitext_source("wt", "wikitext-2", missing, zip_path, tmp_path / "no_hub", "cfg", ["valid"])
    monkeypatch.setattr(sources_module, "registry", lambda: {"wt": source})
    monkeypatch.delenv("RA_DATA_MIRROR", raising=False)
    assert download_data(["wt", "--data-dir", str(tmp_path / "data")]) == 1
    message = capsys.readouterr().err.strip()
    assert "\n" not in message and message.startswith("error: wikitext-2/wiki.valid.tokens: not found")
    assert missing in message and f"Hugging Face datasets {tmp_path / 'no_hub'}:cfg" in message
    assert "scripts/download_data.py wt" in message and "RA_DATA_MIRROR" in message


def test_without_the_datasets_package_the_error_names_the_extra(tmp_path: Path, monkeypatch) -> None:
    zip_path = write_release_zip(tmp_path / "unused.zip", "wikitext-2", {"valid": RELEASE})
    missing = (tmp_path / "gone.zip").as_uri()
    source = wikitext_source("wt", "wikitext-2", missing, zip_path, tmp_path / "hub", "cfg", ["valid"])
    monkeypatch.setattr(sources_module, "registry", lambda: {"wt": source})
    monkeypatch.setitem(sys.modules, "datasets", None)  # import datasets -> ImportError
    monkeypatch.delenv("RA_DATA_MIRROR", raising=False)
    with pytest.raises(DataError, match=r"pip install 'recurrent-attention\[hf\]'"):
        resolve_file("wt", "valid", tmp_path / "data")


def test_archive_of_the_wrong_size_is_reported_as_incomplete(tmp_path: Path, monkeypatch) -> None:
    zip_path = write_release_zip(tmp_path / "served" / "w.zip", "wikitext-2", {"valid": RELEASE})
    source = wikitext_source("wt", "wikitext-2", zip_path.as_uri(), zip_path, tmp_path, "cfg", ["valid"])
    truncated = tmp_path / "data" / ".archives" / "w.zip"
    truncated.parent.mkdir(parents=True)
    truncated.write_bytes(zip_path.read_bytes()[:-10])
    monkeypatch.setattr(sources_module, "registry", lambda: {"wt": source})
    monkeypatch.delenv("RA_DATA_MIRROR", raising=False)
    with pytest.raises(DataError, match="incomplete"):
        resolve_file("wt", "valid", tmp_path / "data")


def test_registered_wikitext_routes() -> None:
    """The registry names the author's mirror first, with the published sizes, then Salesforce/wikitext."""
    for name, config, size in (
        ("wikitext103", "wikitext-103-v1", 190229076),
        ("wikitext2", "wikitext-2-v1", 4475746),
    ):
        source = get_source(name)
        archive = source.archives["release"]
        assert archive.url == f"https://wikitext.smerity.com/{config}.zip"
        assert archive.size == size and archive.sha256 is not None
        assert source.hf is not None and (source.hf.path, source.hf.name) == ("Salesforce/wikitext", config)
        assert source.hf.splits == {"train": "train", "valid": "validation", "test": "test"}

"""The repo carries its own design: no file cites a document outside it, and the docs' links resolve.

The design and protocol documents once lived beside the checkout (``../shared/DESIGN.md``,
``PROTOCOLS.md``), which a clone does not have; they are ``docs/design.md`` and
``docs/protocols.md`` now. Data folders outside the repo (the mirror ``../shared/data``, the papers'
numbers under ``RA_REFERENCE_DIR``) are not documents and stay allowed.
"""

from __future__ import annotations

import re
import subprocess
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TEXT_SUFFIXES = {".md", ".py", ".yaml", ".yml", ".toml", ".txt", ".cfg", ".sh", ".cpp", ".h"}
# Without git (a copy of the tree) these hold every tracked text file that can cite a document.
FALLBACK_ROOTS = ("src", "tests", "conf", "docs", "scripts")
# A path to a document: a name ending in .md, .pdf or .txt, not the tail of a longer path or of a
# formatted one or a placeholder (``f"{folder}/table.md"``, ``<out>/bench.md``).
DOCUMENT = re.compile(r"(?<![\w{}<>/.-])[\w./-]*\w\.(?:md|pdf|txt)\b")
# A project document cited by its bare name: an upper-case stem (README.md, DESIGN.md).
PROJECT_DOCUMENT = re.compile(r"[A-Z][A-Z_]*\.md")
# A markdown link's target: [text](target) or [text](target "title").
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


@cache
def tracked_text_files() -> tuple[Path, ...]:
    """Every tracked text file (``git ls-files``; without git, the source folders and top-level files)."""
    try:
        listed = subprocess.run(
            ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.split()
        paths = [ROOT / name for name in listed]
    except (OSError, subprocess.CalledProcessError):
        paths = [p for root in FALLBACK_ROOTS for p in (ROOT / root).rglob("*")] + list(ROOT.glob("*"))
    return tuple(
        sorted(p for p in paths if p.is_file() and (p.suffix in TEXT_SUFFIXES or p.name == "Makefile"))
    )


def outside_citations(path: Path, text: str) -> list[str]:
    """The documents ``text`` (the content of ``path``) cites that are not in the repo.

    A path is outside when, read from the file's folder and from the repo root (prose cites either
    way), it exists in neither and leaves the repo from one (``../shared/DESIGN.md``); a project
    document named bare (``PROTOCOLS.md``) is outside when no tracked file has that name.
    """
    names = {p.name for p in tracked_text_files()}
    found = []
    for match in DOCUMENT.finditer(text):
        cited = match.group(0)
        if "/" not in cited:
            if PROJECT_DOCUMENT.fullmatch(cited) and cited not in names:
                found.append(cited)
            continue
        candidates = [(base / cited).resolve() for base in (path.parent, ROOT)]
        inside = [c for c in candidates if c.is_relative_to(ROOT)]
        if len(inside) < len(candidates) and not any(c.exists() for c in inside):
            found.append(cited)
    return found


def test_outside_citations_on_hand_made_text() -> None:
    here = ROOT / "docs" / "design.md"
    assert outside_citations(here, "see ../shared/DESIGN.md and PROTOCOLS.md") == [
        "../shared/DESIGN.md",
        "PROTOCOLS.md",
    ]
    inside = "see [tsc](tsc.md), ../CONTRIBUTING.md, README.md, docs/protocols.md and ptb.train.txt."
    assert outside_citations(here, inside) == []
    assert outside_citations(ROOT / "scripts" / "bench.py", 'f"{out}/bench.md", ../../notes.txt') == [
        "../../notes.txt"
    ]


def test_no_tracked_file_cites_a_document_outside_the_repo() -> None:
    cited = {
        str(path.relative_to(ROOT)): found
        for path in tracked_text_files()
        if path != Path(__file__).resolve()  # this file names them as its examples
        and (found := outside_citations(path, path.read_text(errors="replace")))
    }
    assert not cited, f"documents outside the repo cited: {cited}; cite docs/design.md or docs/protocols.md"


def broken_links(path: Path, text: str) -> list[str]:
    """The links in ``text`` (the content of markdown file ``path``) to repo paths that do not exist
    (web links and anchors are not checked)."""
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        resolved = (path.parent / target.split("#")[0]).resolve()
        if not (resolved.is_relative_to(ROOT) and resolved.exists()):
            broken.append(target)
    return broken


def test_broken_links_on_a_hand_made_page(tmp_path: Path) -> None:
    page = ROOT / "docs" / "hand_made_page.md"
    text = "[a](https://x.org) [b](#top) [c](design.md#layers) [d](../README.md) [e](missing.md)"
    assert broken_links(page, text) == ["missing.md"]


@pytest.mark.parametrize("page", sorted((ROOT / "docs").glob("*.md")), ids=lambda p: p.name)
def test_every_docs_link_to_a_repo_path_resolves(page: Path) -> None:
    broken = broken_links(page, page.read_text())
    assert not broken, f"docs/{page.name} links to paths that do not exist: {broken}"


@pytest.mark.parametrize("name", ["design.md", "protocols.md"])
def test_the_design_documents_are_in_the_repo(name: str) -> None:
    assert (ROOT / "docs" / name).is_file(), f"docs/{name} is missing: the repo carries its own design"

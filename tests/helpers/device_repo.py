"""A GPU window simulated on this CPU: a clean git checkout of the working tree, stand-in wheels, and
the copy a GPU machine receives (the tree without ``.git``).

The checkout copies what ``git`` would commit from this working tree (tracked files and untracked
ones not ignored), so the tests exercise the code as it is now, not as last committed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import zipfile
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GIT_ENV = {
    "GIT_AUTHOR_NAME": "test",
    "GIT_AUTHOR_EMAIL": "test@example.invalid",
    "GIT_COMMITTER_NAME": "test",
    "GIT_COMMITTER_EMAIL": "test@example.invalid",
}


def _files(repo: Path) -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [f for f in listed.split("\0") if f and ((repo / f).exists() or (repo / f).is_symlink())]


def copy_files(source: Path, dest: Path, files: list[str]) -> None:
    """``files`` of ``source`` into ``dest``, links kept as links (the package's ``conf`` is one)."""
    for relative in files:
        src, dst = source / relative, dest / relative
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            os.symlink(os.readlink(src), dst)
        elif src.is_file():
            shutil.copyfile(src, dst)
            shutil.copymode(src, dst)


def clean_checkout(dest: Path) -> Path:
    """``dest``: a git repository with this working tree committed once; returns it."""
    copy_files(ROOT, dest, _files(ROOT))
    env = {**os.environ, **GIT_ENV}
    for command in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "snapshot"]):
        subprocess.run(["git", *command], cwd=dest, env=env, check=True, capture_output=True)
    return dest


def device_copy(repo: Path, dest: Path, carried: list[str]) -> Path:
    """What the device tool sends: the tracked files without ``.git``, plus the carried (ignored) paths."""
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=repo, capture_output=True, text=True, check=True
    ).stdout.split("\0")
    copy_files(repo, dest, [f for f in tracked if f])
    for path in carried:
        shutil.copytree(repo / path, dest / path, symlinks=True)
    return dest


def stand_in_wheels(folder: Path, names: tuple[str, ...]) -> Path:
    """A minimal valid wheel (metadata only) of each distribution at its installed version: pip installs
    it like the real one, and the real package stays importable from the test's environment."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        version = metadata.version(name)
        stem = f"{name.replace('-', '_').lower()}-{version}"
        info = f"{stem}.dist-info"
        files = {
            f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
            f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\n"
            "Tag: py3-none-any\n",
        }
        with zipfile.ZipFile(folder / f"{stem}-py3-none-any.whl", "w") as wheel:
            for path, text in files.items():
                wheel.writestr(path, text)
            wheel.writestr(f"{info}/RECORD", "".join(f"{p},,\n" for p in [*files, f"{info}/RECORD"]))
    return folder

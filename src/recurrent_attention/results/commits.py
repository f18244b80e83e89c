"""Committed tables come from runs of one clean commit, so anyone can check out that commit and rerun them.

Writing tables into the git checkout also changes tracked files, which stamps every later run
``-dirty``; so ``make tables`` writes to the git-ignored ``outputs/tables`` and only an explicit
``--out results`` (``make results``) rewrites committed tables, after :func:`commit_problems` passes.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pandas as pd

from recurrent_attention.results.grouping import COUNTED

UNKNOWN = "unknown commit"


def commit_problems(runs: pd.DataFrame) -> list[str]:
    """Why these runs cannot make a committed table: uncommitted code, no commit, or several commits."""
    counted = runs[runs["status"].isin(COUNTED)]
    if counted.empty:
        return []
    commits = (
        counted["git_commit"].fillna(UNKNOWN)
        if "git_commit" in counted
        else counted["path"].map(lambda _: UNKNOWN)
    )
    problems = []
    for commit, part in counted.groupby(commits, sort=True):
        if commit.endswith("-dirty") or commit == UNKNOWN:
            why = "uncommitted changes" if commit.endswith("-dirty") else "no git commit recorded"
            problems.append(f"{len(part)} run(s) from {commit} ({why}): {', '.join(sorted(part['path']))}")
    if commits.nunique() > 1:
        counts = ", ".join(f"{c} ({n} run(s))" for c, n in sorted(commits.value_counts().items()))
        problems.append(f"runs from {commits.nunique()} commits: {counts}")
    return problems


def in_git_checkout(path: str | Path) -> bool:
    """Whether files written at ``path`` would be picked up by git (inside a work tree, not ignored)."""
    path = Path(path).resolve()
    anchor = next((p for p in (path, *path.parents) if p.is_dir()), None)
    if anchor is None:
        return False
    try:
        inside = subprocess.run(
            ["git", "rev-parse", "--is-inside-work-tree"], cwd=anchor, capture_output=True, text=True
        )
        if inside.returncode != 0 or inside.stdout.strip() != "true":
            return False
        ignored = subprocess.run(["git", "check-ignore", "-q", str(path)], cwd=anchor, capture_output=True)
    except OSError:
        return False
    return ignored.returncode != 0

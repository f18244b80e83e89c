"""The mutation-testing report (``make mutants``): per file, mutants killed, survived, timed out, equivalent.

Reads each file's ``cosmic-ray dump`` (JSON lines: a work item and its result, or null while pending)
and the reviewed list of equivalent mutants (``results/mutants/equivalents.csv``). An equivalent is
keyed by what a rerun makes again, not by cosmic-ray's job ids or positions: the file, the operator,
the line's text and the mutated line's text (both stripped), so edits elsewhere in the file keep it.
The score is killed (timeouts included: cosmic-ray counts them killed) over mutants run and not
equivalent.

The report is evidence at one commit, HEAD: each file's session records the commit it ran at, and a
file whose source at HEAD is not byte-identical to that commit's (git's blobs differ) is *stale*: its
mutants were made from another text, so it is listed and not counted. Tests added since a run do not
make it stale (they can only kill more; ``--retest-survivors`` runs the survivors against them).
"""

from __future__ import annotations

import csv
import json
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

EQUIVALENT_COLUMNS = ("file", "operator", "line", "mutated", "reason")
COUNTS = ("mutants", "killed", "timeout", "survived", "equivalent", "skipped", "pending")
CSV_COLUMNS = ("file", *COUNTS, "score", "commit", "stale")


@dataclass(frozen=True)
class Mutant:
    """One mutant as the report needs it: where, what, and how it ended (None: not run yet)."""

    file: str
    operator: str
    line_number: int
    line: str
    mutated: str
    outcome: str | None  # killed, timeout, survived, skipped, incompetent; None while pending
    job_id: str = ""

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.file, self.operator, self.line, self.mutated)


@dataclass
class FileCounts:
    """One file's row of the report."""

    file: str
    mutants: int = 0
    killed: int = 0
    timeout: int = 0
    survived: int = 0
    equivalent: int = 0
    skipped: int = 0
    pending: int = 0
    commit: str = ""  # the commit its session ran at ('' where not run)
    stale: bool = False  # its source at HEAD differs from that commit's: not counted
    survivors: list[Mutant] = field(default_factory=list)

    @property
    def score(self) -> float | None:
        """Killed over run and not equivalent; None where nothing counts yet."""
        counted = self.killed + self.timeout + self.survived
        return None if counted == 0 else (self.killed + self.timeout) / counted


def diff_lines(diff: str | None) -> tuple[str, str]:
    """The removed and the added line of a one-line unified diff, stripped ('' where none; empty lines
    skipped: a mutant of a file's last line without a newline removes and adds an empty one too)."""
    removed = added = ""
    for text in (diff or "").splitlines():
        if text.startswith("-") and not text.startswith("---") and text[1:].strip():
            removed = text[1:].strip()
        elif text.startswith("+") and not text.startswith("+++") and text[1:].strip():
            added = text[1:].strip()
    return removed, added


def outcome_of(result: dict | None) -> str | None:
    """A dump result's outcome: cosmic-ray records a timeout as killed with the output 'timeout'."""
    if result is None:
        return None
    if result.get("worker_outcome") == "skipped":
        # the operators filter's (an operator outside the reduced set: not a mutant of this run)
        return "filtered" if result.get("output") == "Filtered operator" else "skipped"
    test = result.get("test_outcome")
    if test == "killed" and (result.get("output") or "").strip() == "timeout":
        return "timeout"
    return test or result.get("worker_outcome")


def read_dump(lines: Iterable[str], file: str) -> list[Mutant]:
    """The mutants of one session's dump, ``file`` being the name the report gives its module."""
    mutants = []
    for text in lines:
        if not text.strip():
            continue
        item, result = json.loads(text)
        mutation = item["mutations"][0]
        line, mutated = diff_lines(result.get("diff") if result else None)
        mutants.append(
            Mutant(
                file=file,
                operator=mutation["operator_name"].removeprefix("core/"),
                line_number=int(mutation["start_pos"][0]),
                line=line,
                mutated=mutated,
                outcome=outcome_of(result),
                job_id=item["job_id"],
            )
        )
    return mutants


def read_equivalents(path: Path) -> dict[tuple[str, str, str, str], str]:
    """The reviewed equivalents: key -> the one-line reason."""
    if not path.exists():
        return {}
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    missing = [c for c in EQUIVALENT_COLUMNS if rows and c not in rows[0]]
    if missing:
        raise ValueError(f"{path}: columns {missing} missing; the header is {','.join(EQUIVALENT_COLUMNS)}")
    return {(r["file"], r["operator"], r["line"], r["mutated"]): r["reason"] for r in rows}


def count(mutants: Iterable[Mutant], equivalents: dict[tuple[str, str, str, str], str]) -> list[FileCounts]:
    """Per file counts, in the order files first appear; a survivor listed as equivalent is equivalent."""
    rows: dict[str, FileCounts] = {}
    for mutant in mutants:
        row = rows.setdefault(mutant.file, FileCounts(mutant.file))
        if mutant.outcome == "filtered":
            continue
        row.mutants += 1
        if mutant.outcome is None:
            row.pending += 1
        elif mutant.outcome == "survived" and mutant.key in equivalents:
            row.equivalent += 1
        elif mutant.outcome == "survived":
            row.survived += 1
            row.survivors.append(mutant)
        elif mutant.outcome in ("killed", "timeout"):
            setattr(row, mutant.outcome, getattr(row, mutant.outcome) + 1)
        else:  # in a function not mutated (NOT_MUTATED); incompetent mutants (none expected)
            row.skipped += 1
    return list(rows.values())


def git_blob(root: Path, revision: str, path: str) -> str | None:
    """git's hash of ``path`` at ``revision`` (a commit or HEAD); None where it has no such file."""
    done = subprocess.run(
        ["git", "rev-parse", "--verify", "-q", f"{revision}:{path}"],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() if done.returncode == 0 else None


def unchanged_since(root: Path, path: str, commit: str) -> bool:
    """Whether ``path`` (relative to the repository ``root``) is byte-identical at HEAD to ``commit``."""
    then = git_blob(root, commit, path)
    return then is not None and then == git_blob(root, "HEAD", path)


def short_head(root: Path) -> str:
    done = subprocess.run(
        ["git", "rev-parse", "--short=12", "HEAD"], cwd=root, capture_output=True, text=True, check=False
    )
    return done.stdout.strip() or "unknown"


def percent(value: float | None) -> str:
    return "" if value is None else f"{100 * value:.1f}"


def write_csv(rows: list[FileCounts], path: Path) -> None:
    """The per-file figures, one row per file."""
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(CSV_COLUMNS)
        for r in rows:
            stale = ("yes" if r.stale else "no") if r.mutants else ""
            writer.writerow(
                [r.file, *(getattr(r, name) for name in COUNTS), percent(r.score), r.commit, stale]
            )


def group_total(rows: list[FileCounts], prefix: str) -> FileCounts:
    """The sum of the rows whose file starts with ``prefix`` (``models/``, ``ops/``), stale ones left out."""
    total = FileCounts(f"{prefix}*")
    for r in rows:
        if r.file.startswith(prefix) and not r.stale:
            for name in COUNTS:
                setattr(total, name, getattr(total, name) + getattr(r, name))
    return total


def markdown(rows: list[FileCounts], equivalents: dict, head: str, command: str) -> str:
    """report.md: how it was run, the table, the groups' scores, every survivor and equivalent."""
    columns = (
        "| file | mutants | killed | timeout | survived | equivalent | skipped | pending | score % | run at |"
    )
    stale = [r for r in rows if r.stale]
    lines = [
        "# Mutation testing of the math",
        "",
        f"Valid at `{head}`: every counted file's source unchanged since its run (the commit each ran at:",
        "`run at`; a session continued after new tests keeps its first commit). Made with",
        f"`{command}` (cosmic-ray; how: docs/mutants.md). Score: killed",
        "(timeouts included) over mutants run and not equivalent. Mutants: those of the reduced operator",
        "set; skipped: in functions not mutated (`NOT_MUTATED`); pending: not run yet. To continue: `make",
        "mutants` again (each file's session is in `outputs/mutants/sessions/`; `RETEST=1` reruns the",
        "survivors not reviewed equivalent, after tests were added).",
        "",
        columns,
        "|" + "---|" * 10,
    ]
    groups = [group_total(rows, p) for p in ("ops/", "models/", "tasks/")]
    for r in [*rows, *groups]:
        when = f"{r.commit[:12]} (stale)" if r.stale else r.commit[:12]
        cells = [r.file, *(getattr(r, name) for name in COUNTS), percent(r.score), when]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    if stale:
        lines += ["", "## Stale (source changed since its run: not counted; delete its session to rerun)", ""]
        lines += [f"- `{r.file}`: ran at `{r.commit[:12]}`" for r in stale]
    lines += ["", "## Survivors (no test fails)", ""]
    for r in rows:
        for m in [] if r.stale else r.survivors:
            lines.append(f"- `{m.file}:{m.line_number}` {m.operator}: `{m.line}` -> `{m.mutated}`")
    lines += ["", "## Equivalent (reviewed: results/mutants/equivalents.csv)", ""]
    for (file, operator, line, mutated), reason in sorted(equivalents.items()):
        lines.append(f"- `{file}` {operator}: `{line}` -> `{mutated}`: {reason}")
    return "\n".join(lines) + "\n"


def write_report(
    dumps: dict[str, Path],
    out: Path,
    command: str,
    root: Path,
    commits: dict[str, str],
    package: str = "src/recurrent_attention",
) -> list[FileCounts]:
    """Read the dumps (file name -> its ``.jsonl``) and write report.md and mutants.csv in ``out``.

    ``commits``: the commit each file's session ran at; a file (``package/<file>`` in the repository
    at ``root``) whose text at HEAD differs from that commit's, or with no commit, is stale."""
    equivalents = read_equivalents(out / "equivalents.csv")
    mutants = [m for file, path in dumps.items() if path.exists() for m in read_dump(path.open(), file)]
    rows = count(mutants, equivalents)
    # the files not started yet: a row of zeros each, so the report says what remains
    rows += [FileCounts(file) for file in dumps if file not in {r.file for r in rows}]
    for r in rows:
        if r.mutants:
            r.commit = commits.get(r.file, "")
            r.stale = not (r.commit and unchanged_since(root, f"{package}/{r.file}", r.commit))
    out.mkdir(parents=True, exist_ok=True)
    write_csv(rows, out / "mutants.csv")
    (out / "report.md").write_text(markdown(rows, equivalents, short_head(root), command))
    return rows

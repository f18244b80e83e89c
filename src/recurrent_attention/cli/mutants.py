"""``make mutants``: mutation testing of the math (cosmic-ray), resumable, in a scratch copy.

python scripts/mutants.py [--only SUBSTRING ...] [--report-only]

Why cosmic-ray (not mutmut 3): it edits one file in place and runs one test command per mutant in a
new process, so ``@torch.library.custom_op`` registrations, the compiled kernels and ``torch.compile``
see ordinary modules; mutmut 3's trampolines wrap every function, which those do not survive.

Each file of :data:`TARGETS` is one cosmic-ray session (``outputs/mutants/sessions/<slug>.sqlite``),
mutated in ``outputs/mutants/tree/`` (the checkout's tracked and untracked, not ignored files, synced
at every start, so the working tree is never mutated and a mutant left behind by a kill is undone),
tested by only the test files that exercise it (``-x -n 0 -p no:cacheprovider``, a per-mutant timeout
of a few times the unmutated run's). A session that exists is not re-initialised: a rerun after a
kill continues with the mutants not yet run. The operators are a reduced set (:data:`OPERATORS`),
one or two replacements per site as mutmut makes, not cosmic-ray's every-operator-for-every-operator.
The report (``results/mutants/``) is :mod:`recurrent_attention.results.mutants`'s, from each
session's ``cosmic-ray dump``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from recurrent_attention.cli.mutants_server import third_party_modules
from recurrent_attention.results.mutants import git_blob, read_dump, read_equivalents, write_report

ROOT = Path(__file__).resolve().parents[3]
PKG = "src/recurrent_attention"
WORK = ROOT / "outputs" / "mutants"
SOCKET = WORK / "server.sock"

# file to mutate -> the test files that exercise it, run in this order: ops/, models/ (smaller files
# first), then ops/prefix_attention.py (579 mutants, hours: the rest are not kept waiting), then each
# family's metrics and likelihood code. Kept short: every mutant runs them.
TARGETS: dict[str, tuple[str, ...]] = {
    "ops/scan.py": (
        "tests/ops/test_prefix_attention.py",
        "tests/models/test_aaren_fast_paths.py::test_attention_step_without_guards_equals_combine_on_finite_scores",
        "tests/models/test_aaren_fast_paths.py::test_attention_step_equals_combine",
    ),
    "ops/attention_op.py": ("tests/ops/test_attention_op.py",),
    "ops/categorical.py": ("tests/ops/test_categorical.py",),
    "ops/projection.py": ("tests/ops/test_native.py",),
    "ops/native.py": ("tests/ops/test_native.py",),
    "ops/host_reads.py": ("tests/ops/test_attention_op.py",),
    "ops/linear_forms.py": ("tests/models/test_linear_attention.py",),
    "models/aaren.py": (
        "tests/models/test_aaren.py",
        "tests/models/test_aaren_fast_paths.py",
        "tests/models/test_config_defaults.py",
    ),
    "models/crt.py": (
        "tests/models/test_crt_definition.py",
        "tests/models/test_crt.py",
        "tests/models/test_config_defaults.py",
    ),
    "models/transformer.py": (
        "tests/models/test_backbone_contract.py",
        "tests/models/test_config_defaults.py",
    ),
    "models/blocks.py": ("tests/models/test_backbone_contract.py", "tests/models/test_head_projections.py"),
    "models/base.py": ("tests/models/test_backbone_contract.py",),
    "models/ncgru.py": ("tests/models/test_gru_eq4.py", "tests/models/test_ncgru.py"),
    "models/linear_attention.py": (
        "tests/models/test_linear_attention.py",
        "tests/models/test_config_defaults.py",
    ),
    "models/transformer_xl.py": (
        "tests/models/test_transformer_xl.py",
        "tests/models/test_config_defaults.py",
    ),
    "ops/prefix_attention.py": ("tests/ops/test_prefix_attention.py", "tests/ops/test_attention_op.py"),
    "tasks/ef/likelihood.py": ("tests/tasks/ef/test_likelihood.py", "tests/tasks/ef/test_meta_tpp_nll.py"),
    "tasks/ef/mixture.py": ("tests/tasks/ef/test_mixture.py", "tests/tasks/ef/test_likelihood.py"),
    "tasks/ef/metrics.py": ("tests/tasks/ef/test_likelihood.py", "tests/tasks/ef/test_meta_tpp_nll.py"),
    "tasks/tsf/metrics.py": ("tests/tasks/tsf/test_metrics_and_model.py",),
    "tasks/tsc/metrics.py": ("tests/tasks/tsc/test_metrics.py",),
    "tasks/lm/metrics.py": ("tests/tasks/lm/test_metrics_and_head.py",),
    "tasks/video/metrics.py": ("tests/tasks/video/test_metrics.py",),
}

# The operators kept: each site gets the replacements a slip of the pen makes (+ for -, < for <=,
# a number off by one, a flag flipped), not all eleven binary operators for each.
OPERATORS = (
    r"ReplaceBinaryOperator_(Add_Sub|Sub_Add|Mul_Div|Div_Mul|FloorDiv_Div|Mod_FloorDiv|Pow_Mul|MatMult_Mul)",
    r"ReplaceComparisonOperator_(Eq_NotEq|NotEq_Eq|Lt_LtE|LtE_Lt|Gt_GtE|GtE_Gt|Is_IsNot|IsNot_Is)",
    r"ReplaceUnaryOperator_(USub_UAdd|Delete_USub|Delete_Not)",
    r"AddNot|ReplaceTrueWithFalse|ReplaceFalseWithTrue|ReplaceAndWithOr|ReplaceOrWithAnd",
    r"ReplaceBreakWithContinue|ReplaceContinueWithBreak|NumberReplacer|ZeroIterationForLoop|RemoveDecorator",
)

# Functions not mutated, with why: a mutant there rebuilds the C++ kernels (minutes each: the
# flags, the CPU and the cache test make the build's name) or only changes a log line; what they
# decide is held by tests/ops/test_native.py.
NOT_MUTATED = {
    "ops/native.py": {
        "build_note",
        "_put_ninja_on_path",
        "arch_flags",
        "cpu_identity",
        "build_name",
        "built",
        "extension",
    },
}


def slug(target: str) -> str:
    """The session's file name for a target: ``ops/scan.py`` -> ``ops.scan``."""
    return target.removesuffix(".py").replace("/", ".")


def sync_tree(tree: Path) -> None:
    """Copy the checkout's tracked and untracked (not ignored) files and links into ``tree``, where they
    differ, so a mutant a kill left in place is undone and new tests arrive."""
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    for name in files.decode().split("\0"):
        source, target = ROOT / name, tree / name
        if name and source.is_symlink():  # e.g. the package's conf -> ../../conf: the same link there
            if not target.is_symlink() or os.readlink(target) != os.readlink(source):
                target.parent.mkdir(parents=True, exist_ok=True)
                target.unlink(missing_ok=True)
                target.symlink_to(os.readlink(source))
            continue
        if not name or not source.is_file():
            continue
        if not target.is_file() or target.read_bytes() != source.read_bytes():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def test_command(python: str, tests: tuple[str, ...], timeout: float) -> str:
    """One mutant's test run, forked by the server: only its files' tests, stop at the first failure."""
    client = f"{shlex.quote(python)} -m recurrent_attention.cli.mutants_server client"
    return (
        f"env PYTHONPATH={shlex.quote(str(ROOT / 'src'))} {client} {shlex.quote(str(SOCKET))} {timeout} "
        f"{shlex.quote(str(WORK / 'last_output.txt'))} -x -q -n 0 -p no:cacheprovider {' '.join(tests)}"
    )


def cosmic_ray(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """Run cosmic-ray's command line in this interpreter (the ``mutants`` extra)."""
    code = "import sys; from cosmic_ray.cli import main; sys.exit(main())"
    return subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, check=False)


def write_config(path: Path, target: str, command: str, timeout: float) -> None:
    """The session's cosmic-ray config: one module, the targeted test command, the operator filter."""
    keep = "|".join(f"(?:{pattern})" for pattern in OPERATORS)
    exclude = f"^(?!core/(?:{keep})$)"
    path.write_text(
        "[cosmic-ray]\n"
        f'module-path = "{PKG}/{target}"\n'
        f"timeout = {timeout}\n"
        "excluded-modules = []\n"
        f"test-command = {json.dumps(command)}\n"
        "[cosmic-ray.distributor]\n"
        'name = "local"\n'
        "[cosmic-ray.filters.operators-filter]\n"
        f"exclude-operators = [{json.dumps(exclude)}]\n"
    )


def skip_definitions(session: Path, target: str) -> None:
    """Mark the mutants inside :data:`NOT_MUTATED`'s functions as skipped (before any runs)."""
    names = NOT_MUTATED.get(target)
    if not names:
        return
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    with use_db(str(session), WorkDB.Mode.open) as db:
        for item in list(db.pending_work_items):
            if any(m.definition_name in names for m in item.mutations):
                db.set_result(
                    item.job_id,
                    WorkResult(output="Not mutated: build machinery", worker_outcome=WorkerOutcome.SKIPPED),
                )


def source_record(target: str) -> tuple[str, str]:
    """What a session mutates: the commit that holds it (HEAD, or ``uncommitted`` where the checkout's
    file differs from HEAD's: no commit holds the text that ran) and git's hash of the file."""
    path = f"{PKG}/{target}"
    blob = subprocess.run(
        ["git", "hash-object", path], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    return (head if git_blob(ROOT, "HEAD", path) == blob else "uncommitted"), blob


def recorded_source(session: Path) -> tuple[str, str] | None:
    """The ``(commit, blob)`` a session was started on (``<slug>.source``), None where not recorded."""
    record = session.with_suffix(".source")
    if not record.exists():
        return None
    commit, blob = record.read_text().split()
    return commit, blob


def baseline_seconds(python: str, tree: Path, tests: tuple[str, ...]) -> float | None:
    """Seconds the unmutated tests take through the server; None (and why, printed) where they fail."""
    start = time.monotonic()
    done = subprocess.run(
        shlex.split(test_command(python, tests, 1800)), cwd=tree, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        print(f"the unmutated tests fail in {tree}: {' '.join(tests)}\n{done.stdout[-2000:]}", flush=True)
        return None
    return time.monotonic() - start


def start_server(python: str, tree: Path) -> subprocess.Popen:
    """The fork server (mutants_server), once it has imported the third-party modules."""
    modules = third_party_modules(tree, python)
    server = subprocess.Popen(
        [python, "-m", "recurrent_attention.cli.mutants_server", "serve", str(SOCKET), str(tree), *modules],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        stdout=subprocess.PIPE,
        text=True,
    )
    ready = server.stdout.readline() if server.stdout else ""
    if "ready" not in ready:
        raise SystemExit(f"the mutants server did not start: {ready!r}")
    print(ready.strip(), flush=True)
    return server


def run_target(target: str, python: str, tree: Path, sessions: Path, retest: bool = False) -> None:
    """Initialise (once) and run the pending mutants of one file; dump its results as JSON lines.
    The config is rewritten at every start (its timeout kept), so a change of :data:`TARGETS` applies;
    ``retest`` sends the file's survivors not reviewed equivalent back to pending (after tests were added)."""
    name = slug(target)
    session, config = sessions / f"{name}.sqlite", sessions / f"{name}.toml"
    tests = TARGETS[target]
    if not session.exists():
        seconds = baseline_seconds(python, tree, tests)
        if seconds is None:
            print(f"{target}: not run (its unmutated tests fail); the next file follows", flush=True)
            return
        timeout = round(max(60.0, 3 * seconds + 20))
        # cosmic-ray's own limit is the server's plus slack: the server kills a child past its own
        write_config(config, target, test_command(python, tests, timeout), timeout + 60)
        partial = session.with_suffix(".init")
        partial.unlink(missing_ok=True)
        if cosmic_ray("init", str(config), str(partial), cwd=tree).returncode != 0:
            raise SystemExit(f"cosmic-ray init failed for {target}")
        filters = "import sys; from cosmic_ray.tools.filters.operators_filter import main; sys.exit(main())"
        subprocess.run([sys.executable, "-c", filters, str(partial), str(config)], cwd=tree, check=True)
        skip_definitions(partial, target)
        partial.rename(session)
        session.with_suffix(".source").write_text(" ".join(source_record(target)) + "\n")
        print(f"{target}: baseline {seconds:.0f} s, per-mutant timeout {timeout} s", flush=True)
    else:
        recorded = recorded_source(session)
        if recorded is None or recorded[1] != source_record(target)[1]:
            ran_at = recorded[0][:12] if recorded else "an unrecorded commit"
            print(
                f"{target}: stale, its session ran on another text (at {ran_at}): delete {session} to rerun"
            )
            return
        timeout = round(float(re.search(r"^timeout = (\S+)$", config.read_text(), re.M)[1])) - 60
        write_config(config, target, test_command(python, tests, timeout), timeout + 60)
        if retest:
            dump(session)
            equivalents = read_equivalents(ROOT / "results" / "mutants" / "equivalents.csv")
            with session.with_suffix(".jsonl").open() as lines:
                again = [
                    (m.job_id,)
                    for m in read_dump(lines, target)
                    if m.outcome == "survived" and m.key not in equivalents
                ]
            with sqlite3.connect(session) as db:
                db.executemany("DELETE FROM work_results WHERE job_id = ?", again)
            print(f"{target}: {len(again)} survivors (not reviewed equivalent) to run again", flush=True)
    cosmic_ray("exec", str(config), str(session), cwd=tree)
    dump(session)


def dump(session: Path) -> None:
    """``cosmic-ray dump`` of a session into ``<slug>.jsonl`` (what the report reads)."""
    code = "import sys; from cosmic_ray.cli import main; sys.exit(main())"
    out = subprocess.run(
        [sys.executable, "-c", code, "dump", str(session)], capture_output=True, text=True, check=False
    ).stdout
    session.with_suffix(".jsonl").write_text(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", nargs="*", default=[], help="targets whose path contains one of these")
    parser.add_argument("--python", default=sys.executable, help="the interpreter that runs the tests")
    parser.add_argument("--report-only", action="store_true", help="dump the sessions and write the report")
    parser.add_argument("--retest-survivors", action="store_true", help="run each file's survivors again")
    args = parser.parse_args(argv)
    try:
        import cosmic_ray  # noqa: F401
    except ImportError:
        print("cosmic-ray is missing: pip install -e '.[mutants]' (make mutants does)", file=sys.stderr)
        return 2
    tree, sessions = WORK / "tree", WORK / "sessions"
    sessions.mkdir(parents=True, exist_ok=True)
    targets = [t for t in TARGETS if not args.only or any(part in t for part in args.only)]
    if not args.report_only:
        sync_tree(tree)
        # the kernels' first build (minutes) happens here once, not inside a mutant's timeout
        subprocess.run(
            [args.python, "scripts/build_kernels.py"],
            cwd=tree,
            env={**os.environ, "PYTHONPATH": "src"},
            check=True,
        )
        for cache in [*tree.glob("src/**/__pycache__"), *tree.glob("tests/**/__pycache__")]:
            shutil.rmtree(cache)  # a mutant must never meet a stale .pyc (none is written from here on)
        server = start_server(args.python, tree)
        try:
            for target in targets:
                run_target(target, args.python, tree, sessions, args.retest_survivors)
        finally:
            server.kill()
            server.wait()
    for target in targets:
        if (sessions / f"{slug(target)}.sqlite").exists():
            dump(sessions / f"{slug(target)}.sqlite")
    dumps = {target: sessions / f"{slug(target)}.jsonl" for target in TARGETS}
    recorded = {target: recorded_source(sessions / f"{slug(target)}.sqlite") for target in TARGETS}
    commits = {target: record[0] for target, record in recorded.items() if record}
    rows = write_report(dumps, ROOT / "results" / "mutants", "make mutants", ROOT, commits, PKG)
    for row in rows:
        print(f"{row.file}: {row.mutants} mutants, {row.survived} survived, {row.pending} pending")
    return 0

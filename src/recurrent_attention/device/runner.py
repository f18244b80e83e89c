"""Spend one GPU window on a kit's chunk: install, check, run what fits the budget, archive everything.

Runs on the GPU machine from the repository root (``scripts/device_run.py``), with the standard
library alone until the kit's wheels are installed (into a temporary folder, never the machine's
Python) and with the project on ``PYTHONPATH`` (no install, no C++ kernel build). Then: the CUDA
check, ``verify``'s checks one by one, and the chunk's jobs several at a time on the one GPU, each
launched only when its expected time fits what is left (``budget``). A failing step is logged and
the next one runs; whatever happens, one archive in ``--out`` holds every finished run's record
(summary.json, config, metrics.csv, train.log; no checkpoints), each check's output and the log.

``--smoke`` is the same code on a CPU: the smoke preset, ``trainer=cpu``, the checks' smoke forms
and a budget of seconds; the test suite runs every chunk that way.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import gzip
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from recurrent_attention.device.budget import Budget

RUNNER_JSON = "runner.json"
# Run-folder files that travel back; checkpoints never do (up to hundreds of MB, 16 MiB a file back).
KEPT_RUN_FILES = (
    "summary.json",
    "failed.json",
    "identity.json",
    "train.log",
    "config.yaml",
    "overrides.yaml",
    "metrics.csv",
)
SMOKE_SWAPS = {"preset=paper": "preset=smoke", "trainer=gpu": "trainer=cpu"}
KILL_GRACE_S = 15.0  # SIGTERM first: train.py saves its checkpoint and says so, then SIGKILL


class Log:
    """Timestamped lines to stdout and to ``runner.log`` (both come back, the file in the archive)."""

    def __init__(self, path: Path, start: float) -> None:
        self.path, self.start = path, start
        path.parent.mkdir(parents=True, exist_ok=True)

    def __call__(self, text: str) -> None:
        line = f"[{time.monotonic() - self.start:7.1f}s] {text}"
        print(line, flush=True)
        with self.path.open("a") as log:
            log.write(line + "\n")


def git_blob_id(path: Path, mode: str) -> str:
    """The id git gives a file's content (``sha1("blob <size>\\0" + bytes)``; a link's target for 120000)."""
    data = os.readlink(path).encode() if mode == "120000" else path.read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def tree_mismatches(repo: Path, tree: list[list[str]]) -> list[str]:
    """Tracked files of the kit's commit that this tree lacks or holds changed."""
    bad = []
    for mode, blob, relative in tree:
        path = repo / relative
        if not (path.is_symlink() or path.is_file()):
            bad.append(f"{relative} (missing)")
        elif git_blob_id(path, mode) != blob:
            bad.append(f"{relative} (changed)")
    return bad


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def epochs_logged(folder: Path) -> int | None:
    """Epochs a run's CSV log reached (the last logged epoch + 1), else None.

    A job stopped at a window's end brings back no result, but how far it got in how many seconds is
    the rate the next window's ``parallel`` and costs are sized by (a Wiki run is about one window
    long). Lightning's CSV logger writes every 100 steps, so the count may trail by an epoch or two.
    """
    reached = []
    for path in sorted(folder.rglob("metrics.csv")) if folder.is_dir() else []:
        with path.open(newline="") as handle:
            epochs = [int(float(row["epoch"])) for row in csv.DictReader(handle) if row.get("epoch")]
        reached += [max(epochs) + 1] if epochs else []
    return max(reached, default=None)


def test_outcomes(path: Path) -> dict[str, int]:
    """Tests per outcome in a pytest check's result log (``tests/helpers/result_log.py``), as far as
    it got: runner.json says at a glance what a check stopped at its timeout had passed."""
    if not path.is_file():
        return {}
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return dict(Counter(line["outcome"] for line in lines))


@dataclass
class JobRecord:
    overrides: list[str]
    cost: float
    status: str = "pending"  # finished, failed, killed, skipped
    reason: str = ""
    seconds: float | None = None
    returncode: int | None = None
    log: str = ""
    epochs_reached: int | None = None  # of a killed job: how far it got (:func:`epochs_logged`)


@dataclass
class Window:
    """Everything the runner learned, written to ``runner.json`` in the archive."""

    chunk: str
    commit: str
    smoke: bool
    budget_s: float
    gpu: str = ""
    steps: list[dict[str, Any]] = field(default_factory=list)
    jobs: list[JobRecord] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {**{k: v for k, v in vars(self).items() if k != "jobs"}, "jobs": [vars(j) for j in self.jobs]}


class Runner:
    def __init__(
        self,
        repo: Path,
        kit: Path,
        out: Path,
        budget_s: float,
        smoke: bool,
        parallel: int | None,
        keep_work: bool = False,
    ):
        self.repo, self.kit, self.out, self.keep_work = repo, kit, out, keep_work
        self.start = time.monotonic()
        self.manifest = json.loads((kit / "kit.json").read_text())
        self.work = Path(tempfile.mkdtemp(prefix="ra-device-"))
        self.log = Log(self.work / "runner.log", self.start)
        self.python = sys.executable
        self.parallel = parallel or int(self.manifest["parallel"])
        self.window = Window(self.manifest["chunk"], self.manifest["commit"], smoke, budget_s)
        self.env = dict(os.environ)
        self.calls: set[subprocess.Popen] = set()  # commands running now (checks beside the jobs)

    # -- setup ------------------------------------------------------------------------------------
    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def call(self, argv: list[str], timeout: float, log: Path | None = None) -> tuple[int, str]:
        """Run ``argv`` from the repository root; (exit code, output tail). A timeout is code 124.

        The output goes to ``log`` as it comes, so a check stopped at its timeout keeps what it wrote;
        the command runs in its own session, and a timeout stops all of it (a test's train.py too).
        """
        if log is not None:
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_text("")
        with log.open("a+") if log is not None else tempfile.TemporaryFile("a+") as handle:
            proc = subprocess.Popen(
                argv,
                cwd=self.repo,
                env=self.env,
                stdout=handle,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            self.calls.add(proc)
            try:
                code = proc.wait(timeout)
            except subprocess.TimeoutExpired:
                stop_group(proc)
                code = 124
                handle.write(f"\ntimed out after {timeout:.0f} s\n")
            finally:
                self.calls.discard(proc)
            handle.seek(0)
            text = handle.read()
        return code, text[-2000:]

    def install_wheels(self) -> None:
        wheels = sorted(str(p) for p in (self.kit / "wheels").glob("*.whl"))
        site = self.work / "site"
        if wheels:
            argv = [self.python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile"]
            argv += ["--no-cache-dir", "--target", str(site), *wheels]
            code, tail = self.call(argv, timeout=180)
            if code:
                self.problem(f"installing the kit's wheels failed ({code}): {tail.strip()[-300:]}")
            else:
                self.log(f"installed {len(wheels)} wheels into {site}")
        path = [str(site), str(self.repo / "src"), self.env.get("PYTHONPATH", "")]
        self.env["PYTHONPATH"] = os.pathsep.join(p for p in path if p)

    def unpack_data(self) -> Path:
        """Local files (gzipped in the kit) into the run's data folder, each checked against its sha256."""
        data_dir = self.work / "data"
        for relative, expected in self.manifest["local_data"].items():
            target = data_dir / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            with gzip.open(self.kit / "data" / f"{relative}.gz", "rb") as packed, target.open("wb") as raw:
                shutil.copyfileobj(packed, raw)
            if sha256_of(target) != expected:
                self.problem(f"{relative}: sha256 differs from the kit's record after unpacking")
        for relative, expected in self.manifest["data"].items():
            if sha256_of(self.kit / "data" / relative) != expected:
                self.problem(f"{relative}: sha256 differs from the kit's record (damaged in transit)")
        return data_dir

    def source_commit(self) -> str:
        """The kit's commit when this tree is that commit's, else the commit marked ``-dirty``."""
        bad = tree_mismatches(self.repo, self.manifest["tree"])
        if bad:
            self.problem(f"the tree differs from {self.manifest['commit'][:12]}: {', '.join(bad[:5])}")
            return self.manifest["commit"] + "-dirty"
        return self.manifest["commit"]

    def check_cuda(self) -> bool:
        probe = (
            "import torch; c = torch.cuda.is_available(); "
            "print(torch.__version__, c, c and torch.cuda.get_device_name(0))"
        )
        code, text = self.call([self.python, "-c", probe], timeout=120)
        self.log(f"torch: {text.strip()}")
        version, available, *name = text.strip().split(" ", 2) if code == 0 else ("", "False")
        self.window.gpu = name[0] if available == "True" and name else ""
        if not self.window.gpu:
            if self.window.smoke:
                self.log("no CUDA device: smoke form on the CPU")
                return True
            self.problem(f"no CUDA device (torch {version or 'failed to import'}): no job runs")
            return False
        code, text = self.call([self.python, "-c", "import hydra, omegaconf, recurrent_attention.train"], 180)
        if code:
            self.problem(f"the project does not import: {text.strip()[-300:]}")
            return False
        return True

    def problem(self, text: str) -> None:
        self.window.problems.append(text)
        self.log(f"PROBLEM: {text}")

    # -- checks and jobs -----------------------------------------------------------------------------
    def run_step(self, step: dict[str, Any]) -> None:
        """One check, on its own timeout (never past the budget); its exit code is logged, not raised."""
        argv_spec = step["smoke_argv"] if self.window.smoke else step["argv"]
        folder = self.work / "steps" / step["name"]
        folder.mkdir(parents=True, exist_ok=True)
        argv = [a.format(python=self.python, out=folder) for a in argv_spec]
        timeout = min(step["timeout_s"], max(1.0, self.window.budget_s - self.elapsed() - 30))
        started = time.monotonic()
        self.log(f"step {step['name']}: {' '.join(argv)} (timeout {timeout:.0f} s)")
        code, tail = self.call(argv, timeout, log=folder / "output.txt")
        seconds = time.monotonic() - started
        record = {"name": step["name"], "returncode": code, "seconds": round(seconds, 1)}
        outcomes = test_outcomes(folder / "results.jsonl")
        self.window.steps.append({**record, "tests": outcomes} if outcomes else record)
        self.log(f"step {step['name']}: exit {code} in {seconds:.0f} s; {tail.strip().splitlines()[-1:]}")

    def run_checks_and_jobs(self, data_dir: Path) -> None:
        """The jobs from the start, every check beside them (each in its own thread, on its own timeout).

        The window's minutes are few: a check run before the jobs would hold them back for its whole
        timeout, and a slow one would leave no time to train. Each check writes its results as they
        come (its output, the tests' result log, the benchmark's parts), so one stopped at its
        timeout, or by the window's end, keeps what it finished.
        """
        # daemons: a runner stopped early writes its archive without waiting for them (run() stops them)
        threads = [
            threading.Thread(target=self.run_step, args=(step,), daemon=True)
            for step in self.manifest["steps"]
        ]
        for thread in threads:
            thread.start()
        self.run_jobs(data_dir)
        for thread in threads:
            thread.join()

    def job_folder(self, index: int) -> Path:
        """Each job's own output folder, so the archive can leave out what a stopped job left behind."""
        return self.work / "runs" / f"job-{index:03d}"

    def job_argv(self, index: int, overrides: list[str], data_dir: Path) -> list[str]:
        if self.window.smoke:
            overrides = [SMOKE_SWAPS.get(o, o) for o in overrides]
        where = [f"paths.output_dir={self.job_folder(index)}", f"paths.data_dir={data_dir}"]
        return [self.python, "train.py", *overrides, *where, "trainer.enable_progress_bar=false"]

    def run_jobs(self, data_dir: Path) -> None:
        budget = Budget(self.window.budget_s, self.manifest.get("prior_s_per_cost"))
        if self.window.smoke:
            budget.margin_s = 2.0
        queue = [JobRecord(list(j["overrides"]), float(j["cost"])) for j in self.manifest["jobs"]]
        self.window.jobs = queue
        running: dict[int, tuple[subprocess.Popen, float, Any]] = {}
        waiting = list(range(len(queue)))
        blind = 0  # jobs launched with no estimate (the first wave)
        logs = self.work / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        try:
            while waiting or running:
                for index, (proc, started, handle) in list(running.items()):
                    if proc.poll() is None:
                        continue
                    handle.close()
                    job = queue[index]
                    job.seconds, job.returncode = round(time.monotonic() - started, 1), proc.returncode
                    job.status = "finished" if proc.returncode == 0 else "failed"
                    if job.status == "finished":
                        budget.record(job.seconds, job.cost)
                    self.log(f"job {index} {job.status} (exit {proc.returncode}) in {job.seconds:.0f} s")
                    del running[index]
                if running and self.elapsed() >= self.window.budget_s - budget.margin_s:
                    self._stop(running, queue, "the budget ran out")
                while waiting and len(running) < self.parallel:
                    index = waiting[0]
                    job = queue[index]
                    if budget.s_per_cost() is None and blind >= self.parallel and running:
                        break  # no estimate yet and the first wave is out: wait for its first result
                    decision = budget.decide(job.cost, self.elapsed(), len(running))
                    waiting.pop(0)
                    if not decision.launch:
                        job.status, job.reason = "skipped", decision.reason
                        self.log(f"job {index} skipped: {decision.reason}: {' '.join(job.overrides)}")
                        continue
                    job.log = f"logs/job-{index:03d}.log"
                    handle = (self.work / job.log).open("w")
                    argv = self.job_argv(index, job.overrides, data_dir)
                    proc = subprocess.Popen(
                        argv, cwd=self.repo, env=self.env, stdout=handle, stderr=subprocess.STDOUT
                    )
                    job.status = "running"
                    blind += budget.s_per_cost() is None
                    running[index] = (proc, time.monotonic(), handle)
                    self.log(f"job {index} started ({decision.reason}): {' '.join(job.overrides)}")
                time.sleep(0.2 if self.window.smoke else 1.0)
        finally:  # the runner itself stopped (SIGTERM, an error): its jobs stop with it
            self._stop(running, queue, "the runner was stopped")

    def _stop(self, running: dict, queue: list[JobRecord], reason: str) -> None:
        """Every job still running: SIGTERM (train.py saves its checkpoint and says so), then SIGKILL."""
        for index, (proc, started, handle) in list(running.items()):
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(KILL_GRACE_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            handle.close()
            job = queue[index]
            job.seconds, job.returncode = round(time.monotonic() - started, 1), proc.returncode
            if proc.returncode == 0:  # it finished while being stopped: its record is whole
                job.status, reached = "finished", ""
            else:
                job.status, job.reason = "killed", reason
                job.epochs_reached = epochs_logged(self.job_folder(index))
                reached = f" (epochs reached: {job.epochs_reached})"
            self.log(f"job {index} {job.status} after {job.seconds:.0f} s: {reason}{reached}")
            del running[index]

    # -- archive -------------------------------------------------------------------------------------
    def archive(self) -> Path:
        (self.work / RUNNER_JSON).write_text(json.dumps(self.window.to_json(), indent=1, default=str) + "\n")
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        self.out.mkdir(parents=True, exist_ok=True)
        path = self.out / f"device-{self.window.chunk}-{self.window.commit[:10]}-{stamp}.tar.gz"
        with tarfile.open(path, "w:gz") as tar:
            for name in (RUNNER_JSON, "runner.log"):
                if (self.work / name).is_file():
                    tar.add(self.work / name, arcname=name)
            for folder in ("steps", "logs"):
                if (self.work / folder).is_dir():
                    tar.add(self.work / folder, arcname=folder)
            # Records of jobs that ended on their own; a job stopped at the budget's end failed no
            # config, so what it left (a failed.json written while stopping) stays out; its log is in.
            for index, job in enumerate(self.window.jobs):
                if job.status not in ("finished", "failed"):
                    continue
                runs = self.job_folder(index)
                for file in sorted(runs.rglob("*")) if runs.is_dir() else []:
                    if file.is_file() and file.name in KEPT_RUN_FILES:
                        tar.add(file, arcname=str(Path("runs") / file.relative_to(runs)))
        return path

    def run(self) -> Path:
        self.log(
            f"chunk {self.window.chunk} at {self.window.commit[:12]}, budget {self.window.budget_s:.0f} s"
        )
        try:
            self.install_wheels()
            data_dir = self.unpack_data()
            self.env.update(
                RA_DATA_MIRROR=str(self.kit / "data"),
                RA_SOURCE_COMMIT=self.source_commit(),
                RA_NATIVE_KERNELS="0",
                PYTHONUNBUFFERED="1",
                OMP_NUM_THREADS=str(max(1, (os.cpu_count() or 2) // max(1, self.parallel))),
            )
            if self.check_cuda():
                self.run_checks_and_jobs(data_dir)
        except BaseException as err:  # the archive is written whatever happens, then the error goes on
            self.problem(f"runner stopped: {type(err).__name__}: {err}")
            raise
        finally:
            for proc in list(self.calls):  # checks still running when the runner stops
                stop_group(proc)
            path = self.archive()
            counts = dict(Counter(job.status for job in self.window.jobs))
            self.log(f"jobs: {counts or 'none'}; archive {path} ({path.stat().st_size / 2**20:.2f} MiB)")
            shutil.copyfile(self.work / "runner.log", self.out / "runner.log")
            if not self.keep_work:  # installed wheels, checkpoints: gigabytes on a node's /tmp
                shutil.rmtree(self.work, ignore_errors=True)
        return path


def stop_group(proc: subprocess.Popen, grace_s: float = 5.0) -> None:
    """SIGTERM to a command's whole session (it was started in its own), SIGKILL to what is left after
    ``grace_s``: a pytest check's leader may end and leave the train.py it started running."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(grace_s)


def _terminate(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Run a device kit's chunk on this machine's GPU under a wall budget; write one archive."
    )
    parser.add_argument(
        "--kit", type=Path, default=Path("device_kit"), help="the kit folder (make device-kit)"
    )
    parser.add_argument("--out", type=Path, required=True, help="where the archive and runner.log go")
    parser.add_argument(
        "--budget", type=float, default=480.0, help="wall seconds for everything (default 480)"
    )
    parser.add_argument("--parallel", type=int, default=None, help="jobs at a time (default: the chunk's)")
    parser.add_argument("--smoke", action="store_true", help="the smoke form on a CPU (tests)")
    parser.add_argument(
        "--keep-work", action="store_true", help="keep the working folder (runs with checkpoints, wheels)"
    )
    parser.add_argument("--repo", type=Path, default=Path.cwd(), help="the repository root (default: here)")
    args = parser.parse_args(argv)
    if not (args.kit / "kit.json").is_file():
        print(f"error: {args.kit}/kit.json not found: make device-kit builds the kit", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _terminate)
    runner = Runner(
        args.repo.resolve(),
        args.kit.resolve(),
        args.out.resolve(),
        args.budget,
        args.smoke,
        args.parallel,
        args.keep_work,
    )
    runner.run()
    return 1 if runner.window.problems else 0


if __name__ == "__main__":
    sys.exit(main())

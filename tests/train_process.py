"""``python train.py ...`` as a process forked from one that has already imported the project.

Importing torch, Lightning and Hydra costs about 5 CPU-seconds, most of a smoke run's cost; the
suite runs train.py some sixty times and paid it each time. Here one forkserver per test worker
imports ``recurrent_attention.train`` once and forks every run from it: each run is still its own
process (its own exit code, signals, Hydra state, working folder, environment and output files,
and DDP workers that Lightning starts as fresh interpreters from its ``sys.argv``), which begins
where ``python train.py`` would be after its imports.
"""

from __future__ import annotations

import multiprocessing
import os
import runpy
import subprocess
import sys
import tempfile
from pathlib import Path

_FORKSERVER = multiprocessing.get_context("forkserver")
_FORKSERVER.set_forkserver_preload(["recurrent_attention.train"])


def _as_the_interpreter_would(
    script: str, args: list[str], env: dict[str, str], cwd: str, out: str, err: str
) -> None:
    """Run ``script`` as ``__main__`` the way ``python script args`` does: its folder and PYTHONPATH
    first on ``sys.path``, ``sys.argv``, the environment, the working folder, and stdout/stderr
    written to the files ``out``/``err`` at the descriptor level (so child processes write there too).
    multiprocessing turns ``sys.exit(code)`` into the exit code and an exception into exit 1 with
    its traceback on stderr, as the interpreter does."""
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    sys.path[:0] = [str(Path(script).parent), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    for descriptor, path in ((1, out), (2, err)):
        opened = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(opened, descriptor)
        os.close(opened)
    sys.argv = [script, *args]
    runpy.run_path(script, run_name="__main__")


def run_script(
    script: Path, args: list[str], cwd: Path, env: dict[str, str], timeout: float
) -> subprocess.CompletedProcess[str]:
    """``subprocess.run([python, script, *args], capture_output=True, text=True, ...)``, forked."""
    with tempfile.TemporaryDirectory(prefix="train-process-") as folder:
        out, err = Path(folder, "stdout"), Path(folder, "stderr")
        process = _FORKSERVER.Process(
            target=_as_the_interpreter_would, args=(str(script), args, env, str(cwd), str(out), str(err))
        )
        process.start()
        process.join(timeout)
        if process.exitcode is None:
            process.kill()
            process.join()
            raise subprocess.TimeoutExpired([str(script), *args], timeout)
        return subprocess.CompletedProcess(
            [sys.executable, str(script), *args],
            process.exitcode,
            out.read_text(errors="replace"),
            err.read_text(errors="replace"),
        )

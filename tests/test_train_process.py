"""The forked stand-in for ``python script`` (tests/train_process.py) against the interpreter itself:
same exit code, stdout and stderr for the ways a script ends, with its argv, environment, working
folder, PYTHONPATH and child processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.train_process import run_script

SCRIPT = """
import os, signal, subprocess, sys
import helper_module  # found through PYTHONPATH only
print("argv", sys.argv[1:], "cwd", os.path.basename(os.getcwd()), "env", os.environ.get("PROBE"))
print("from stderr", file=sys.stderr)
sys.stdout.flush()
subprocess.run([sys.executable, "-c", "print('from a child process')"], check=True)
how = sys.argv[1]
if how == "exit":
    sys.exit(3)
if how == "raise":
    raise ValueError("the script failed")
if how == "signal":
    os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.slow
@pytest.mark.parametrize("how", ["return", "exit", "raise", "signal"])
def test_a_forked_script_ends_as_the_interpreter_ends_it(tmp_path: Path, how: str) -> None:
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "helper_module.py").write_text("")
    (tmp_path / "work").mkdir()
    env = {**os.environ, "PROBE": "value", "PYTHONPATH": str(tmp_path / "lib")}
    args = [how, "--flag"]
    forked = run_script(script, args, cwd=tmp_path / "work", env=env, timeout=60)
    interpreted = subprocess.run(
        [sys.executable, str(script), *args], cwd=tmp_path / "work", env=env, capture_output=True, text=True
    )
    assert forked.returncode == interpreted.returncode
    assert forked.stdout == interpreted.stdout
    assert forked.stderr.splitlines()[-1] == interpreted.stderr.splitlines()[-1]
    assert "from a child process" in forked.stdout and "from stderr" in forked.stderr

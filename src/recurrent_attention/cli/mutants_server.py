"""A fork server for ``make mutants``: each mutant's pytest run forked from a process that imported
torch, Lightning and Hydra once, instead of paying their import (~7 CPU-seconds) per mutant.

The server imports the third-party modules the test files import (learned from an unmutated run, never
``recurrent_attention`` nor ``tests``), so each forked child imports the project's sources from disk,
the mutated file included, as a new process would. cosmic-ray's test command is the client
(``python -m recurrent_attention.cli.mutants_server client ...``): it sends pytest's arguments, gets
its exit status back, and exits with it. The server enforces the per-mutant timeout itself (a child
past it is killed with its process group: exit 124), since cosmic-ray's kill reaches only the client.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

TIMEOUT_EXIT = 124


def third_party_modules(tree: Path, python: str) -> list[str]:
    """The top-level modules that importing the project's task families and pytest loads, but not
    the project's own (imported fresh by each child)."""
    code = (
        "import sys, pytest; from recurrent_attention.tasks import register_families; register_families()\n"
        "names = {m.split('.')[0] for m in sys.modules}\n"
        "print('\\n'.join(sorted(n for n in names if n not in ('recurrent_attention', 'tests', '__main__'))))"
    )
    env = {**os.environ, "PYTHONPATH": "src", "PYTHONDONTWRITEBYTECODE": "1"}
    out = subprocess.run([python, "-c", code], cwd=tree, env=env, capture_output=True, text=True, check=True)
    return [n for n in out.stdout.split() if not n.startswith("_")]


def serve(address: str, tree: str, modules: list[str]) -> None:
    """Import ``modules``, then answer each connection with one forked pytest run in ``tree``."""
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
    sys.dont_write_bytecode = True
    for name in modules:
        try:
            __import__(name)
        except Exception:  # a module that fails here is imported by the child instead
            continue
    import pytest  # noqa: F401 (in the parent, before any fork)

    Path(address).unlink(missing_ok=True)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(address)
    server.listen(1)
    print(f"mutants server ready: {len(modules)} modules preloaded", flush=True)
    while True:
        connection, _ = server.accept()
        with connection:
            request = json.loads(connection.makefile().readline())
            status = run_forked(tree, request["args"], float(request["timeout"]), request["output"])
            connection.sendall(f"{status}\n".encode())


def run_forked(tree: str, args: list[str], timeout: float, output: str) -> int:
    """pytest.main(args) in a forked child in ``tree``, its output to ``output``; its exit status."""
    child = os.fork()
    if child == 0:
        try:
            os.setsid()
            os.chdir(tree)
            sink = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(sink, 1)
            os.dup2(sink, 2)
            # The server itself runs from the checkout's package: the child must import the tree's.
            for name in [m for m in sys.modules if m.split(".")[0] in ("recurrent_attention", "tests")]:
                del sys.modules[name]
            own = str(Path(__file__).resolve().parents[2])
            sys.path[:] = [tree, str(Path(tree) / "src"), *(p for p in sys.path if p != own)]
            import pytest

            code = int(pytest.main(args))
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException:  # whatever escapes, the child must not return to the loop
            code = 3
        os._exit(code)
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(child, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status) & 0xFF
        if time.monotonic() > deadline:
            try:
                os.killpg(child, signal.SIGKILL)
            except OSError:
                os.kill(child, signal.SIGKILL)
            os.waitpid(child, 0)
            return TIMEOUT_EXIT
        time.sleep(0.05)


def client(address: str, timeout: float, output: str, args: list[str]) -> int:
    """Send one run to the server and exit with its status; a timeout prints 'timeout'."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.connect(address)
        request = {"args": args, "timeout": timeout, "output": output}
        connection.sendall((json.dumps(request) + "\n").encode())
        status = int(connection.makefile().readline())
    text = Path(output).read_text(errors="replace") if Path(output).exists() else ""
    # cosmic-ray tells a timeout from a failure by this output alone
    print("timeout" if status == TIMEOUT_EXIT else text[-4000:])
    return status


def main(argv: list[str] | None = None) -> int:
    """``serve ADDRESS TREE MODULE...`` or ``client ADDRESS TIMEOUT OUTPUT PYTEST_ARG...``."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[0] == "serve":
        serve(argv[1], argv[2], argv[3:])
        return 0
    return client(argv[1], float(argv[2]), argv[3], argv[4:])


if __name__ == "__main__":
    sys.exit(main())

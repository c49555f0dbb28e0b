"""Python code run in a process that has just imported torch, for what the device reads at its first
use (TORCH_EMU_FAULTS, TORCH_EMU_PROFILE, the launch flags...): the process is forked from a server
that imported torch once (emu autoloaded, not initialised) and then waits, so each run costs a fork
instead of an interpreter start-up and ``import torch`` (about 3 s of CPU). Everything read earlier,
at import (TORCH_EMU_RUNTIME, TORCH_EMU_NATIVE_KERNELS, the fallback flags, autoload itself), keys
its own server; a test about importing itself runs in a fresh interpreter (``conftest.run_python``).

Forking before the device's first use is what emu, like CUDA, supports (tests/test_autoload_fork.py);
the server starts no thread, so the child is the server's one thread, with the test's environment,
working directory and arguments of ``python -c``, and exits through the interpreter's own shutdown."""

import atexit
import json
import os
import subprocess
import sys
import tempfile
import textwrap

# LITERALINCLUDE START: FIRST_USE_VARIABLES
# Read by the device at its first use, not at import: a change of these does not need a new server.
FIRST_USE = frozenset({
    "TORCH_EMU_DEVICE_COUNT", "TORCH_EMU_DEVICE_MEMORY", "TORCH_EMU_STRICT", "TORCH_EMU_LAUNCH_QUEUED",
    "TORCH_EMU_LAUNCH_BLOCKING", "TORCH_EMU_PROFILE", "TORCH_EMU_FAULTS",
})
# LITERALINCLUDE END: FIRST_USE_VARIABLES

# The server: imports torch, then forks a child per request (one JSON line on stdin: code,
# environment, working directory, output files, timeout) and answers with one JSON line.
SERVER = r"""
import gc, json, os, select, signal, sys
import torch
gc.freeze()  # a child's collections leave the server's objects and their pages alone: its exit takes half as long

def serve():
    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush(); sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            return request
        pidfd = os.pidfd_open(pid)
        timed_out = not select.select([pidfd], [], [], request["timeout"])[0]
        if timed_out:
            os.kill(pid, signal.SIGKILL)
        status = os.waitpid(pid, 0)[1]
        os.close(pidfd)
        print(json.dumps({"returncode": os.waitstatus_to_exitcode(status), "timed_out": timed_out}), flush=True)
    sys.exit(0)

request = serve()
del serve
# The child: the test's environment, directory and standard streams, then its code as python -c runs it.
os.environ.clear()
os.environ.update(request["env"])
os.chdir(request["cwd"])
for fd, path, mode in ((0, os.devnull, os.O_RDONLY), (1, request["stdout"], os.O_WRONLY), (2, request["stderr"], os.O_WRONLY)):
    target = os.open(path, mode)
    os.dup2(target, fd)
    os.close(target)
sys.argv = ["-c"]
code = compile(request["code"], "<string>", "exec")
main = type(sys)("__main__")
sys.modules["__main__"] = main
del gc, json, select, signal, request, fd, path, mode, target
exec(code, main.__dict__)
"""

_servers: dict[tuple, subprocess.Popen] = {}


def _import_env(env: dict) -> tuple:
    """What a server's import saw: the environment without the first-use variables and pytest's own."""
    return tuple(sorted((k, v) for k, v in env.items() if k not in FIRST_USE and not k.startswith("PYTEST_")))


def _server(env: dict) -> subprocess.Popen:
    key = _import_env(env)
    server = _servers.get(key)
    if server is None or server.poll() is not None:
        server = subprocess.Popen([sys.executable, "-c", SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  text=True, env=dict(key))
        _servers[key] = server
    return server


@atexit.register
def _stop_servers() -> None:
    for server in _servers.values():
        server.stdin.close()
        server.wait(timeout=30)


def run_after_import(code: str, timeout: float = 120, **env) -> subprocess.CompletedProcess:
    """Runs ``code`` (dedented) as ``python -c`` would right after ``import torch``, with ``env``
    added to the environment."""
    env = {**os.environ, **env}
    server = _server(env)
    with tempfile.TemporaryDirectory() as scratch:
        out, err = os.path.join(scratch, "stdout"), os.path.join(scratch, "stderr")
        for path in (out, err):
            open(path, "w").close()
        server.stdin.write(json.dumps({"code": textwrap.dedent(code), "env": env, "cwd": os.getcwd(),
                                       "stdout": out, "stderr": err, "timeout": timeout}) + "\n")
        server.stdin.flush()
        answer = server.stdout.readline()
        if not answer:
            raise RuntimeError(f"the server that imported torch died (exit status {server.wait()}); "
                               "a test of a failing import runs in a fresh interpreter: conftest.run_python")
        answer = json.loads(answer)
        with open(out, encoding="utf-8", errors="replace") as o, open(err, encoding="utf-8", errors="replace") as e:
            stdout, stderr = o.read(), e.read()
    args = [sys.executable, "-c", code]
    if answer["timed_out"]:
        raise subprocess.TimeoutExpired(args, timeout, stdout, stderr)
    return subprocess.CompletedProcess(args, answer["returncode"], stdout, stderr)

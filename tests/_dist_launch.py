"""Launching one process per rank for the distributed tests: 127.0.0.1, a
free port picked at run time, the environment torchrun gives its workers,
and a bounded timeout after which every rank is killed."""

import os
import pathlib
import socket
import subprocess
import sys
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_env(rank, world, port, extra=None):
    env = dict(os.environ)
    env.update(
        RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world),
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), GLOO_SOCKET_IFNAME=env.get("GLOO_SOCKET_IFNAME", "lo"),
        OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""),
    )
    env.update(extra or {})
    return env


def launch(script, args, world=2, timeout=45, ranks=None, extra_env=None):
    """Runs ``python script *args`` as ``ranks`` (default: all) of a
    ``world``-rank job, with the environment torchrun gives its workers;
    returns [(returncode, stdout, stderr)] per rank."""
    port = free_port()
    procs = [
        subprocess.Popen([sys.executable, str(script), *args], env=rank_env(r, world, port, extra_env),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for r in (range(world) if ranks is None else ranks)
    ]
    deadline = time.monotonic() + timeout
    results = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
            results.append((p.returncode, out, err))
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        outs = [p.communicate() for p in procs]
        pytest.fail(f"{args} timed out after {timeout}s:\n" + "\n".join(o[1][-3000:] for o in outs))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return results


def assert_ok(results):
    for rank, (rc, out, err) in enumerate(results):
        assert rc == 0, f"rank {rank} exited {rc}:\n{out}\n{err[-4000:]}"

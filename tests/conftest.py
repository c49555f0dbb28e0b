import gc
import os
import random
import shlex
import subprocess
import sys
import textwrap
import zlib

import numpy
import pytest
import torch

import torch_emu  # noqa: F401  (also loaded by autoload; explicit for clarity)


# For the tests of what only the native runtime does (strict mode's memory
# protection, faults, graphs, IPC...): skipped under TORCH_EMU_RUNTIME=python.
native_runtime_only = pytest.mark.skipif(
    torch_emu.runtime.active() != "native", reason="a feature of the native runtime"
)


def run_python(code: str, **env) -> subprocess.CompletedProcess:
    """Runs ``code`` (dedented) in a fresh interpreter with ``env`` added to
    the environment; imported by the tests as ``from conftest import run_python``."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
    )


@pytest.fixture
def command_here(capsys):
    """``python -m torch_emu ARGS`` (or another command line's ``main``, e.g. the kit's) run in this
    process, as (exit status, stdout, stderr): for command lines refused before anything runs,
    where a process of its own would add only its start-up (about 2.5 s of CPU, most of these
    tests' cost)."""
    from torch_emu.__main__ import main as torch_emu_main

    def run(*args: str, main=torch_emu_main) -> tuple[int, str, str]:
        try:
            status = main(list(args))
        except SystemExit as exit:  # refused by the parser
            status = exit.code
        out, err = capsys.readouterr()
        return status, out, err

    return run


def first_use_errors(**env) -> list[str]:
    """The device's first use, twice, in a process that has just imported torch,
    with ``env``: each time the initialisation error's type and message (a bad
    setting must fail every use alike)."""
    from _after_import import run_after_import  # here: tests/test_failure_report.py runs this file alone

    result = run_after_import("""
        import torch
        for _ in range(2):
            try:
                torch.ones(1, device="emu")
            except RuntimeError as e:
                print(type(e).__name__, str(e).split("initialisation failed: ")[1])
    """, **env)
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def pytest_collection_finish(session):
    """Freezes the objects alive after collection (PyTorch's OpInfo, ModuleInfo
    and OptimizerInfo databases are ~250k objects) out of the garbage
    collector's reach: they live for the whole run, and the gc.collect() of
    every leak check would otherwise walk them all (~0.4 s a call)."""
    gc.collect()
    gc.freeze()


@pytest.fixture(scope="module", autouse=True)
def freeze_module_survivors():
    """Freezes what a test file leaves alive for the rest of the run (Dynamo's
    and Inductor's caches after the compile tests, ~150k objects), for the
    same reason: otherwise every later leak check walks them, and the files
    after test_compile.py ran ~6x slower (module parity: 5 s alone, 34 s after
    it, 30 s of it in the garbage collector)."""
    yield
    gc.collect()
    gc.freeze()


@pytest.fixture
def baseline_memory(request):
    """Asserts that a test leaves allocated emu memory where it found it. A test
    that failed is not checked: its traceback holds its tensors, and a leak
    report would only repeat the failure. Nor is the next one charged with
    them: pytest keeps the last failure (sys.last_traceback) until the next
    test's call, after this fixture measured, so it is dropped here first."""
    for name in ("last_type", "last_value", "last_traceback", "last_exc"):
        sys.__dict__.pop(name, None)
    torch.emu.synchronize()
    gc.collect()
    before = [torch.emu.memory_allocated(i) for i in range(torch.emu.device_count())]
    yield
    if getattr(request.node, "emu_call_failed", False):
        return
    gc.collect()
    for i in range(torch.emu.device_count()):
        torch.emu.synchronize(i)
    after = [torch.emu.memory_allocated(i) for i in range(torch.emu.device_count())]
    assert after == before, f"emu memory leaked: {before} -> {after}"


# LITERALINCLUDE START: REPRODUCE
def _seed_of(nodeid: str) -> int:
    return zlib.crc32(nodeid.encode())


@pytest.fixture(autouse=True)
def seeded(request):
    """Seeds every test from its own name: its random inputs do not depend on which tests ran
    before it in the process (pytest workers take files in any order), so a failing test run
    alone sees the same numbers."""
    seed = _seed_of(request.node.nodeid)
    torch.manual_seed(seed)
    random.seed(seed)
    numpy.random.seed(seed)


def reproduction(nodeid: str) -> str:
    """How to run a test again as it ran: the launch mode, runtime, seed and every TORCH_EMU_*
    variable of this run, and the command."""
    settings = {k: v for k, v in sorted(os.environ.items()) if k.startswith("TORCH_EMU_")}
    command = " ".join([*(f"{k}={shlex.quote(v)}" for k, v in settings.items()),
                        "TORCH_EMU_TEST_WORKERS=0", "bash scripts/test.sh", shlex.quote(nodeid)])
    return (f"launch mode: {torch_emu._C._launch_mode()}, runtime: {torch_emu.runtime.active()}, "
            f"seed: {_seed_of(nodeid)} (torch, random and numpy, set from the test's name)\n"
            f"environment: {' '.join(f'{k}={v}' for k, v in settings.items()) or 'no TORCH_EMU_* variable set'}\n"
            f"again: {command}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    report = (yield).get_result()
    if report.failed:
        report.sections.append(("how to reproduce", reproduction(item.nodeid)))
        if report.when == "call":
            item.emu_call_failed = True  # baseline_memory's teardown skips its check
# LITERALINCLUDE END: REPRODUCE

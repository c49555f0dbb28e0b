"""The test helper that runs code in a child forked from a server that imported torch
(tests/_after_import.py): the child is what ``python -c`` gives right after ``import torch``."""

import subprocess

import pytest
from _after_import import _servers, run_after_import


def test_the_child_is_a_fresh_python_dash_c_after_import_torch(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = run_after_import("""
        import os, sys, torch
        print(sys.argv, __name__, "torch" in sys.modules, torch.emu.is_initialized(), os.getcwd())
        print(torch.emu.device_count(), os.environ["TORCH_EMU_DEVICE_COUNT"])
        print("to stderr", file=sys.stderr)
    """, TORCH_EMU_DEVICE_COUNT="3")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [f"['-c'] __main__ True False {tmp_path}", "3 3"]
    assert r.stderr == "to stderr\n"


def test_a_first_use_variable_does_not_start_another_server():
    run_after_import("pass")
    servers = dict(_servers)
    for count in ("1", "2"):
        assert run_after_import("import torch; print(torch.emu.device_count())",
                                TORCH_EMU_DEVICE_COUNT=count).stdout == f"{count}\n"
    assert _servers == servers


def test_exit_status_exceptions_and_crashes_are_the_processs():
    assert run_after_import("import sys; sys.exit(3)").returncode == 3
    r = run_after_import("raise ValueError('bad input')")
    assert r.returncode == 1 and r.stderr.strip().endswith("ValueError: bad input")
    assert run_after_import("import os, signal; os.kill(os.getpid(), signal.SIGABRT)").returncode == -6


def test_a_child_that_outlives_its_timeout_is_killed():
    with pytest.raises(subprocess.TimeoutExpired):
        run_after_import("import time; time.sleep(60)", timeout=1)
    assert run_after_import("print('next')").stdout == "next\n"  # the server goes on

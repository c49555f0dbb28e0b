"""Distributed without ceremony: ``import torch`` alone makes ``emu_gloo`` the
c10d backend of emu (registered by autoload, its code loaded on first use), so
a plain torchrun script needs no ``import torch_emu.distributed``.

The worker, tests/_dist_plain_script.py, imports only torch and
torch.distributed; each test runs it as 2 ranks on 127.0.0.1 with a bounded
timeout.
"""

import subprocess
import sys

import pytest
import torch
from _dist_launch import ROOT, assert_ok, free_port, launch, rank_env
from conftest import run_python
from _after_import import run_after_import

SCRIPT = ROOT / "tests" / "_dist_plain_script.py"

pytestmark = pytest.mark.skipif(
    not (torch.distributed.is_available() and torch.distributed.is_gloo_available()),
    reason="needs torch.distributed with Gloo",
)


def test_import_torch_registers_lazily():
    r = run_after_import(
        """
        import sys
        import torch
        from torch.distributed import Backend
        assert Backend.default_device_backend_map["emu"] == "emu_gloo"
        assert Backend.backend_capability["emu_gloo"] == ["emu"]
        assert torch.distributed.get_default_backend_for_device("emu") == "emu_gloo"
        # the process group code is not loaded until a group is created
        assert "torch_emu.distributed.backend" not in sys.modules
        print("ok")
        """
    )
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr[-3000:]


def test_no_registration_without_autoload():
    r = run_python(
        """
        import torch
        from torch.distributed import Backend
        assert "emu" not in Backend.default_device_backend_map
        assert "emu_gloo" not in Backend.backend_list
        import torch_emu  # an explicit import registers as autoload does
        assert Backend.default_device_backend_map["emu"] == "emu_gloo"
        print("ok")
        """,
        TORCH_DEVICE_BACKEND_AUTOLOAD="0",
    )
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr[-3000:]


@pytest.mark.parametrize("mode", ["plain", "device_id"])
def test_plain_script_init_process_group(mode):
    results = launch(SCRIPT, [mode], timeout=50)
    assert_ok(results)
    assert all(f"OK {mode}" in out for _, out, _ in results)


@pytest.mark.parametrize("mode", ["fsdp2", "tp"])
def test_device_mesh_training_matches_cpu(mode):
    # init_device_mesh("emu", (2,)) creates the default group itself
    results = launch(SCRIPT, [mode], timeout=58)
    assert_ok(results)
    assert all(f"OK {mode}" in out for _, out, _ in results)


def test_torchrun_plain_script():
    port = free_port()
    env = rank_env(0, 1, port)
    for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", "2",
           "--rdzv-backend", "c10d", f"--rdzv-endpoint=127.0.0.1:{port}", "--max-restarts", "0",
           str(SCRIPT), "device_id"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=58)
    assert r.returncode == 0, r.stdout + r.stderr[-4000:]
    assert "OK device_id rank 0" in r.stdout and "OK device_id rank 1" in r.stdout, r.stdout


@pytest.mark.parametrize(
    "device_id, error",
    [
        (torch.device("emu"), "device_id with index"),
        (torch.device("emu", 64), "out of range"),
    ],
)
def test_bad_device_id_is_a_clear_error(device_id, error, baseline_memory):
    # c10d checks the device before any rendezvous
    with pytest.raises(ValueError, match=error):
        torch.distributed.init_process_group(device_id=device_id, init_method="tcp://127.0.0.1:1",
                                             rank=0, world_size=1)
    assert not torch.distributed.is_initialized()
